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


def expert_kernels(result, layer: int = 0):
    return [k for k in result.kernels if f"layers.{layer}.block_sparse_moe.experts." in k.kernel.name]


def test_expert_kernels_read_and_write_only_their_routed_tokens_activations():
    """Batch 64: an expert's up projection (w3 MatMul fused with silu(w1) * w3) reads h [64, 4096] and
    silu(w1) [64, 14336] and writes [64, 14336], all for k/E = 1/4 of the tokens (16 of 64), at bf16."""
    (up,) = [k.kernel for k in expert_kernels(decode_step(64)) if "experts.0.w3 · " in k.kernel.name]
    assert up.dram_bytes - up.weight_bytes == pytest.approx((64 * c.hidden + 2 * 64 * c.ffn) * 2 * K / E)


def test_imbalance_runs_expert_gemms_at_the_busiest_experts_tokens():
    """Batch 64 decode, imbalance 1.5: mean tokens per used expert 64*2/E_used = 16.0000x, busiest 1.5x that
    = 24 (M), so each expert GEMM does 24 tokens' FLOPs: 2 x 24 x 4096 x 14336; at imbalance 8 the cap is
    the 64 tokens present."""
    mean = 64 * K / expected_experts(E, K, 64)
    for imbalance, busiest in ((1.5, 1.5 * mean), (8.0, 64.0)):
        options = mapper.PlanOptions(dtype="bf16", expert_imbalance=imbalance)
        w = mapper.load_workload("mixtral-8x7b", {"batch": 64, "seq": 1, "past": 128})
        gemms = [k.kernel for k in expert_kernels(mapper.map_workload(w, HW, options)) if ".w1 · " in k.kernel.name]
        assert len(gemms) == E and {g.matrix.m for g in gemms} == {round(busiest)}
        matmul = 2 * busiest * c.hidden * c.ffn
        assert all(matmul <= g.flops <= matmul * 1.01 for g in gemms)  # + the fused silu's few FLOPs a token


def test_expert_parallelism_splits_experts_and_sums_their_outputs_once_a_layer():
    """--ep 4 at batch 64: each device runs 2 of 8 experts (a quarter of each expert kernel's work). Every device
    holds the batch (attention replicated), so nothing is dispatched: each layer ends in one all-reduce of the
    partial sums, T x hidden x 2 bytes = 64 x 4096 x 2 = 524,288 B over the 4 devices (as vLLM reduces a MoE
    layer's output when tp or ep > 1 without data parallelism); with attention DP each rank holds its own requests
    and, at 64 tokens a rank, dispatches and combines T x k x hidden x 2 = 1,048,576 B, 3/4 of it off a device: time =
    3 x 2.25 us + 0.75 x 1,048,576 / 450 GB/s = 8.498 us on H100's NVLink (the link latency fitted to
    AIConfigurator's all-reduce rows since 2026-12-06)."""
    w = mapper.load_workload("mixtral-8x7b", {"batch": 64, "seq": 1, "past": 128})
    one, four = (mapper.map_workload(w, HW, mapper.PlanOptions(dtype="bf16", ep=ep)) for ep in (1, 4))
    sums = [k for k in four.kernels if k.kernel.collective]
    assert len(sums) == c.layers and {(k.kernel.collective, k.kernel.dram_bytes) for k in sums} == {
        ("all-reduce", 64 * c.hidden * 2)
    }
    assert sums[0].kernel.name == "model.layers.0.block_sparse_moe · combine all-reduce"
    dp = mapper.map_workload(w, HW, mapper.PlanOptions(dtype="bf16", ep=4, attention_dp=True))  # 64 a rank
    moved = 64 * K * c.hidden * 2
    a2a = [k for k in dp.kernels if k.kernel.collective]
    assert len(a2a) == 2 * c.layers and {(k.kernel.collective, k.kernel.dram_bytes) for k in a2a} == {
        ("all-to-all", moved)
    }
    link = HW.interconnect
    wire_s = 3 * link.latency_s + 0.75 * moved / link.link_bandwidth_bytes_per_s
    assert all(k.time_s - k.overhead_s == pytest.approx(wire_s) for k in a2a)
    assert wire_s == pytest.approx(8.498e-6, rel=1e-3)
    for a, b in zip(expert_kernels(one), expert_kernels(four), strict=True):
        assert b.kernel.flops == pytest.approx(a.kernel.flops / 4)
        assert b.kernel.weight_bytes == pytest.approx(a.kernel.weight_bytes / 4)
    assert four.parallel.devices == 4
    # memory: every expert resident, 2 of 8 a device; attention, embeddings, the head replicated
    experts_resident = c.layers * E * EXPERT_BYTES
    assert one.memory.weight_bytes - four.memory.weight_bytes == pytest.approx(experts_resident * 3 / 4)


def test_expert_parallel_devices_of_their_own_count_in_energy_and_mfu():
    """At --tp 1 --ep 4 each of the 4 devices runs every kernel at once (the dense layers replicated, a quarter of
    the experts each), as the plan's device count says: the step's energy is 4 x its kernels' (one device's each)
    and MFU is over 4 peaks. It counted one device (a quarter of the power, 4x the MFU) before; attention DP's
    mapping is one rank's and stays one device's."""
    w = mapper.load_workload("mixtral-8x7b", {"batch": 64, "seq": 1, "past": 128})
    four = mapper.map_workload(w, HW, mapper.PlanOptions(dtype="bf16", ep=4))
    t = four.totals
    assert t.energy_j == pytest.approx(4 * sum(k.energy_j for k in four.kernels), rel=1e-9)
    assert t.mfu == pytest.approx(t.flops / (t.latency_s * t.peak_flops_per_s * 4), rel=1e-9)
    rank = mapper.map_workload(w, HW, mapper.PlanOptions(dtype="bf16", ep=4, attention_dp=True))
    assert rank.totals.energy_j == pytest.approx(sum(k.energy_j for k in rank.kernels), rel=1e-9)


@pytest.mark.parametrize(
    ("source", "ep", "message"),
    [
        ("mixtral-8x7b", 3, "--ep 3 must divide the expert count (8 experts a layer)"),
        ("llama2-7b", 2, "--ep 2 needs a mixture-of-experts model"),
    ],
)
def test_ep_must_split_whole_experts(source, ep, message):
    w = mapper.load_workload(source, {"batch": 1, "seq": 1, "past": 16})
    with pytest.raises(mapper.MapperError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mapper.map_workload(w, HW, mapper.PlanOptions(dtype="bf16", ep=ep))


def test_the_mapping_says_experts_are_costed_at_expected_tokens():
    assert any("expected tokens per expert" in caveat for caveat in decode_step(1).caveats)


def test_tensor_parallel_experts_are_reduced_once_after_the_combine():
    """Mixtral at TP 4: each expert's w2 is row-parallel and its partial sums flow into the next expert's
    accumulating Add; the ranks sum them once, after the last (serving engines' one all-reduce after the expert
    combine), so a layer has two all-reduces (attention's o_proj, the MoE combine), not one per expert plus one."""
    step = mapper.load_workload("mixtral-8x7b", {"batch": 32, "seq": 1, "past": 512})
    result = mapper.map_workload(step, mapper.load_hardware("h100-sxm"), mapper.PlanOptions(tp=4))
    reduces = [e.kernel for e in result.kernels if e.kernel.collective == "all-reduce"]
    assert len(reduces) == 2 * 32  # 32 layers
    moe = [k for k in reduces if "block_sparse_moe" in k.name]
    assert len(moe) == 32 and all(".experts.7.w2" in k.name for k in moe)  # after the last expert's combine
    assert {k.dram_bytes for k in moe} == {32 * 4096 * 2}  # the layer's output: 32 tokens x 4,096, fp16
