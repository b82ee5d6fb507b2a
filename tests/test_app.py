"""The dashboard through streamlit.testing.v1.AppTest: every page for every built-in model and for
an uploaded real model, a widget change that moves a KPI, bad uploads, and a shareable link."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import mapper
from app_pages import session, ui
from app_pages.defaults import DEFAULTS
from mapper.cli.main import main
from tests.conftest import APP, PAGES
from tests.security.test_formulas import downloads

BERT_TINY = Path(__file__).parent / "models" / "hf_bert_tiny.onnx"
TIMEOUT = 120  # llama2-70b maps in seconds on a slow CI machine; resnet50 in ~50 ms


def start(**query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({k: str(v) for k, v in query.items()})
    return at.run()


def state(at: AppTest) -> session.DashboardState:
    """The dashboard's one session object (app_pages/session.py)."""
    return at.session_state[session.KEY]


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    """Hand the sidebar a model as its uploader would, on the next run."""
    current = at.session_state[session.KEY] if session.KEY in at.session_state else session.DashboardState()
    at.session_state[session.KEY] = replace(current, pending_upload=(name, data))
    return at


def assert_clean(at: AppTest, where: str) -> None:
    assert not at.exception, f"{where}: {[e.value for e in at.exception]}"
    assert not at.error, f"{where}: {[e.value for e in at.error]}"


def visit_every_page(at: AppTest, label: str) -> None:
    for page in PAGES:
        at.switch_page(f"app_pages/{page}.py").run()
        assert_clean(at, f"{label} / {page}")
        assert at.title and at.title[0].value.lower() == page, (
            f"{label}: landed on {at.title[0].value if at.title else '?'}"
        )


def shown(markdown: str) -> str:
    """What a markdown string with escaped names (app_pages/ui.md) shows: its backslash escapes dropped."""
    return re.sub(r"\\(.)", r"\1", markdown)


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


# a CNN and a decoder render every page in the fast tier; every built-in in the slow tier (1.5-7 s each)
FAST_BUILTINS = ("resnet50", "gpt2-small")


@pytest.mark.parametrize(
    "model", [m if m in FAST_BUILTINS else pytest.param(m, marks=pytest.mark.slow) for m in mapper.ZOO_NAMES]
)
def test_every_page_renders_for_each_builtin(model):
    at = start(model=model)
    assert_clean(at, model)
    assert state(at).doc["model"]["name"] == model
    visit_every_page(at, model)


def test_opens_on_resnet50_h100_with_results():
    at = start()
    assert_clean(at, "default")
    doc = state(at).doc
    assert (doc["model"]["name"], doc["hardware"]["name"]) == ("resnet50", "h100-sxm")
    assert "Verdict" in at.markdown[0].value or any("Verdict" in m.value for m in at.markdown)
    assert metric(at, "Throughput").endswith("/s") and metric(at, "Throughput") != "—"


def test_a_model_that_does_not_fit_leads_with_capacity():
    """Llama-2-70B on one H100: the verdict names the capacity failure and the smallest fitting TP first,
    its owner is the runtime systems engineer, and the KPIs are marked unreachable on one device."""
    at = start(model="llama2-70b")
    assert_clean(at, "llama2-70b")
    verdict = next(m.value for m in at.markdown if "Verdict" in m.value)
    assert "First failure: capacity; owner: runtime systems engineer" in verdict
    assert "does not fit" in verdict and "smallest fit TP" in verdict
    assert any("Unreachable on this device" in w.value for w in at.warning)


def test_uploaded_real_model_renders_every_page():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, BERT_TINY.name, BERT_TINY.read_bytes())
    at.run()
    assert_clean(at, "upload")
    assert at.session_state["model"] == "(uploaded model)"
    assert {shown(n.label) for n in at.number_input} >= {"batch", "seq"}  # its symbolic dims are bound in the sidebar
    assert state(at).doc["model"]["dims"]["seq"] == 128
    assert state(at).doc["model"]["name"] == "hf_bert_tiny"  # the file's name, not "main_graph"
    visit_every_page(at, "hf_bert_tiny upload")


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_uploaded_optimum_llm_export_renders_every_page():
    """An Optimum LLM export (dims batch_size, sequence_length, past_sequence_length; KV-cache inputs) on
    every page: the dims its own names, a decode step's cache length, serving by its batch dim."""
    path = BERT_TINY.parent / "optimum_llama_tiny_with_past.onnx"
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, path.name, path.read_bytes())
    at.run()
    assert_clean(at, "optimum upload")
    at.number_input(key="dim_past_sequence_length").set_value(1024).run()
    assert state(at).doc["model"]["dims"]["past_sequence_length"] == 1024
    visit_every_page(at, "optimum_llama_tiny_with_past upload")


def test_uploaded_optimum_merged_decoder_binds_its_branch_in_the_sidebar():
    """Optimum's merged decoder (one If on use_cache_branch): the branch input is offered beside the dims,
    the with-past branch maps by default, and switching it to 0 maps the other branch."""
    path = BERT_TINY.parent / "optimum_gpt2_tiny_merged.onnx"
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, path.name, path.read_bytes())
    at.run()
    assert_clean(at, "merged decoder upload")
    assert {shown(n.label) for n in at.number_input} >= {"use_cache_branch", "past_sequence_length", "batch_size"}
    doc = state(at).doc
    assert doc["model"]["name"] == "optimum_gpt2_tiny_merged" and not doc["unmodeled"]
    assert doc["model"]["dims"]["use_cache_branch"] == 1
    assert doc["model"]["dims"]["past_sequence_length"] == 0  # an uploaded cache length starts empty (a prefill)
    at.number_input(key="dim_use_cache_branch").set_value(0).run()
    assert_clean(at, "merged decoder, branch 0")
    assert state(at).doc["model"]["dims"]["use_cache_branch"] == 0
    assert state(at).doc["model"]["sha256"] != doc["model"]["sha256"]


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_uploaded_int8_model_renders_every_page_at_int8():
    """ONNX Runtime's QDQ-quantized ResNet-50 (tests/models/export_quantized.py)."""
    path = BERT_TINY.parent / "resnet50_int8_qdq.onnx"
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, path.name, path.read_bytes())
    at.run()
    assert_clean(at, "int8 upload")
    assert state(at).doc["totals"]["dtype"] == "int8" and not state(at).doc["unmodeled"]
    visit_every_page(at, "resnet50_int8_qdq upload")


@pytest.mark.parametrize("payload", [b"not an onnx file", b"\x08\x07" + b"\xff" * 64, b""])
def test_bad_upload_shows_error_and_keeps_previous_model(payload):
    at = start()
    before = state(at).doc["model"]["sha256"]
    upload(at, "evil.onnx", payload)
    at.run()
    assert not at.exception
    assert at.error and "evil.onnx" in shown(at.error[0].value) and "MB" in at.error[0].value
    assert state(at).doc["model"]["sha256"] == before


def test_changing_batch_changes_throughput():
    at = start()
    before = metric(at, "Throughput")
    at.number_input(key="dim_batch").set_value(32).run()
    assert_clean(at, "batch 32")
    assert state(at).doc["model"]["dims"]["batch"] == 32
    assert metric(at, "Throughput") != before


def test_query_params_open_the_same_view_and_follow_changes():
    at = start(
        model="bert-base", hw="a100-sxm-80gb", batch=4, seq=64, dtype="bf16", fusion="aggressive", page="kernels"
    )
    assert_clean(at, "link")
    doc = state(at).doc
    assert (doc["model"]["name"], doc["hardware"]["name"]) == ("bert-base", "a100-sxm-80gb")
    assert doc["model"]["dims"] == {"batch": 4, "seq": 64}
    assert (doc["totals"]["dtype"], doc["options"]["fusion"]) == ("bf16", "aggressive")
    assert at.title[0].value == "Kernels"
    at.selectbox(key="dtype").set_value("fp16").run()
    assert at.query_params["dtype"] == ["fp16"] or at.query_params["dtype"] == "fp16"


def test_unsupported_dtype_is_an_error_in_the_page_not_a_crash():
    at = start(hw="l4")
    at.selectbox(key="dtype").set_value("fp32").run()
    at.selectbox(key="hw").set_value("cpu-x86").run()
    at.selectbox(key="dtype").set_value("fp8").run()
    assert not at.exception
    assert state(at).doc  # the last mapping that worked stays on screen


def test_edited_profile_is_validated_per_field():
    at = start()
    at.session_state[session.KEY] = replace(state(at), custom_hw=mapper.load_hardware("h200-sxm"))
    at.run()
    at.selectbox(key="hw").set_value("(custom profile)").run()
    assert_clean(at, "custom")
    assert state(at).doc["hardware"]["name"] == "h200-sxm"


def test_presentation_mode_enlarges_type():
    """KPI values clearly larger than their labels (the CSS the page carries), labels wrapped, not cut."""
    at = start()
    at.toggle(key="presentation").set_value(True).run()
    assert_clean(at, "presentation")
    css = next(h.proto.body for h in at.get("html") if "stMetricLabel" in h.proto.body and "clip" in h.proto.body)
    value = float(re.search(r'stMetricValue"\] p \{ font-size: ([\d.]+)rem', css).group(1))
    label = float(re.search(r'stMetricLabel"\] p \{ font-size: ([\d.]+)rem', css).group(1))
    assert value >= 2 * label and "text-overflow: clip" in css


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_tensor_parallel_degree_changes_the_device_plan():
    at = start()
    at.session_state["model"] = "llama2-70b"
    at.session_state["dtype"] = "bf16"
    at.run()
    at.switch_page("app_pages/devices.py").run()
    assert_clean(at, "devices tp=1")
    assert any("Does not fit" in w.value for w in at.warning)
    at.session_state["tp"] = 8
    at.run()
    assert_clean(at, "devices tp=8")
    assert any("Fits" in s.value for s in at.success)
    assert metric(at, "Collectives per batch") != "0"


@pytest.mark.slow  # runs the model on ONNX Runtime, then calibrates: ~5 s
def test_validation_page_measures_and_calibrates_a_small_model():
    at = start()
    at.session_state["model"] = "mobilenetv2"
    at.run()
    at.switch_page("app_pages/validation.py").run()
    assert_clean(at, "validation before")
    at.button[0].click().run(timeout=300)
    assert_clean(at, "validation after measuring")
    assert metric(at, "Measured p50") not in ("", "—")
    assert any("Calibration" in h.value for h in at.subheader)
    at.switch_page("app_pages/export.py").run()
    assert_clean(at, "export with measured")
    assert any("Measured sheet" in c.value for c in at.caption)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "args"),
    [
        (
            {"model": "bert-base", "batch": 2, "seq": 128, "dtype": "bf16"},
            ["bert-base", "--batch", "2", "--seq", "128"],
        ),
        ({"model": "resnet50", "hw": "a100-sxm-80gb", "fusion": "none"}, ["resnet50", "--hw", "a100-sxm-80gb"]),
    ],
)
def test_export_sheet_is_the_cli_document(query, args, capsys):
    """The dashboard's Export JSON of a slice is `mapper map --json` of the same slice (less created_utc),
    its Serving and assessment sections included: both run mapper.assess_slice, here at a given rate."""
    query = {**query, "rate_per_s": 100}
    flags = [f"--{k}={v}" for k, v in query.items() if k in ("dtype", "fusion")] + ["--rate=100", "--load-curve"]
    assert main(["map", *args, *flags, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    at = start(**query, page="export")
    assert_clean(at, f"export {query}")
    shown = json.loads(downloads(at)["Mapping document (.json)"])
    assert "serving" in shown and shown["serving"]["requests"] > 0
    for doc in (cli, shown):
        doc.pop("created_utc")
    assert shown == cli


def test_sweep_page_holds_an_uploaded_llm_exports_past_length():
    """The Sweep page sweeps batch and seq for an Optimum upload and holds its KV-cache length at the
    sidebar's value (without it every slice would be unbound)."""
    path = BERT_TINY.parent / "optimum_gpt2_tiny_with_past.onnx"
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, path.name, path.read_bytes())
    at.run()
    at.number_input(key="dim_past_sequence_length").set_value(256).run()
    at.switch_page("app_pages/sweep.py").run()
    at.multiselect(key="sweep_seqs").set_value([1, 64]).run()
    at.button[0].click().run()
    assert_clean(at, "sweep of an upload")
    assert len(at.get("plotly_chart")) == 3 and not at.warning


def test_serving_and_power_vary_an_uploads_batch_dim_whatever_its_name():
    """An Optimum export calls its batch dim batch_size: the Power page's curve varies it (it varied only a
    dim named batch, so an upload's batches all cost one batch-1 step and batching looked free), and the
    Serving page serves this decoder by continuous batching, as `mapper serve` does."""
    path = BERT_TINY.parent / "optimum_gpt2_tiny_with_past.onnx"
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, path.name, path.read_bytes())
    at.run()
    sel = state(at).selection
    at.switch_page("app_pages/power.py").run()
    assert_clean(at, "power of an upload")
    assert not [i for i in at.info if "no batch dim" in i.value] and at.get("plotly_chart")
    points = mapper.power_curve(
        path.read_bytes(), mapper.load_hardware("h100-sxm"), mapper.PlanOptions(), (1, 64), dict(sel.dims)
    )
    assert points[1].latency_s > points[0].latency_s  # batch 64 is not the batch-1 step
    at.session_state["rate_per_s"] = 1.0  # a given load: its percentiles (none at the derived saturation rate)
    at.switch_page("app_pages/serving.py").run()
    assert_clean(at, "serving of an upload")
    assert {m.label for m in at.metric} >= {"TTFT p99", "TPOT p99"}


SERVE_ARGS = {  # the sidebar's defaults and a rate, as `mapper serve` options: the mapped batch, the slice's context
    "decoder": ["gpt2-small", "--rate", "1"],
    "queue": [
        "resnet50",
        "--max-wait-ms",
        str(DEFAULTS["max_wait_ms"]),
        "--rate",
        "500",
        "--load-curve",
    ],
}
RATES = {"decoder": 1, "queue": 500}
SHOWN = {
    "decoder": {
        "TTFT p50": "ttft_p50_s",
        "TTFT p95": "ttft_p95_s",
        "TTFT p99": "ttft_p99_s",
        "TPOT p50": "tpot_p50_s",
        "TPOT p95": "tpot_p95_s",
        "TPOT p99": "tpot_p99_s",
        "Request latency p99": "latency_p99_s",
    },
    "queue": {"p50": "p50_s", "p95": "p95_s", "p99": "p99_s"},
}


@pytest.mark.parametrize("kind", ["decoder", "queue"])
def test_serving_page_shows_what_mapper_serve_reports(kind, capsys):
    """The Serving page runs the CLI's simulation (mapper.serve_model): for a decoder, continuous batching
    with TTFT/TPOT (it showed a request queue for Llama); for other models the request queue. Same figures."""
    assert main(["serve", *SERVE_ARGS[kind], "--hw", "h100-sxm", "--json"]) == 0
    section = json.loads(capsys.readouterr().out)
    at = start(model=SERVE_ARGS[kind][0], page="serving", rate_per_s=RATES[kind])
    assert_clean(at, f"serving {kind}")
    assert at.title[0].value == "Serving"
    shown_metrics = {m.label: m.value for m in at.metric}
    assert {label: shown_metrics.get(label) for label in SHOWN[kind]} == {
        label: ui.ms(section[key]) for label, key in SHOWN[kind].items()
    }


def edit_a_profile_badly():
    """An AppTest script: the sidebar's hardware section after the editor applied two bad values."""
    import mapper
    from app_pages import hwform

    base = mapper.load_hardware("h100-sxm")
    hwform._accept(
        lambda: mapper.edit_profile(base, {"compute.clock_hz": -5.0, "power.idle_w": -1.0}),
        "edited profile",
        "(custom profile)",
    )
    hwform.hardware_section("(custom profile)")


def test_profile_editor_shows_one_line_per_bad_field():
    """The editor's errors are the engine's, one per field (ProfileError.fields), not a message cut at '; '."""
    at = AppTest.from_function(edit_a_profile_badly, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    lines = [shown(e.value) for e in at.error]
    assert len(lines) == 2, lines
    assert [line.split(" must ")[0] for line in lines] == [
        "edited profile: field compute.clock_hz",
        "edited profile: field power.idle_w",
    ]
    assert state(at).custom_hw is None  # nothing invalid became the profile


def test_overview_groups_repeated_layers_under_their_module_path():
    """Llama-2-7B's top bottlenecks are the kernels' names (module path and what it is) with the layer as "*"
    and the count ("model.layers.*.mlp.up_proj · matmul + mul x 32"), each once: not five copies of one
    layer's kernel."""
    at = start(model="llama2-7b")
    assert_clean(at, "llama2-7b")
    top = at.dataframe[0].value
    assert "model.layers.*.mlp.up_proj · matmul + mul x 32" in list(top["kernel"])
    assert top["kernel"].is_unique and len(top) == 5
    assert top["share"].iloc[0] > 0.1  # 32 layers' share together, not one layer's 1-3%


def test_kernels_page_toggle_groups_repeated_layers():
    at = start(model="llama2-7b")
    at.switch_page("app_pages/kernels.py").run()
    flat = len(at.dataframe[0].value)
    at.toggle(key="group_layers").set_value(True).run()
    assert_clean(at, "kernels grouped")
    grouped = at.dataframe[0].value
    assert len(grouped) < flat and grouped["kernel"].is_unique
    row = grouped.set_index("kernel").loc["model.layers.*.mlp.down_proj · matmul + add x 32"]
    assert row["count"] == 32
    # in the flat table's unit (µs), not raw seconds (a 32-layer GEMM group of Llama-2-7B takes milliseconds)
    assert "time (µs)" in grouped.columns and "time (s)" not in grouped.columns
    assert row["time (µs)"] > 100.0


def test_hardware_page_shows_the_profiles_evidence_as_plain_text():
    at = start()
    at.selectbox(key="hw").set_value("mi300x").run()
    at.switch_page("app_pages/hardware.py").run()
    assert_clean(at, "hardware mi300x")
    evidence = mapper.load_hardware("mi300x").evidence
    assert evidence is not None
    shown_text = [t.value for t in at.text]
    assert f"Obtained: {evidence.obtained}" in shown_text and f"Checked: {evidence.checked}" in shown_text


def test_training_mode_renders_the_step_on_its_pages():
    """The sidebar's training mode: Overview, Layers, Devices and Review render `mapper train`'s document, the
    Export page offers its sheet with the memory breakdown."""
    at = start(model="gpt2-small")
    at.session_state["training"] = True
    at.session_state["train_seq"] = 512
    at.session_state["train_global_batch"] = 4
    at.run()
    assert_clean(at, "training overview")
    doc = state(at).training
    assert doc is not None and doc["options"]["seq"] == 512
    assert metric(at, "Step time") == mapper.format_duration(doc["totals"]["step_time_s"])
    for page in ("layers", "devices", "review", "export"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert_clean(at, f"training / {page}")
        assert at.title[0].value.lower() == page
    sheet = mapper.training_sheet(doc)
    assert {r["item"] for r in sheet if r["section"] == "memory per device"} >= {"weights", "activations", "per device"}


def test_a_link_opens_the_training_mode():
    """The training mode's choices ride in the link: a pasted one opens the same step."""
    at = start(model="gpt2-small", training="on", train_seq=256, train_global_batch=2, train_recompute="full")
    assert_clean(at, "training link")
    doc = state(at).training
    assert doc is not None and doc["options"]["seq"] == 256 and doc["options"]["recompute"] == "full"
    assert at.query_params["train_seq"] in ("256", ["256"]) and at.query_params["training"] in ("on", ["on"])
