"""The review end to end on the issue's four cases (through the public API, as the page and CLI run it)."""

import pytest

import mapper
from mapper.cli.main import main

H100 = mapper.load_hardware("h100-sxm")


def review(model, dims, **options):
    return mapper.run_review(mapper.ReviewRequest(model, dims, H100, mapper.PlanOptions(**options)))


@pytest.fixture(scope="module")
def llama7b():
    return review("llama2-7b", {"batch": 1, "seq": 1, "past": 1024}, dtype="bf16")


def test_llama7b_decode_memory_bound_int4_proposed_with_caveat_and_improves_tpot(llama7b):
    assert llama7b.failure.check == "dominant bottleneck" and llama7b.dominant == "memory-bound"
    assert "memory-bound" in llama7b.mechanism and "3.35 TB/s" in llama7b.mechanism and "weights" in llama7b.mechanism
    int4 = next(c for c in llama7b.candidates if dict(c.changes) == {"weight_dtype": "int4"})
    assert "quality evidence" in int4.evidence and "fallback" in int4.evidence
    assert int4.gain > 0.3 and int4.latency_s < llama7b.kpis["tpot_s"]  # TPOT improves
    assert llama7b.chosen == int4 and llama7b.validation is not None
    verdicts = set(llama7b.validation.verdicts["verdict"])
    assert verdicts <= {"improved", "neutral", "regressed"} and len(llama7b.validation.verdicts) == 9 - 3  # 3 x 2 grid
    sparse = next(c for c in llama7b.candidates if dict(c.changes) == {"sparsity": "2:4"})
    assert "accuracy evidence" in sparse.evidence and any("2:4" in c for c in sparse.caveats)


def test_llama70b_on_one_h100_capacity_first_and_tp_proposed():
    r = review("llama2-70b", {"batch": 1, "seq": 1, "past": 1024}, dtype="bf16")
    assert r.failure.check == "capacity" and r.mechanism.startswith("Does not fit")
    tp = next(c for c in r.candidates if dict(c.changes).get("tp", 1) > 1)
    assert tp.fits and tp.owner == "runtime systems engineer"


def test_resnet50_batch1_launch_bound_graph_or_fusion_proposed():
    r = review("resnet50", {"batch": 1}, dtype="bf16")
    assert r.dominant == "launch / latency-bound" and "launch" in r.mechanism
    proposed = {tuple(c.changes) for c in r.candidates}
    assert (("launch", "graph"),) in proposed or (("fusion", "aggressive"),) in proposed


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
    assert found["sentence"].startswith("p99 target 50 ms first fails at batch")
    passes = mapper.map_slice(model.bind({"batch": batch - 1, "seq": 512}), H100).serving["p99_s"]
    fails = mapper.map_slice(model.bind({"batch": batch, "seq": 512}), H100).serving["p99_s"]
    assert passes <= 0.05 < fails


def test_cli_require_no_regression_exits_nonzero_when_the_fix_regresses(tmp_path, capsys):
    # fp32 compute on a bf16 baseline is slower everywhere: the gate must fail
    args = ["review", "resnet50", "--batch", "1", "--dtype", "bf16", "--fix", "dtype=fp32", "--matrix-batch", "1,2"]
    assert main([*args, "--require-no-regression", "--out", str(tmp_path / "p.zip")]) == 1
    assert "regression" in capsys.readouterr().out
    assert main([*args]) == 0


def test_review_page_runs_the_review_and_shows_the_frozen_slice():
    from streamlit.testing.v1 import AppTest

    from tests.conftest import APP

    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("app_pages/review.py").run()
    next(b for b in at.button if b.label == "Run review").click().run()
    assert not at.error
    assert any("Frozen slice" in m.value for m in at.markdown)
    assert any("target: no target set" in m.value for m in at.markdown)
