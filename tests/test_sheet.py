"""The mapping sheet writers: every format reads back to the result's own numbers, and HTML is safe."""

from __future__ import annotations

import dataclasses
import html
import io
import json
import re
from pathlib import Path

import openpyxl
import pandas as pd
import pytest
from onnx import TensorProto, helper

import mapper
from mapper.cli.main import main
from mapper.report.charts import layer_share_figure, roofline_figure, timeline_figure
from mapper.report.sheet import frames_from_document, sheet_bytes, sheet_frames, write_sheet, xlsx_bytes
from tests.conftest import make_model, tensor

HOSTILE = "<script>alert(1)</script>"
CORE_SHEETS = [
    "Summary",
    "Kernels",
    "Kernel groups",
    "Layer types",
    "Fusion plan",
    "Assumptions",
    "Provenance",
    "Unmodeled",
]
# every mapping also carries its memory-capacity and device-placement sections
MAPPING_SHEETS = CORE_SHEETS + ["Precision", "Memory", "Parallel"]
EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", re.IGNORECASE)


def _numeric(column: pd.Series) -> bool:
    """Excel keeps no int/float distinction (700.0 reads back as 700): numeric, not text, not bool."""
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


@pytest.fixture(scope="module")
def result(h100):
    return mapper.map_workload(mapper.load_workload("resnet50", {"batch": 8}), h100, mapper.PlanOptions(dtype="bf16"))


@pytest.fixture(scope="module")
def hostile_result(h100):
    """A graph whose node and tensor names are HTML: an upload can name things anything."""
    nodes = [
        helper.make_node("Relu", ["x"], [HOSTILE + "y"], name=HOSTILE),
        helper.make_node("Exp", [HOSTILE + "y"], ["z"], name=HOSTILE + "2"),
    ]
    model = make_model(
        nodes, [tensor("x", [4, 1024], TensorProto.FLOAT16)], [tensor("z", [4, 1024], TensorProto.FLOAT16)]
    )
    return mapper.map_workload(mapper.load_workload(model), h100, mapper.PlanOptions())


@pytest.fixture(scope="module")
def xlsx(result, tmp_path_factory):
    path = write_sheet(result, tmp_path_factory.mktemp("sheet") / "resnet.xlsx")
    return path, pd.read_excel(path, sheet_name=None)


def test_xlsx_has_every_sheet_and_freezes_the_header(xlsx):
    path, sheets = xlsx
    assert list(sheets) == MAPPING_SHEETS
    book = openpyxl.load_workbook(path)
    for ws in book.worksheets:
        assert ws.freeze_panes == "A2"
        assert ws.column_dimensions["A"].width >= 8


def test_xlsx_numbers_read_back_as_numbers_equal_to_the_result(xlsx, result):
    _, sheets = xlsx
    kernels = sheets["Kernels"]
    assert len(kernels) == len(result.kernels)
    for column in (
        "time_s",
        "start_s",
        "flops",
        "dram_bytes",
        "stall_fraction",
        "achieved_flops_per_s",
        "intensity_flop_per_byte",
        "wave_efficiency",
        "energy_j",
        "share",
    ):
        assert _numeric(kernels[column]), column
    assert kernels["time_s"].sum() == pytest.approx(result.totals.latency_s, rel=1e-9)
    assert kernels["flops"].sum() == pytest.approx(sum(e.kernel.flops for e in result.kernels), rel=1e-12)
    assert list(kernels["name"]) == [e.kernel.name for e in result.kernels]
    assert list(kernels["bottleneck"]) == [e.bottleneck for e in result.kernels]
    layers = sheets["Layer types"]
    assert all(_numeric(layers[c]) for c in ("kernels", "time_s", "share", "flops", "mfu", "stall_fraction"))
    assert layers["share"].sum() == pytest.approx(1.0, rel=1e-9)


def test_summary_holds_the_metrics_bottlenecks_and_caveats(xlsx, result):
    """The Summary is a people's tab: each KPI a number in the unit that suits it, named in words, its key kept."""
    from mapper.report.summary import SUMMARY_METRICS, people_value

    summary = xlsx[1]["Summary"]
    rows = summary[summary["key"] != ""].set_index("key")
    t = result.totals
    for key, _label, units in SUMMARY_METRICS:
        if key in ("dtype", "batch", "kernels", "peak_flops_per_s", "matrix_flops", "energy_j"):
            continue
        value, unit, _fmt = people_value(getattr(t, key), units)
        assert isinstance(rows.loc[key, "value"], (int, float)), key  # a number in the cell, never "12.3B"
        shown_unit = rows.loc[key, "unit"] if isinstance(rows.loc[key, "unit"], str) else ""  # "" reads back as NaN
        assert rows.loc[key, "value"] == pytest.approx(value, rel=1e-12) and shown_unit == unit, key
    assert rows.loc["dtype", "value"] == "bf16" and rows.loc["batch", "value"] == 8
    assert rows.loc["latency_s", "name"] == "batch latency" and rows.loc["latency_s", "unit"] == "µs"
    top = summary[summary["section"] == "top bottleneck"]
    slowest = sorted(result.kernels, key=lambda e: -e.time_s)[:5]
    assert list(top["name"]) == [e.kernel.name for e in slowest]
    assert list(top["unit"]) == [mapper.format_duration(e.time_s).split()[-1] for e in slowest]
    assert list(top["owner"]) == [e.owner for e in slowest] and top["evidence"].str.len().min() > 0
    assert list(summary.loc[summary["section"] == "caveat", "value"]) == list(result.caveats)
    verdict = summary.loc[(summary["section"] == "verdict") & (summary["name"] == "verdict"), "value"].item()
    assert "memory-bound" in verdict and "ML compiler engineer" in verdict


def test_assumptions_and_provenance_make_the_run_reproducible(xlsx, result):
    sheets = xlsx[1]
    assumptions = sheets["Assumptions"].set_index("name")["value"]
    assert float(assumptions["memory.dram_bandwidth_bytes_per_s"]) == 3.35e12
    assert assumptions["definition.memory_stall_fraction"] == mapper.MEMORY_STALL_DEFINITION
    assert len(assumptions) == len(result.assumptions)
    provenance = dict(zip(sheets["Provenance"]["name"], sheets["Provenance"]["value"]))
    assert provenance["model.sha256"] == result.model_sha256
    assert provenance["hardware.sha256"] == result.hardware_sha256
    assert provenance["engine_version"] == result.engine_version and provenance["created_utc"] == result.created_utc
    assert provenance["option.dtype"] == "bf16" and provenance["option.fusion"] == "default"
    assert provenance["dim.batch"] == 8
    fusion = sheets["Fusion plan"]
    assert list(fusion.columns) == ["kernel", "rule", "ops", "nodes", "engine", "layout", "note"]
    assert set(fusion["rule"]) == {e.kernel.rule for e in result.kernels}


def test_extra_sections_get_their_own_sheets(result, tmp_path):
    serving = {
        "rate_per_s": 100.0,
        "p50_s": 0.001,
        "p99_s": 0.002,
        "policy": {"max_batch": 8},
        "curve": [{"rate_per_s": 10.0, "p99_s": 0.001}, {"rate_per_s": 100.0, "p99_s": 0.002}],
    }
    power = [{"cap_w": 700.0, "latency_s": 0.0004}, {"cap_w": 400.0, "latency_s": 0.0005}]
    extended = dataclasses.replace(result, serving=serving)
    frames = sheet_frames(extended)
    assert dict(zip(frames["Serving"]["name"], frames["Serving"]["value"]))["policy.max_batch"] == 8
    assert frames["Serving curve"]["p99_s"].tolist() == [0.001, 0.002]
    # any other section of a document (the dashboard may hold only the document) gets its sheet too
    frames = frames_from_document({**mapper.mapping_document(extended), "power_curve": power})
    (tmp_path / "x.xlsx").write_bytes(xlsx_bytes(frames))
    sheets = pd.read_excel(tmp_path / "x.xlsx", sheet_name=None)
    assert {"Serving", "Serving curve", "Power curve", "Memory", "Parallel"} <= set(sheets)
    assert _numeric(sheets["Power curve"]["cap_w"])


def test_unmodeled_sheet_is_present_even_when_empty(xlsx):
    unmodeled = xlsx[1]["Unmodeled"]
    assert list(unmodeled.columns) == ["name", "op_type", "reason"] and unmodeled.empty


def test_csv_is_the_kernels_table(result, tmp_path):
    frame = pd.read_csv(write_sheet(result, tmp_path / "k.csv"))
    assert len(frame) == len(result.kernels)
    assert frame["time_s"].sum() == pytest.approx(result.totals.latency_s, rel=1e-9)
    assert pd.read_csv(io.BytesIO(sheet_bytes(result, "csv"))).shape == frame.shape


def test_json_is_the_mapping_document(result, tmp_path):
    path = write_sheet(result, tmp_path / "m.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(mapper.mapping_document(result)))
    assert sheet_bytes(result, "json") == path.read_bytes()


def test_html_is_self_contained_and_says_what_limits_the_model(result, tmp_path):
    page = write_sheet(result, tmp_path / "m.html").read_text()
    assert not EXTERNAL_SCRIPT.search(page) and "<link" not in page
    assert "plotly.js" in page and page.count("Plotly.newPlot") == 3
    assert "<title>resnet50 on h100-sxm (bf16, batch=8)</title>" in page
    assert "mostly memory-bound" in page and "Top 20 kernels by time" in page
    assert result.model_sha256 in page and html.escape(result.caveats[0]) in page


def test_html_escapes_names_from_the_model(hostile_result):
    assert any(HOSTILE in e.kernel.nodes for e in hostile_result.kernels)
    page = sheet_bytes(hostile_result, "html").decode()
    assert HOSTILE not in page and "alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not EXTERNAL_SCRIPT.search(page)


def test_xlsx_keeps_formula_like_names_as_text(h100):
    formula = '=HYPERLINK("x","y")'
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name=formula)], [tensor("x", [4, 64])], [tensor("y", [4, 64])]
    )
    result = mapper.map_workload(mapper.load_workload(model), h100, mapper.PlanOptions())
    book = openpyxl.load_workbook(io.BytesIO(sheet_bytes(result, "xlsx")))
    # quoted as OWASP advises (mapper/report/tables.py): a text cell a spreadsheet shows, and never runs
    cells = [c for row in book["Fusion plan"].iter_rows(min_row=2) for c in row if c.value == "'" + formula]
    assert cells and all(c.data_type == "s" for c in cells)


def test_model_name_is_escaped_in_html(result):
    page = sheet_bytes(dataclasses.replace(result, model_name='a<b>&"c'), "html").decode()
    assert "a&lt;b&gt;&amp;&quot;c" in page and "a<b>" not in page


@pytest.mark.parametrize("name", ["sheet.txt", "sheet", "sheet.xls", "sheet.parquet"])
def test_unknown_suffix_is_refused(result, tmp_path, name):
    with pytest.raises(mapper.MapperError, match=r"use \.xlsx, \.csv, \.json or \.html"):
        write_sheet(result, tmp_path / name)
    assert not (tmp_path / name).exists()


def test_unknown_format_is_refused(result):
    with pytest.raises(mapper.MapperError, match="use .xlsx"):
        sheet_bytes(result, "pdf")


def test_unwritable_path_is_a_mapper_error(result, tmp_path):
    with pytest.raises(mapper.MapperError, match="cannot write"):
        write_sheet(result, tmp_path / "missing-dir" / "x.csv")


def test_xlsx_bytes_open_in_openpyxl(result):
    book = openpyxl.load_workbook(io.BytesIO(sheet_bytes(result, "xlsx")))
    assert book.sheetnames == MAPPING_SHEETS
    ws = book["Kernels"]
    header = [c.value for c in ws[1]]
    time_cells = [row[header.index("time_s")].value for row in ws.iter_rows(min_row=2)]
    assert all(isinstance(v, float) for v in time_cells)


@pytest.mark.parametrize("suffix", ["xlsx", "csv", "json", "html"])
def test_cli_writes_the_sheet(tmp_path, capsys, suffix):
    out = tmp_path / f"x.{suffix}"
    assert main(["map", "resnet50", "--batch", "8", "--dtype", "bf16", "--out", str(out)]) == 0
    assert out.stat().st_size > 0 and "resnet50" in capsys.readouterr().out


def test_cli_rejects_an_unknown_suffix(tmp_path, capsys):
    assert main(["map", "resnet50", "--batch", "1", "--out", str(tmp_path / "x.pdf")]) == 2
    assert "use .xlsx, .csv, .json or .html" in capsys.readouterr().err


def test_charts_use_the_document_roofs(result):
    doc = mapper.mapping_document(result)
    roof = roofline_figure(doc)
    names = [t.name for t in roof.data]
    assert "DRAM roof" in names and "matrix peak" in names
    peak = next(t for t in roof.data if t.name == "matrix peak")
    assert list(peak.y) == [result.totals.peak_flops_per_s] * 2
    dram = next(t for t in roof.data if t.name == "DRAM roof")
    assert dram.x[1] == pytest.approx(result.totals.peak_flops_per_s / 3.35e12)  # the ridge
    points = sum(len(t.x) for t in roof.data if t.mode == "markers")
    assert 0 < points <= len(result.kernels)
    assert roof.layout.xaxis.type == "log" and roof.layout.yaxis.type == "log"
    timeline = timeline_figure(doc)
    assert sum(len(t.x) for t in timeline.data) == len(result.kernels)
    assert sum(sum(t.x) for t in timeline.data) == pytest.approx(result.totals.latency_s * 1e6, rel=1e-9)
    assert sum(layer_share_figure(doc).data[0].x) == pytest.approx(1.0, rel=1e-9)


def test_kernel_groups_sheet_groups_repeated_layers(tmp_path):
    """The sheet's grouped view: one row per module across layers, its count and total share (numbers)."""
    llama = mapper.map_workload(mapper.load_workload("llama2-7b"), mapper.load_hardware("h100-sxm"))
    sheets = pd.read_excel(write_sheet(llama, tmp_path / "llama.xlsx"), sheet_name=None)
    groups = sheets["Kernel groups"].set_index("kernel")
    assert groups.index.is_unique
    up = groups.loc["model.layers.*.mlp.up_proj · matmul + mul x 32"]
    assert up["count"] == 32 and _numeric(groups["share"])
    kernels = sheets["Kernels"]
    members = kernels[kernels["name"].str.match(r"^model\.layers\.\d+\.mlp\.up_proj · matmul \+ mul$")]
    assert len(members) == 32 and up["time_s"] == pytest.approx(members["time_s"].sum())


@pytest.mark.parametrize(
    ("name", "path", "pattern"),
    [
        ("model.layers.0.mlp.up_proj · matmul + mul", "model.layers.0.mlp.up_proj", "model.layers.*.mlp.up_proj"),
        ("model.model.layers.11.self_attn.q_proj · matmul", "model.model.layers.11.self_attn.q_proj", None),
        ("encoder.layer.3.attention · transpose #2", "encoder.layer.3.attention", "encoder.layer.*.attention"),
        ("lm_head · matmul", "lm_head", "lm_head"),
        ("node_linear_3 · matmul", "node_linear_3", "node_linear_3"),  # an export without modules: the node's name
        ("gather", "", ""),  # a kernel at the model's root is named by what it is alone
    ],
)
def test_module_path_of_kernel_names(name, path, pattern):
    assert mapper.module_path(name) == path
    if pattern is not None:
        assert mapper.layer_pattern(path) == pattern


def test_dynamo_exports_take_their_module_path_from_the_name_scopes_metadata():
    """torch.onnx's dynamo exporter names nodes "node_linear_7" and writes each node's module path in its
    `pkg.torch.onnx.name_scopes` metadata: kernels are named from it, ops numbered within their module as
    TorchScript numbers them, so both layers of the tiny Llama group (names from the file, not hand-typed)."""
    import onnx

    path = Path(__file__).parent / "models" / "hf_llama_tiny.onnx"
    layers = {p.value for n in onnx.load(path, load_external_data=False).graph.node for p in n.metadata_props
              if p.key == "pkg.torch.onnx.name_scopes" and "'model.layers.1'" in p.value}  # fmt: skip
    assert layers, "the export carries name scopes for its second layer"
    doc = mapper.mapping_document(
        mapper.map_workload(mapper.load_workload(str(path), {"batch": 1, "seq": 16}), mapper.load_hardware("h100-sxm"))
    )
    names = [k["name"] for k in doc["kernels"]]
    assert "model.layers.0.self_attn.q_proj · matmul" in names and "model.layers.1.self_attn.q_proj · matmul" in names
    groups = {g["kernel"]: g["count"] for g in mapper.group_kernels(doc["kernels"], doc["totals"]["latency_s"])}
    assert groups["model.layers.*.mlp.up_proj · matmul + mul x 2"] == 2
    assert groups["model.layers.*.self_attn.k_proj · matmul x 2"] == 2


@pytest.mark.parametrize(
    "scopes",
    ["['', 'model', 'model.<script>', 'op']", "['', '=cmd|x', 'op']", "__import__('os')", "[" * 5000, "['only']"],
)
def test_hostile_name_scopes_never_become_a_kernel_name(scopes):
    from mapper.model.nodes import module_scope

    node = onnx_node_with_scopes(scopes)
    assert module_scope(node) == ""


def onnx_node_with_scopes(text: str):
    import onnx

    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    entry = node.metadata_props.add()
    entry.key, entry.value = "pkg.torch.onnx.name_scopes", text
    return node
