"""Mixture of experts: the Mixtral-8x7B built-in, the router pattern, and the expert weights a step reads."""

from __future__ import annotations

import pytest

import mapper
from mapper.work.moe import expected_experts, find_routings
from mapper.zoo.mixtral import MIXTRAL_8X7B

HW, BF16 = mapper.load_hardware("h100-sxm"), mapper.PlanOptions(dtype="bf16")
E, K = 8, 2
c = MIXTRAL_8X7B
EXPERT_BYTES = 3 * c.hidden * c.ffn * 2  # w1, w3, w2 at bf16, per expert per layer


def decode_step(batch: int):
    return mapper.map_workload(mapper.load_workload("mixtral-8x7b", {"batch": batch, "seq": 1, "past": 128}), HW, BF16)


def test_mixtral_has_46_7b_parameters_and_its_router_is_found():
    """HF mistralai/Mixtral-8x7B-v0.1: 46,702,792,704 parameters; top-2 of 8 experts in each of 32 layers."""
    w = mapper.load_workload("mixtral-8x7b", {"batch": 1, "seq": 1, "past": 16})
    params = sum(w.graph.tensors[t].elements for t in w.graph.weights)
    assert params == pytest.approx(46_702_792_704, rel=1e-6)
    routings = find_routings(w.graph)
    assert len(routings) == c.layers and {(r.experts, r.top_k, len(r.gemms)) for r in routings} == {(E, K, 3 * E)}


@pytest.mark.parametrize("batch", [1, 64])
def test_decode_step_reads_the_weights_of_the_experts_its_tokens_choose(batch):
    """Each token picks k of E, so T tokens use E*(1-(1-k/E)^T) experts in expectation: at batch 1 the two
    chosen experts' weights (2 of 8), at batch 64 nearly all eight."""
    r = decode_step(batch)
    expected = c.layers * expected_experts(E, K, batch) * EXPERT_BYTES
    assert expected_experts(E, K, batch) == pytest.approx(E * (1 - (1 - K / E) ** batch))
    assert expected_experts(E, K, 1) == pytest.approx(K) and expected_experts(E, K, 64) > E - 1e-6
    expert_gemms = {n for rt in find_routings(r_graph(batch)) for n in rt.gemms}
    read = sum(k.kernel.weight_bytes for k in r.kernels if set(k.kernel.nodes) & expert_gemms)
    assert read == pytest.approx(expected, rel=1e-6)


def r_graph(batch: int):
    return mapper.load_workload("mixtral-8x7b", {"batch": batch, "seq": 1, "past": 128}).graph


def test_expert_gemm_m_is_the_tokens_per_used_expert_and_flops_are_top_k():
    """At batch 64 each used expert sees 64*2/E_used ~ 16 tokens; FLOPs are T*k tokens' worth, not T*E."""
    w = mapper.load_workload("mixtral-8x7b", {"batch": 64, "seq": 1, "past": 128})
    gemms = {n for rt in find_routings(w.graph) for n in rt.gemms}
    nodes = [n for n in w.nodes if n.name in gemms]
    assert {n.matrix.m for n in nodes} == {round(64 * K / expected_experts(E, K, 64))}
    dense = 2 * 64 * c.hidden * c.ffn  # one expert GEMM on every token
    assert all(n.flops == pytest.approx(dense * K / E) for n in nodes)
