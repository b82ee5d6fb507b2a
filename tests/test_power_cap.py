"""The power cap (cost.power_cap): above it the clock drops, compute stretches as 1/clock, a FLOP's energy falls
as clock^2, memory time and bytes' energy stay; and the alignment rule (plan.tiling.alignment_shares) with its
bottleneck class."""

from __future__ import annotations

import dataclasses

import pytest
from onnx import TensorProto

import mapper
from mapper.core.classes import CLASSES, Bottleneck
from mapper.cost.bottleneck import Facts, classify, speedup_if_removed
from mapper.cost.power_cap import under_cap
from mapper.cost.roofline import kernel_time
from mapper.evidence.microbench import kernel_model
from mapper.plan.tiling import alignment_shares
from tests.test_tiling_batch import _gemm

HEADROOM_W = 500.0
P = 6.0  # every built-in profile's overlap exponent


def _cap(compute_s, memory_s, flop_j, byte_j, headroom_w=HEADROOM_W, overhead_s=1e-6):
    parts = (compute_s, memory_s, overhead_s, 0.0)
    return under_cap(kernel_time(*parts, P), parts, flop_j, flop_j + byte_j, headroom_w, P)


def test_under_the_cap_nothing_changes():
    capped = _cap(100e-6, 50e-6, 0.01, 0.005)  # 150 W over ~100 us
    assert not capped.throttled
    assert capped.time_s == kernel_time(100e-6, 50e-6, 1e-6, 0.0, P) and capped.dynamic_j == 0.015


def test_a_compute_bound_kernel_settles_at_the_cap():
    """Pure compute: power falls as clock^3, so the clock is (headroom / power)^(1/3)."""
    capped = _cap(100e-6, 1e-9, 0.1, 0.0, overhead_s=0.0)  # 1000 W at the full clock
    clock = (HEADROOM_W / 1000.0) ** (1 / 3)
    assert capped.throttled
    assert capped.time_s == pytest.approx(100e-6 / clock, rel=1e-6)
    assert capped.dynamic_j / capped.time_s == pytest.approx(HEADROOM_W, rel=1e-6)


def test_a_memory_bound_kernel_loses_less_than_a_constant_energy_stretch():
    """What the H200 held: a 128-row GEMM streaming its weights lost 3% at the cap, not a third."""
    compute_s, memory_s, flop_j, byte_j = 20e-6, 28e-6, 0.015, 0.011  # ~930 W at the full clock
    capped = _cap(compute_s, memory_s, flop_j, byte_j)
    constant_energy = (flop_j + byte_j) / HEADROOM_W
    assert capped.throttled and capped.time_s < constant_energy
    assert capped.dynamic_j / capped.time_s <= HEADROOM_W * (1 + 1e-9)
    assert capped.dynamic_j < flop_j + byte_j  # a FLOP at a lower clock costs less


def test_a_kernel_that_stays_memory_bound_keeps_its_time():
    """Lowering the clock until compute meets memory costs nothing: the root lies on the memory-bound side,
    where 0.04 c^2 + 0.03 J = 500 W x 100 us gives c = sqrt(0.5)."""
    capped = _cap(5e-6, 100e-6, 0.04, 0.03, overhead_s=0.0)  # 700 W at the full clock
    assert capped.throttled
    assert capped.time_s == pytest.approx(kernel_time(5e-6 / 0.5**0.5, 100e-6, 0.0, 0.0, P), rel=1e-9)
    assert capped.time_s < 1.001 * kernel_time(5e-6, 100e-6, 0.0, 0.0, P)


def test_a_stream_with_no_flops_stretches_by_its_energy():
    capped = _cap(0.0, 100e-6, 0.0, 0.1)
    assert capped.throttled and capped.time_s == pytest.approx(0.1 / HEADROOM_W)


@pytest.mark.parametrize("parts", [(100e-6, 1e-6), (20e-6, 28e-6), (5e-6, 100e-6)])
def test_a_lower_cap_never_runs_faster(parts):
    times = [_cap(*parts, 0.06, 0.03, headroom_w=h).time_s for h in (900.0, 600.0, 400.0, 200.0, 100.0)]
    assert times == sorted(times)


def test_alignment_shares_follow_the_row_strides():
    h200, h100 = mapper.load_hardware("h200-sxm"), mapper.load_hardware("h100-sxm")
    shares = (h200.unaligned_matrix, h200.unaligned_dram)
    assert alignment_shares(_gemm(1408, 3072, 4096), h200, 2.0) == (1.0, 1.0)
    assert alignment_shares(_gemm(1408, 3073, 4096), h200, 2.0) == shares  # N off 8 elements
    assert alignment_shares(_gemm(1408, 3072, 4097), h200, 2.0) == shares  # K off
    assert alignment_shares(_gemm(1537, 3072, 4096), h200, 2.0) == (1.0, 1.0)  # M is no stride
    assert alignment_shares(_gemm(1408, 3080, 4096), h200, 1.0) == shares  # fp8: 16 elements
    assert alignment_shares(_gemm(1408, 3073, 4096), h100, 2.0) == (1.0, 1.0)  # no rule in the profile


def test_an_unaligned_gemm_is_classed_with_its_fix():
    h200 = mapper.load_hardware("h200-sxm")

    def mapped(n):
        graph = mapper.load_workload(kernel_model("gemm", (8192, n, 768), TensorProto.BFLOAT16))
        return mapper.map_workload(graph, h200, mapper.PlanOptions("bf16")).kernels[0]

    slow, fast = mapped(50257), mapped(50304)
    assert slow.bottleneck == Bottleneck.ALIGNMENT and fast.bottleneck != Bottleneck.ALIGNMENT
    assert slow.owner == CLASSES[Bottleneck.ALIGNMENT].owner and "50304" in CLASSES[Bottleneck.ALIGNMENT].fix
    assert slow.speedup_if_removed == pytest.approx(1 / h200.unaligned_matrix, rel=0.15)
    assert slow.time_s > 3 * fast.time_s


def test_the_alignment_rule_needs_every_part():
    tree = mapper.load_hardware("h200-sxm").to_dict()
    del tree["efficiency"]["unaligned_dram"]
    with pytest.raises(mapper.ProfileError, match="go together"):
        mapper.load_hardware(tree)


def test_optional_curves_and_alignment_round_trip():
    h200 = mapper.load_hardware("h200-sxm")
    again = mapper.load_hardware(h200.to_dict())
    assert again.sha256 == h200.sha256 and again.matrix_dram_efficiency == h200.matrix_dram_efficiency
    plain = dataclasses.replace(h200, matrix_dram_efficiency=None)
    assert "matrix_dram_by_bytes" not in plain.to_dict()["efficiency"]


def test_classify_reads_the_shares():
    facts = dict(engine="matrix", time_s=10e-6, compute_s=9e-6, memory_s=2e-6, overhead_s=1e-6, sync_s=0.0,
                 intensity=500.0, ridge=200.0, waves=4, wave_efficiency=0.95, padding_efficiency=1.0,
                 overlap_exponent=P)  # fmt: skip
    assert classify(Facts(**facts))[0] == Bottleneck.COMPUTE_MATRIX
    unaligned = Facts(**facts, aligned_rate_share=0.2)
    assert classify(unaligned)[0] == Bottleneck.ALIGNMENT
    assert speedup_if_removed(Bottleneck.ALIGNMENT, unaligned) > 2.0
