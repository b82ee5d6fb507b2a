"""The review end to end on the issue's four cases (through the public API, as the page and CLI run it)."""

import pytest

import mapper
from mapper.cli.main import main
from mapper.review.first_slice import round_values

H100 = mapper.load_hardware("h100-sxm")


def review(model, dims, **options):
    return mapper.run_review(mapper.ReviewRequest(model, dims, H100, mapper.PlanOptions(**options)))


@pytest.fixture(scope="module")
def llama7b():
    return review("llama2-7b", {"batch": 1, "seq": 1, "past": 1024}, dtype="bf16")


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_llama7b_decode_memory_bound_int4_proposed_with_caveat_and_improves_tpot(llama7b):
    assert llama7b.failure.check == "dominant bottleneck" and llama7b.dominant == "memory-bound"
    assert "memory-bound" in llama7b.mechanism and "3.35 TB/s" in llama7b.mechanism and "weights" in llama7b.mechanism
    int4 = next(c for c in llama7b.candidates if dict(c.changes) == {"weight_dtype": "int4"})
    assert "quality evidence" in int4.evidence and "fallback" in int4.evidence
    assert int4.gain > 0.3 and int4.latency_s < llama7b.kpis["latency_s"]  # TPOT improves
    assert llama7b.chosen == int4 and llama7b.validation is not None
    verdicts = set(llama7b.validation.verdicts["verdict"])
    assert verdicts <= {"improved", "neutral", "regressed"} and len(llama7b.validation.verdicts) == 9 - 3  # 3 x 2 grid
    sparse = next(c for c in llama7b.candidates if dict(c.changes) == {"sparsity": "2:4"})
    assert "accuracy evidence" in sparse.evidence and any("2:4" in c for c in sparse.caveats)


def test_llama7b_decode_offers_a_larger_batch_as_a_slice_change_with_its_tpot_cost(llama7b):
    batches = [c for c in llama7b.candidates if c.kind == "slice"]
    assert [dict(c.slice_changes) for c in batches] == [{"batch": 4}, {"batch": 2}]  # ranked by gain
    tpot = llama7b.kpis["latency_s"]
    for c in batches:
        at = mapper.map_workload(
            mapper.open_model("llama2-7b").bind({"batch": c.slice_changes[0][1], "seq": 1, "past": 1024}),
            H100,
            llama7b.request.options,
        )
        assert c.gain == pytest.approx(at.totals.throughput_per_s / llama7b.kpis["throughput_per_s"] - 1)
        assert c.kpi == "throughput per device" and c.cost.startswith(f"TPOT {at.totals.latency_s / tpot - 1:+.0%}")
    adoptable = [c for c in llama7b.candidates if not c.rejected]
    assert adoptable[-1].kind == "slice" and llama7b.chosen.kind == "plan"  # offered, never the default
    doc = mapper.review_document(llama7b)
    last = [c for c in doc["candidates"] if not c["rejected"]][-1]
    assert last["slice_changes"] == {"batch": 2} and last["plan_options"] == {}


@pytest.mark.slow
def test_llama70b_on_one_h100_capacity_first_and_tp_chosen_over_int4_with_the_reason():
    r = review("llama2-70b", {"batch": 1, "seq": 1, "past": 1024}, dtype="bf16")
    assert r.failure.check == "capacity" and r.mechanism.startswith("Does not fit")
    int4 = next(c for c in r.candidates if dict(c.changes) == {"weight_dtype": "int4"})
    assert int4.fits and int4.gain > r.chosen.gain  # the larger gain loses: it needs quality evidence
    assert dict(r.chosen.changes) == {"tp": 2, "pp": 1} and r.chosen.fits and r.owner == "runtime systems engineer"
    assert (
        r.chosen_reason.startswith("chosen because")
        and "fixes the failing check (capacity: it fits)" in r.chosen_reason
    )
    assert f'over int4 weights ({int4.gain_text()}) by "needs no quality evidence"' in r.chosen_reason
    doc = mapper.review_document(r)
    assert doc["chosen_fix"]["chosen_because"] == r.chosen_reason
    assert [k["key"] for k in doc["best_fix_rule"]][:4] == [
        "can be adopted",
        "a plan change",
        "fixes the failing check",
        "needs no quality evidence",
    ]
    assert not any(c.kind == "slice" for c in r.candidates)  # a larger batch does not fit either
    asked = mapper.run_review(
        mapper.ReviewRequest(
            "llama2-70b",
            {"batch": 1, "seq": 1, "past": 1024},
            H100,
            mapper.PlanOptions(dtype="bf16"),
            fix="weight_dtype=int4",
        )
    )
    assert asked.chosen == int4 and asked.chosen_reason == "chosen by you (--fix)"


def test_a_fix_that_does_not_fit_never_wins_a_capacity_failure():
    from mapper.review.candidates import Candidate
    from mapper.review.ranking import rank

    def cand(label, gain, fits, evidence=""):
        return Candidate(label, (), mapper.PlanOptions(), "", 0, (), "", evidence, 1.0, gain, fits, ())

    ranked = rank(
        [cand("fast, no fit", 3.0, False), cand("int4", 2.0, True, "needs"), cand("tp", 0.5, True)], "capacity"
    )
    assert [c.label for c in ranked] == ["tp", "int4", "fast, no fit"]
    assert ranked[-1].rejected.startswith("does not fit") and not ranked[0].rejected


def test_resnet50_batch1_launch_bound_cuda_graphs_chosen_with_their_real_gain():
    r = review("resnet50", {"batch": 1}, dtype="bf16")
    assert r.dominant == "launch / latency-bound" and "launch" in r.mechanism
    graph = next(c for c in r.candidates if dict(c.changes) == {"launch": "graph"})
    replayed = mapper.map_workload(mapper.open_model("resnet50").bind({"batch": 1}), H100, graph.options)
    assert graph.gain == pytest.approx(r.kpis["latency_s"] / replayed.totals.latency_s - 1) and graph.gain > 0.5
    assert r.chosen == graph and not graph.evidence and graph.owner == "runtime systems engineer"


def test_bert_seq4096_unfused_attention_memory_and_fused_attention_proposed():
    r = review("bert-base", {"batch": 1, "seq": 4096}, dtype="bf16", attention_fusion=False)
    assert r.dominant == "memory-bound" and r.behind[0]["layer_type"] == "Attention"
    fused = next(c for c in r.candidates if dict(c.changes) == {"attention_fusion": True})
    assert fused.gain > 0.5 and fused.blast_layer_types == ("Attention",)


def test_first_failing_slice_along_batch():
    model = mapper.open_model("bert-base")
    found = mapper.first_failing_slice(
        model, {"batch": 1, "seq": 512}, H100, mapper.PlanOptions(), mapper.parse_target("p99=50")
    )
    batch = found["batch"]["batch"]
    assert found["sentence"].startswith("unloaded p99 target 50 ms first fails at batch")
    grid = round_values(1, 4096)  # the search's round values: 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
    before = grid[grid.index(batch) - 1]
    passes = mapper.map_workload(model.bind({"batch": before, "seq": 512}), H100).totals.latency_s
    fails = mapper.map_workload(model.bind({"batch": batch, "seq": 512}), H100).totals.latency_s
    assert passes <= 0.05 < fails


def test_first_failing_slice_along_a_decoders_context_stops_at_a_round_value_within_its_positions():
    model = mapper.open_model("llama2-7b")
    dims, options = {"batch": 1, "seq": 1, "past": 1024}, mapper.PlanOptions(dtype="bf16")
    # (decode attention splits the cache across SMs at batch 1: the step grows with every cached token)
    step = {
        p: mapper.map_workload(model.bind({**dims, "past": p}), H100, options).totals.latency_s for p in (2048, 3072)
    }
    target_ms = (step[2048] + step[3072]) / 2 * 1e3
    found = mapper.first_failing_slice(model, dims, H100, options, mapper.parse_target(f"p99={target_ms}"))
    assert found["max_length"] == 4095  # Llama-2's 4096 positions less the step's own token
    assert "at past 3072 (batch 1)" in found["sentence"], found["sentence"]
    gpt2 = mapper.first_failing_slice(
        mapper.open_model("gpt2-small"), {"batch": 1, "seq": 1, "past": 128}, H100, options, mapper.parse_target("fit")
    )
    assert gpt2["sentence"] == "memory fit holds up to batch 4096 and past 1023"  # n_positions 1024


def test_first_failing_slice_on_the_sweep_page():
    from streamlit.testing.v1 import AppTest

    from tests.conftest import APP

    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("app_pages/sweep.py").run()
    next(b for b in at.button if b.label == "Run sweep").click().run()
    next(b for b in at.button if b.label == "Find the first failing slice").click().run()
    assert not at.error
    line = next(m.value for m in at.markdown if m.value.startswith("**First failing slice:**"))
    found = mapper.first_failing_slice(
        mapper.open_model("resnet50"), {"batch": 1}, H100, mapper.PlanOptions(), mapper.parse_target("p99=50")
    )
    assert line == f"**First failing slice:** {found['sentence']}." and "first fails at batch" in line
    at.text_input(key="sweep_target").set_value("p99=abc").run()
    next(b for b in at.button if b.label == "Find the first failing slice").click().run()
    assert "give a positive number" in at.error[0].value


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_cli_require_no_regression_exits_nonzero_when_the_fix_regresses(tmp_path, capsys):
    # fp32 compute on a bf16 baseline is slower everywhere: the gate must fail
    args = ["review", "resnet50", "--batch", "1", "--dtype", "bf16", "--fix", "dtype=fp32", "--matrix-batch", "1,2"]
    assert main([*args, "--require-no-regression", "--out", str(tmp_path / "p.zip")]) == 1
    assert "regression" in capsys.readouterr().out
    assert main([*args]) == 0


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_review_page_runs_the_review_and_shows_the_frozen_slice():
    from streamlit.testing.v1 import AppTest

    from tests.conftest import APP

    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("app_pages/review.py").run()
    next(b for b in at.button if b.label == "Run review").click().run()
    assert not at.error
    assert any("Frozen slice" in c.value and "sha256" in c.value for c in at.caption)  # provenance in small type
    assert any("Load:" in m.value and "saturation rate" in m.value for m in at.markdown)
    for step in at.radio[0].options:  # every step's table speaks words, not the engine's keys
        at.radio[0].set_value(step).run()
        assert not at.error, step
        headers = [str(c) for frame in at.dataframe for c in frame.value.columns]
        assert headers and not [h for h in headers if "_" in h], (step, headers)


def test_gains_read_as_speed_ups_not_percent_of_latency():
    """A fix that takes latency from 9 ms to 4 ms is '2.25x faster: latency -56%', never '+125% on latency'."""
    from mapper.review.candidates import gain_text

    assert gain_text(9 / 4 - 1, "TPOT") == "2.25x faster: TPOT -56%"
    assert gain_text(4 / 5 - 1, "latency") == "1.25x slower: latency +25%"
    assert gain_text(0.001, "latency") == "no change on latency"
    assert gain_text(2.72, "throughput per device") == "+272% throughput per device"


@pytest.mark.slow  # a review run through the page: ~4 s
def test_review_page_step_three_scores_the_run_uploaded_for_the_slice():
    """A trace uploaded on the Validation page for this slice is the review's measured evidence: step 3 names it."""
    from dataclasses import replace
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from app_pages import session
    from tests.conftest import APP

    trace = Path(__file__).resolve().parents[1] / "data" / "evidence" / "torch_cpu" / "resnet50.json.gz"
    at = AppTest.from_file(APP, default_timeout=120).run()
    current = at.session_state[session.KEY]
    at.session_state[session.KEY] = replace(current, trace=(current.selection.key, "run.json.gz", trace.read_bytes()))
    at.switch_page("app_pages/review.py").run()
    next(b for b in at.button if b.label == "Run review").click().run()
    at.radio[0].set_value("3 Proving artifact").run()
    assert not at.error and not at.exception
    assert any(c.value.startswith("Measured evidence: run") and "sha256" in c.value for c in at.caption)
    assert any(c.value.startswith("Measured p50") for c in at.caption)
