"""The first mechanism failure, in the decision table's order: capacity, latency target at the load,
then the dominant bottleneck class."""

from __future__ import annotations

import pytest

import mapper
from mapper.report.verdict import DECISION_TABLE, first_failure, verdict_sentence

H100 = mapper.load_hardware("h100-sxm")


def document(model: str, dims: dict, rate: float | None = None, **options) -> dict:
    """The assessed slice's document (at the rate given, else the derived load)."""
    handle = mapper.open_model(model)
    question = mapper.Question(
        mapper.ServeRequest(mapper.ServingConfig(rate_per_s=rate or 1.0), follow_mapped_batch=True), rate is not None
    )
    return mapper.assess_slice(handle, dims, H100, mapper.PlanOptions(**options), question).document()


def test_the_table_is_capacity_then_latency_then_bottleneck():
    assert [c.name for c in DECISION_TABLE] == ["capacity", "latency target", "dominant bottleneck"]


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_llama2_70b_on_one_h100_fails_capacity_first_and_names_the_smallest_tp():
    doc = document("llama2-70b", {"batch": 1, "seq": 1, "past": 2048}, dtype="bf16")
    finding = first_failure(doc, mapper.Targets(p99_s=1e-9))  # even a target it misses comes second
    assert finding.check == "capacity" and finding.kpis_unreachable
    assert finding.owner == "runtime systems engineer"
    assert "does not fit" in finding.sentence and "smallest fit TP 2" in finding.sentence
    short = doc["memory"]["shortfall_bytes"]
    assert short > 50e9 and mapper.format_bytes(short) in finding.sentence


def test_a_missed_p99_target_comes_before_the_bottleneck():
    doc = document("resnet50", {"batch": 8}, rate=500.0, dtype="bf16")
    assert first_failure(doc).check == "dominant bottleneck"
    tight = doc["serving"]["p99_s"] / 2
    finding = first_failure(doc, mapper.Targets(p99_s=tight))
    assert finding.check == "latency target" and "misses the latency target: request latency p99" in finding.sentence
    assert first_failure(doc, mapper.Targets(p99_s=doc["serving"]["p99_s"] * 2)).check == "dominant bottleneck"


def test_without_a_rate_or_target_no_percentile_is_shown_and_the_load_is_the_saturation_rate():
    doc = document("resnet50", {"batch": 8}, dtype="bf16")
    load = doc["assessment"]["load"]
    assert load["derived"] and load["source"] == "saturation rate"
    assert doc["serving"]["requests"] == 0 and "p99_s" not in doc["serving"]
    assert load["saturation_per_s"] == pytest.approx(doc["totals"]["throughput_per_s"], rel=0.01)


def test_an_offered_load_over_capacity_says_the_queue_grows():
    doc = document("resnet50", {"batch": 8}, rate=500.0, dtype="bf16")
    doc["serving"] = doc["serving"] | {"offered_rate_per_s": 10 * doc["totals"]["throughput_per_s"]}
    finding = first_failure(doc, mapper.Targets(p99_s=1.0))
    assert finding.check == "latency target" and "grows without bound" in finding.sentence


@pytest.mark.parametrize("model", ["resnet50", "bert-base"])
def test_the_dominant_class_names_its_owner_and_fix(model):
    doc = document(model, {}, dtype="bf16")
    sentence = verdict_sentence(doc)
    assert sentence.startswith(f"{model} on h100-sxm is mostly ")
    assert "should act first" in sentence
