"""The power model (PRIMER s7): compute-bound kernels near TDP, memory-bound below, the cap stretches time."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import mapper
from mapper.explore.power import power_curve
from tests.conftest import make_model, tensor

GEMM = make_model(
    [helper.make_node("MatMul", ["a", "b"], ["c"])],
    [tensor("a", [8192, 8192], TensorProto.FLOAT16), tensor("b", [8192, 8192], TensorProto.FLOAT16)],
    [tensor("c", [8192, 8192], TensorProto.FLOAT16)],
)
ADD = make_model(
    [helper.make_node("Add", ["x", "y"], ["z"])],
    [tensor("x", [1 << 26], TensorProto.FLOAT16), tensor("y", [1 << 26], TensorProto.FLOAT16)],
    [tensor("z", [1 << 26], TensorProto.FLOAT16)],
)


def _map(model: bytes, cap=None):
    hw = mapper.load_hardware("h100-sxm")
    return hw, mapper.map_workload(mapper.load_workload(model), hw, mapper.PlanOptions(dtype="bf16", power_cap_w=cap))


def test_compute_bound_gemm_draws_near_tdp_memory_bound_add_less():
    hw, gemm = _map(GEMM)
    _, add = _map(ADD)
    kernel = max(gemm.kernels, key=lambda e: e.time_s)
    assert kernel.avg_power_w > 0.85 * hw.tdp_w
    assert kernel.avg_power_w <= hw.tdp_w + 1e-6
    assert max(e.avg_power_w for e in add.kernels) < 0.8 * kernel.avg_power_w
    assert hw.idle_w < add.totals.avg_power_w


def test_lower_power_cap_raises_latency():
    _, free = _map(GEMM)
    _, capped = _map(GEMM, cap=350)
    assert capped.totals.latency_s > 1.2 * free.totals.latency_s
    assert capped.totals.avg_power_w <= 350 + 1e-6
    assert any(e.throttled for e in capped.kernels)


def test_power_curve_against_batch():
    hw = mapper.load_hardware("h100-sxm")
    points = power_curve("bert-base", hw, mapper.PlanOptions(dtype="bf16"), (1, 8, 64), {"seq": 128})
    assert [p.batch for p in points] == [1, 8, 64]
    for p in points:
        assert hw.idle_w < p.avg_power_w <= hw.tdp_w + 1e-6
        assert p.perf_per_watt == pytest.approx(p.throughput_per_s / p.avg_power_w)
        assert p.energy_per_inference_j == pytest.approx(p.avg_power_w * p.latency_s / p.batch)
        assert 0.0 <= p.throttled_share <= 1.0
    # batching amortizes the weights: less energy per inference, more inferences per joule
    assert points[0].energy_per_inference_j > points[-1].energy_per_inference_j
    assert points[-1].perf_per_watt > points[0].perf_per_watt


def test_power_curve_rejects_bad_batches():
    with pytest.raises(mapper.MapperError, match="batches"):
        power_curve("bert-base", mapper.load_hardware("h100-sxm"), batches=(0,))
