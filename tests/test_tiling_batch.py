"""The batched tile search (`plan_matrices`) against the one-kernel search it replaced, record for record.

`plan_matrices` evaluates a slice's new matrix kernels together as flat (kernel, candidate) arrays; every
TilePlan must equal the one the per-kernel search (kept below as the reference, as it stood before the
batching) gives, to the last bit: shapes that fit, split-K shapes, one where nothing fits, mixed in one batch.
The reference searches every fitting candidate, each stage count too; `plan_matrices` searches the fewest
stages of each tile (stages set the working set, not the time), and must pick the same.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import mapper
from mapper.core.caches import ModelCaches
from mapper.core.graph import LayerType
from mapper.core.result import Kernel, MatrixShape, TileChoice, TilePlan
from mapper.core.vocab import Engine, KernelRule, MatrixSchedule
from mapper.cost.estimate import Basis, _on_kernel_basis, estimate_cost
from mapper.cost.roofline import kernel_time, kernel_times
from mapper.hardware.target import device_target
from mapper.plan.tiling import (
    ACCUMULATOR_BYTES,
    ALTERNATIVES_KEPT,
    L2_REUSE_FRACTION,
    _candidates,
    _fitting,
    _stream_k,
    macs_per_clock_per_unit,
    plan_matrices,
    ranked_times,
    smooth_max,
)

P = 6.0  # every built-in profile's overlap exponent


def _target(hw, cap):
    """H100 at bf16, its eager launch, under `cap`."""
    return device_target(hw, "bf16", (2.0, 2.0, 2.0), cap, False, hw.kernel_launch_s)


def _reference_plan(kernel, hw, peak, act_bytes, weight_bytes_per) -> TilePlan:
    """The one-kernel search as it stood before `plan_matrices` (1-D arrays filtered to the runnable tiles)."""
    s = kernel.matrix
    M, N, K, B = float(s.m), float(s.n), float(s.k), float(s.batch)
    P = hw.compute_units
    macs = macs_per_clock_per_unit(hw, peak)
    # every candidate that fits, each stage count too (`_fitting` keeps the fewest stages of each tile)
    tm, tn, tk, st, sk, sram = _candidates(hw.matrix_instruction_mnk, act_bytes)
    fits = sram <= hw.sram_per_unit_bytes
    tm, tn, tk, st, sk, sram = (a[fits] for a in (tm, tn, tk, st, sk, sram))
    tiles_m, tiles_n = np.ceil(M / tm), np.ceil(N / tn)
    base_tiles = B * tiles_m * tiles_n
    ok = (sk == 1) | ((base_tiles < P) & (sk <= np.ceil(K / tk)))
    if not ok.any():
        tm, tn, tk, st, sk, sram = _candidates(hw.matrix_instruction_mnk, act_bytes)
        ok = (tm == tm.min()) & (tn == tn.min()) & (tk == tk.min()) & (st == st.min()) & (sk == 1)
        tiles_m, tiles_n = np.ceil(M / tm), np.ceil(N / tn)
        base_tiles = B * tiles_m * tiles_n
    need = macs * (tm + tn) / (tm * tn) * act_bytes  # of the table searched: the fitting one or the fallback
    tile_eff = np.minimum(1.0, hw.sram_bytes_per_clock_per_unit / need)
    if not ok.all():
        tm, tn, tk, st, sk, sram, tiles_m, tiles_n, base_tiles, tile_eff = (
            a[ok] for a in (tm, tn, tk, st, sk, sram, tiles_m, tiles_n, base_tiles, tile_eff)
        )
    tiles = base_tiles * sk
    waves = np.ceil(tiles / P)
    wave_eff = tiles / (waves * P)
    pad_eff = (M * N) / (tiles_m * tm * tiles_n * tn)
    k_eff = K / (np.ceil(K / (sk * tk)) * tk * sk)
    # a GEMM's row strides (K, N) off the profile's alignment keep only its unaligned shares
    align = hw.matrix_alignment_bytes
    off = align is not None and s.kind == "gemm" and ((K * act_bytes) % align or (N * act_bytes) % align)
    rate_share, dram_share = (hw.unaligned_matrix, hw.unaligned_dram) if off else (1.0, 1.0)
    base_eff = hw.matrix_efficiency.at(kernel.matrix_flops) * rate_share
    compute = kernel.matrix_flops / (peak * base_eff * wave_eff * pad_eff * k_eff * tile_eff)
    a_bytes = B * (s.a_elements or M * K) * act_bytes
    weights = kernel.weight_bytes > 0
    b_bytes = (1 if weights else B) * K * N * (weight_bytes_per if weights else act_bytes)
    wave_m = np.minimum(tiles_m, np.ceil(np.sqrt(P)))
    wave_n = np.minimum(tiles_n, np.ceil(P / wave_m))
    passes_a = np.where(a_bytes <= L2_REUSE_FRACTION * hw.l2_bytes, 1, np.ceil(tiles_n / wave_n))
    passes_b = np.where(b_bytes <= L2_REUSE_FRACTION * hw.l2_bytes, 1, np.ceil(tiles_m / wave_m))
    partials = np.where(sk > 1, 2 * sk * B * M * N * ACCUMULATOR_BYTES, 0.0)
    dram = (
        kernel.dram_bytes
        + a_bytes * (passes_a - 1)
        + b_bytes * (passes_b - 1)
        + np.where(partials > hw.l2_bytes, partials, 0)
    )
    l2 = (a_bytes * tiles_n + b_bytes * tiles_m) / hw.l2_cluster_sharing + partials
    curve = hw.matrix_dram_efficiency or hw.dram_efficiency  # a matrix kernel's own stream, where the profile has one
    memory = np.maximum(
        dram / (hw.dram_bandwidth_bytes_per_s * (curve.at_array(dram) * dram_share)), l2 / hw.l2_bandwidth_bytes_per_s
    )
    time = smooth_max(compute, memory, hw.overlap_exponent) + np.where(sk > 1, hw.grid_sync_s, 0.0)
    if hw.matrix_schedule == MatrixSchedule.STREAM_K:  # elementwise: each candidate's own stream-K or waves
        dram_s = dram / (hw.dram_bandwidth_bytes_per_s * (curve.at_array(dram) * dram_share))
        figures = (compute * wave_eff, dram_s, l2, sk)
        wave_eff, compute, l2, memory, time = _stream_k(tiles, tm * tn, figures, (wave_eff, compute, memory, time), hw)
    fields = (tm, tn, tk, st, sk, tiles, waves, wave_eff, pad_eff, sram, dram, l2, compute, memory, time)
    choices, seen = [], set()
    for i in np.argsort(ranked_times(time), kind="stable").tolist():  # ties at 12 digits: the candidates' order
        key = (float(tm[i]), float(tn[i]), float(sk[i]))
        if key in seen:
            continue
        seen.add(key)
        v = [float(f[i]) for f in fields]
        choices.append(TileChoice(*(int(x) for x in v[:7]), v[7], v[8], int(v[9]), *v[10:]))
        if len(choices) > ALTERNATIVES_KEPT:
            break
    return TilePlan("matrix", choices[0], tuple(choices[1:]))


def _gemm(m, n, k, batch=1, weights=True, a_elements=0) -> Kernel:
    act, flops = 2.0, 2.0 * batch * m * n * k
    dram = act * batch * (m * k + m * n) + (k * n * act if weights else batch * k * n * act)
    return Kernel(
        f"g{m}x{n}x{k}", ("n",), ("MatMul",), KernelRule.SINGLE, Engine.MATRIX, LayerType.OTHER, flops, flops, 0.0,
        dram, k * n * act if weights else 0.0, MatrixShape(batch, m, n, k, a_elements=a_elements),
    )  # fmt: skip


SHAPES = [
    (1408, 3073, 4096),  # a second, nearly empty wave
    (8192, 8192, 8192),
    (64, 64, 65536),  # too few tiles: split-K runs
    (128, 256, 30000),  # split-K, with partials past L2 at some splits
    (1, 4096, 4096),  # a GEMV
    (3, 5, 7),
    (512, 768, 768, 12),  # batched, as attention's per-head products
    (1000, 1000, 64, 1, False),  # no weights: B is an activation, read per batch
    (784, 64, 576, 8, True, 8 * 28 * 28 * 64),  # an implicit-GEMM conv: A's distinct elements given
]


@pytest.fixture(scope="module")
def h100():
    return mapper.load_hardware("h100-sxm")


@pytest.mark.parametrize("act_bytes", [2.0, 4.0])
def test_batched_search_equals_the_one_kernel_search(h100, act_bytes):
    kernels = [_gemm(*s) for s in SHAPES]
    peak = h100.matrix_peak("bf16" if act_bytes == 2.0 else "fp32")
    expected = [_reference_plan(k, h100, peak, act_bytes, act_bytes) for k in kernels]
    assert any(p.chosen.split_k > 1 for p in expected)  # the split-K path is covered
    assert plan_matrices(kernels, h100, peak, act_bytes, act_bytes) == expected
    assert [plan_matrices((k,), h100, peak, act_bytes, act_bytes)[0] for k in kernels] == expected  # one each
    order = list(range(len(kernels)))
    random.Random(7).shuffle(order)
    shuffled = plan_matrices([kernels[i] for i in order], h100, peak, act_bytes, act_bytes)
    assert shuffled == [expected[i] for i in order]


def test_nothing_fits_falls_back_alone_inside_a_batch(h100):
    # SRAM too small for any multi-stage tile: the smallest aligned tile, single stage, for every kernel
    tiny = dataclasses.replace(h100, sram_per_unit_bytes=4096)
    kernels = [_gemm(*s) for s in SHAPES[:4]]
    peak = h100.matrix_peak("bf16")
    expected = [_reference_plan(k, tiny, peak, 2.0, 2.0) for k in kernels]
    macs = macs_per_clock_per_unit(tiny, peak)
    assert len(_fitting(tiny.matrix_instruction_mnk, 2.0, 4096, macs, tiny.sram_bytes_per_clock_per_unit)[0]) == 0
    assert plan_matrices(kernels, tiny, peak, 2.0, 2.0) == expected


def test_a_batch_mixing_runnable_and_unfit_rows(h100):
    # a profile where some tiles fit: each kernel's own set of runnable candidates, one batch
    mid = dataclasses.replace(h100, sram_per_unit_bytes=40_000)
    kernels = [_gemm(*s) for s in SHAPES]
    peak = h100.matrix_peak("bf16")
    assert plan_matrices(kernels, mid, peak, 2.0, 2.0) == [_reference_plan(k, mid, peak, 2.0, 2.0) for k in kernels]


@pytest.mark.parametrize("profile", mapper.list_hardware())
def test_every_profiles_search_equals_the_search_over_every_stage_count(profile):
    hw = mapper.load_hardware(profile)
    rng = random.Random(profile)
    shapes = SHAPES + [
        (rng.randint(1, 9000), rng.randint(1, 9000), rng.randint(1, 20000), rng.choice((1, 1, 4, 48)))
        for _ in range(12)
    ]
    kernels = [_gemm(*s) for s in shapes]
    dtype, act = ("bf16", 2.0) if hw.has_matrix_peak("bf16") else ("fp32", 4.0)
    peak = hw.matrix_peak(dtype)
    assert plan_matrices(kernels, hw, peak, act, act) == [_reference_plan(k, hw, peak, act, act) for k in kernels]


def test_candidates_timed_in_the_search_equal_the_cost_stages_re_timing(h100):
    kernels = [_gemm(*s) for s in SHAPES]
    peak = h100.matrix_peak("bf16")
    for cap in (None, 150.0):  # a low power cap throttles some candidates
        bases = [Basis.of(k, _target(h100, cap)) for k in kernels]
        timed = plan_matrices(kernels, h100, peak, 2.0, 2.0, bases)
        plain = plan_matrices(kernels, h100, peak, 2.0, 2.0)
        assert timed == [_on_kernel_basis(p, b) for p, b in zip(plain, bases)]
        assert timed != plain


def test_a_mappings_power_cap_times_its_batched_search_as_each_kernels_own_cost():
    """The cost stage hands a slice's searches the plan's power cap: each matrix kernel's tiling (chosen tile and
    runners-up, timed as the kernel) is the one its own `estimate_cost` under that cap gives. Without the cap
    the batched search timed the candidates against the profile's TDP."""
    hw = mapper.load_hardware("h100-sxm")
    workload = mapper.open_model("bert-base").bind({"batch": 8, "seq": 256})
    for cap in (150.0, None):
        result = mapper.map_workload(workload, hw, mapper.PlanOptions(dtype="bf16", power_cap_w=cap))
        matrix = [e for e in result.kernels if e.assessment.tiling.kind == "matrix"]
        assert matrix
        for e in matrix:
            assert e.assessment.tiling == estimate_cost(e.kernel, _target(hw, cap)).tiling, (
                cap,
                e.kernel.name,
            )


def test_kernel_time_is_the_smooth_max_of_scalars():
    rng = random.Random(3)
    pairs = [(10 ** rng.uniform(-8, -1), 10 ** rng.uniform(-8, -1)) for _ in range(20000)] + [(0.0, 1e-5), (1e-5, 0.0)]
    for c, m in pairs:
        assert kernel_time(c, m, 2e-6, 1e-6, P) == float(smooth_max(c, m, P)) + 2e-6 + 1e-6
    cs, ms = zip(*pairs[:500])
    assert kernel_times(cs, ms, 2e-6, [0.0] * 500, P) == [kernel_time(c, m, 2e-6, 0.0, P) for c, m in zip(cs, ms)]


def test_record_copies_equal_dataclasses_replace():
    choice = TileChoice(*range(2, 2 + len(dataclasses.fields(TileChoice))))  # every field its own value
    assert choice.with_time(9.5) == dataclasses.replace(choice, time_s=9.5)
    kernel = dataclasses.replace(_gemm(64, 64, 64), reduction_rows=3, layout="nhwc", note="n", devices=2, stage=1)
    assert kernel.replaced(engine=Engine.SFU) == dataclasses.replace(kernel, engine=Engine.SFU)


def test_assessments_make_only_the_missing_in_order():
    caches = ModelCaches()
    asked = []

    def make(positions):
        asked.append(list(positions))
        return [f"v{i}" for i in positions]

    assert caches.assessments(("hw", "plan"), ["a", "b"], make) == ["v0", "v1"]
    assert caches.assessments(("hw", "plan"), ["c", "a", "d"], make) == ["v0", "v0", "v2"]
    assert caches.assessments(("hw", "other"), ["a"], make) == ["v0"]  # the target is in the key
    assert asked == [[0, 1], [0, 2], [0]]
