"""The first mechanism failure, in the decision table's order: capacity, latency target at the load,
then the dominant bottleneck class."""

from __future__ import annotations

import pytest

import mapper
from mapper.report.verdict import DECISION_TABLE, first_failure, verdict_sentence

H100 = mapper.load_hardware("h100-sxm")


def document(model: str, dims: dict, **options) -> dict:
    return mapper.mapping_document(
        mapper.map_slice(mapper.load_workload(model, dims), H100, mapper.PlanOptions(**options))
    )


def test_the_table_is_capacity_then_latency_then_bottleneck():
    assert [c.name for c in DECISION_TABLE] == ["capacity", "latency target", "dominant bottleneck"]


def test_llama2_70b_on_one_h100_fails_capacity_first_and_names_the_smallest_tp():
    doc = document("llama2-70b", {"batch": 1, "seq": 1, "past": 2048}, dtype="bf16")
    finding = first_failure(doc, p99_target_s=1e-9)  # even a target it misses comes second
    assert finding.check == "capacity" and finding.kpis_unreachable
    assert finding.owner == "runtime systems engineer"
    assert "does not fit" in finding.sentence and "smallest fit TP 2" in finding.sentence
    short = doc["memory"]["shortfall_bytes"]
    assert short > 50e9 and mapper.format_bytes(short) in finding.sentence


def test_a_missed_p99_target_comes_before_the_bottleneck():
    doc = document("resnet50", {"batch": 8}, dtype="bf16")
    assert first_failure(doc).check == "dominant bottleneck"
    tight = doc["serving"]["p99_s"] / 2
    finding = first_failure(doc, p99_target_s=tight)
    assert finding.check == "latency target" and "misses the p99 target" in finding.sentence
    assert first_failure(doc, p99_target_s=doc["serving"]["p99_s"] * 2).check == "dominant bottleneck"


def test_an_offered_load_over_capacity_says_the_queue_grows():
    doc = document("resnet50", {"batch": 8}, dtype="bf16")
    doc["serving"] = doc["serving"] | {"offered_rate_per_s": 10 * doc["totals"]["throughput_per_s"]}
    finding = first_failure(doc, p99_target_s=1.0)
    assert finding.check == "latency target" and "grows without bound" in finding.sentence


@pytest.mark.parametrize("model", ["resnet50", "bert-base"])
def test_the_dominant_class_names_its_owner_and_fix(model):
    doc = document(model, {}, dtype="bf16")
    sentence = verdict_sentence(doc)
    assert sentence.startswith(f"{model} on h100-sxm is mostly ")
    assert "should act first" in sentence
