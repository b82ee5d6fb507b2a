"""Tiling search: the compile-time scheduling step, vectorized over candidates with numpy.

Stage six. Matrix kernels (GEMM, conv as implicit GEMM) try every tile aligned to
the matrix instruction whose multi-stage working set fits the unit's SRAM, with
split-K when there are too few tiles; fused attention tries query/key block
sizes. Each candidate gets wave and padding (tile) quantization, DRAM traffic
with L2 reuse, and a time; the fastest wins and the runners-up are kept.
Vector kernels get a block size, a pass count and their grid synchronizations.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from mapper.core.result import Kernel, TileChoice, TilePlan
from mapper.hardware.profile import HardwareProfile

TILE_MULTIPLES = (1, 2, 4)  # tile edge = instruction edge x these (and 64..256 for small instructions)
TILE_EDGES = (64, 128, 256)
TILE_K = (32, 64, 128)
STAGES = (2, 3, 4)  # multi-stage (cp.async / TMA) buffering depth
SPLIT_K = (1, 2, 4, 8, 16)
ACCUMULATOR_BYTES = 4  # fp32 accumulators (PRIMER s4 working-set formula)
L2_REUSE_FRACTION = 0.5  # an operand this share of L2 or smaller stays resident across tiles
# Operand bytes an SM's shared memory delivers per clock: 32 banks x 4 B (NVIDIA CUDA C Programming Guide,
# "Shared Memory" section). Small tiles need more operand bytes per MAC and starve the matrix units.
SRAM_BYTES_PER_CLOCK = 128
# Smooth max of compute and memory time: overlap is imperfect (PRIMER s5), but multi-stage software
# pipelining hides most loads behind the MMAs; 6 costs 12% at equal compute and memory time.
OVERLAP_EXPONENT = 6.0
# CTAs of one cluster share operand panels fetched from L2 (Hopper TMA multicast; CUTLASS SM90 kernels
# default to 2-CTA clusters): each panel crosses the L2->SM path once per cluster, not once per CTA.
L2_CLUSTER_SHARING = 2.0
ALTERNATIVES_KEPT = 3
PICK_CHUNK = 32  # ranked candidates read at a time (`_pick`): 19-28 ranks held the 4 kept tiles of BERT-base's GEMMs
ATTENTION_BLOCKS_Q = (64, 128)  # FlashAttention-2/3 query block sizes
ATTENTION_BLOCKS_KV = (64, 128, 256)
SOFTMAX_VECTOR_FLOPS = 4  # per score besides the exp: max, subtract, sum, rescale (FlashAttention-2)
VECTOR_BLOCK_MAX = 1024
ROW_IN_SRAM_SHARE = 0.5  # a reduced row that fits in half a unit's SRAM is reduced in one pass


def smooth_max(a, b):
    return (np.asarray(a, float) ** OVERLAP_EXPONENT + np.asarray(b, float) ** OVERLAP_EXPONENT) ** (
        1 / OVERLAP_EXPONENT
    )


def _edges(instr: int) -> np.ndarray:
    cands = {instr * m for m in TILE_MULTIPLES} | {e for e in TILE_EDGES if e % max(instr, 1) == 0}
    return np.array(sorted(c for c in cands if c >= instr and c <= max(256, instr)), dtype=float)


def _grid(*axes):
    mesh = np.meshgrid(*axes, indexing="ij")
    return [m.reshape(-1) for m in mesh]


def _macs_per_clock_per_unit(hw: HardwareProfile, peak: float) -> float:
    return peak / 2 / max(hw.compute_units, 1) / max(hw.clock_hz, 1.0)


@functools.lru_cache(maxsize=64)  # a pure function of its arguments: a constant table built lazily, not state
def _candidates(instruction: tuple[int, int, int], act_bytes: float) -> tuple[np.ndarray, ...]:
    """Every (tile m, n, k, stages, split-K) for an instruction shape, with its SRAM working set
    (PRIMER s4); the same for every kernel on a device, so built once. Read-only arrays."""
    im, in_, ik = instruction
    tm, tn, tk, st, sk = _grid(
        _edges(im),
        _edges(in_),
        np.array([k for k in TILE_K if k % max(ik, 1) == 0] or [ik], float),
        np.array(STAGES, float),
        np.array(SPLIT_K, float),
    )
    sram = st * (tm * tk + tk * tn) * act_bytes + tm * tn * ACCUMULATOR_BYTES
    out = (tm, tn, tk, st, sk, sram)
    for a in out:
        a.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)  # pure, like `_candidates`: a device's figures, not state
def _fitting(
    instruction: tuple[int, int, int], act_bytes: float, sram_bytes: float, macs_per_clock: float
) -> tuple[np.ndarray, ...]:
    """The candidates whose working set fits the unit's SRAM, in their order (what every search on the
    device starts from), whether each runs without split-K, and each tile's operand-delivery efficiency
    (the share of the matrix units' rate that SRAM's bytes per clock sustain). Read-only arrays."""
    tm, tn, tk, st, sk, sram = _candidates(instruction, act_bytes)
    fits = sram <= sram_bytes
    tm, tn, tk, st, sk, sram = (a[fits] for a in (tm, tn, tk, st, sk, sram))
    need = macs_per_clock * (tm + tn) / (tm * tn) * act_bytes
    out = (tm, tn, tk, st, sk, sram, sk == 1, np.minimum(1.0, SRAM_BYTES_PER_CLOCK / need))
    for a in out:
        a.setflags(write=False)
    return out


def plan_matrix(
    kernel: Kernel, hw: HardwareProfile, peak: float, act_bytes: float, weight_bytes_per: float
) -> TilePlan:
    s = kernel.matrix
    M, N, K, B = float(s.m), float(s.n), float(s.k), float(s.batch)
    P = hw.compute_units
    macs = _macs_per_clock_per_unit(hw, peak)
    tm, tn, tk, st, sk, sram, single, tile_eff = _fitting(
        hw.matrix_instruction_mnk, act_bytes, hw.sram_per_unit_bytes, macs
    )
    tiles_m, tiles_n = np.ceil(M / tm), np.ceil(N / tn)
    base_tiles = B * tiles_m * tiles_n
    ok = single | ((base_tiles < P) & (sk <= np.ceil(K / tk)))
    if not ok.any():  # nothing fits: fall back to the smallest aligned tile, single stage
        tm, tn, tk, st, sk, sram = _candidates(hw.matrix_instruction_mnk, act_bytes)
        ok = (tm == tm.min()) & (tn == tn.min()) & (tk == tk.min()) & (st == st.min()) & (sk == 1)
        tiles_m, tiles_n = np.ceil(M / tm), np.ceil(N / tn)
        base_tiles = B * tiles_m * tiles_n
        need = macs * (tm + tn) / (tm * tn) * act_bytes
        tile_eff = np.minimum(1.0, SRAM_BYTES_PER_CLOCK / need)
    if not ok.all():
        tm, tn, tk, st, sk, sram, tiles_m, tiles_n, base_tiles, tile_eff = (
            a[ok] for a in (tm, tn, tk, st, sk, sram, tiles_m, tiles_n, base_tiles, tile_eff)
        )
    tiles = base_tiles * sk
    waves = np.ceil(tiles / P)
    wave_eff = tiles / (waves * P)
    pad_eff = (M * N) / (tiles_m * tm * tiles_n * tn)
    k_eff = K / (np.ceil(K / (sk * tk)) * tk * sk)
    base_eff = hw.matrix_efficiency.at(kernel.matrix_flops)
    compute = kernel.matrix_flops / (peak * base_eff * wave_eff * pad_eff * k_eff * tile_eff)
    # traffic: operands re-read once per tile row/column, except what L2 keeps across a wave
    # implicit GEMM never materializes im2col: A's distinct bytes are the input's, its tap re-reads hit L1
    a_bytes = B * (s.a_elements or M * K) * act_bytes
    b_bytes = (
        (1 if kernel.weight_bytes > 0 else B) * K * N * (weight_bytes_per if kernel.weight_bytes > 0 else act_bytes)
    )
    # A wave runs as a near-square block of tiles (swizzled rasterization) moving through K together:
    # the tiles of one block row share A's k-slices in L2, those of one block column share B's.
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
    l2 = (a_bytes * tiles_n + b_bytes * tiles_m) / L2_CLUSTER_SHARING + partials
    # DRAM and L2 transfers pipeline with each other: the slower level sets the memory time
    memory = np.maximum(
        dram / (hw.dram_bandwidth_bytes_per_s * hw.dram_efficiency.at_array(dram)), l2 / hw.l2_bandwidth_bytes_per_s
    )
    time = smooth_max(compute, memory) + np.where(sk > 1, hw.grid_sync_s, 0.0)
    candidates = _Candidates(tm, tn, tk, st, sk, tiles, waves, wave_eff, pad_eff, sram, dram, l2, compute, memory, time)
    return _pick("matrix", candidates)


@dataclass(frozen=True, slots=True)
class _Candidates:
    """Every candidate tiling as arrays, one per TileChoice field in its order; `_pick` ranks them."""

    tile_m: np.ndarray
    tile_n: np.ndarray
    tile_k: np.ndarray
    stages: np.ndarray
    split_k: np.ndarray
    tiles: np.ndarray
    waves: np.ndarray
    wave_efficiency: np.ndarray
    padding_efficiency: np.ndarray
    sram_bytes: np.ndarray
    dram_bytes: np.ndarray
    l2_bytes: np.ndarray
    compute_s: np.ndarray | float
    memory_s: np.ndarray | float
    time_s: np.ndarray


def _pick(kind: str, c: _Candidates) -> TilePlan:
    """The fastest candidate and the next ALTERNATIVES_KEPT of other (tile m, tile n, split-K), ties in the
    candidates' order. Ranked candidates are read in chunks of PICK_CHUNK: reading a numpy scalar costs
    as much as a chunk's list, and the first few distinct tiles are usually within ~30 ranks."""
    time = c.time_s
    compute, memory = np.broadcast_to(c.compute_s, time.shape), np.broadcast_to(c.memory_s, time.shape)
    order = np.argsort(time, kind="stable")
    choices, seen = [], set()
    for start in range(0, len(order), PICK_CHUNK):
        ranked = order[start : start + PICK_CHUNK]
        keys = zip(c.tile_m[ranked].tolist(), c.tile_n[ranked].tolist(), c.split_k[ranked].tolist())
        for i, key in zip(ranked.tolist(), keys):
            if key in seen:
                continue
            seen.add(key)
            choices.append(_choice(c, compute, memory, i))
            if len(choices) > ALTERNATIVES_KEPT:
                return TilePlan(kind, choices[0], tuple(choices[1:]))
    return TilePlan(kind, choices[0], tuple(choices[1:]))


def _choice(c: _Candidates, compute: np.ndarray, memory: np.ndarray, i: int) -> TileChoice:
    return TileChoice(
        int(c.tile_m[i]),
        int(c.tile_n[i]),
        int(c.tile_k[i]),
        int(c.stages[i]),
        int(c.split_k[i]),
        int(c.tiles[i]),
        int(c.waves[i]),
        float(c.wave_efficiency[i]),
        float(c.padding_efficiency[i]),
        int(c.sram_bytes[i]),
        float(c.dram_bytes[i]),
        float(c.l2_bytes[i]),
        float(compute[i]),
        float(memory[i]),
        float(c.time_s[i]),
    )


def _attention_grid(d: int, act_bytes: float, hw: HardwareProfile):
    bq, bkv = _grid(np.array(ATTENTION_BLOCKS_Q, float), np.array(ATTENTION_BLOCKS_KV, float))
    stages = 2.0
    sram = (bq * d + 2 * stages * bkv * d) * act_bytes + bq * bkv * ACCUMULATOR_BYTES
    ok = sram <= hw.sram_per_unit_bytes
    return bq[ok], bkv[ok], sram[ok]


def attention_fits(shape, act_bytes: float, hw: HardwareProfile) -> bool:
    """Does some FlashAttention block size keep the S x S scores on chip?"""
    return len(_attention_grid(shape.k, act_bytes, hw)[0]) > 0


def plan_attention(kernel: Kernel, hw: HardwareProfile, peak: float, vector_peak: float, act_bytes: float) -> TilePlan:
    s = kernel.matrix  # batch = B*H, m = Sq, n = Skv, k = head dim
    P = hw.compute_units
    bq, bkv, sram = _attention_grid(s.k, act_bytes, hw)
    tiles = s.batch * np.ceil(s.m / bq)
    waves = np.ceil(tiles / P)
    wave_eff = tiles / (waves * P)
    pad_eff = (s.m / (np.ceil(s.m / bq) * bq)) * (s.n / (np.ceil(s.n / bkv) * bkv))
    need = _macs_per_clock_per_unit(hw, peak) * (bq + bkv) / (bq * bkv) * act_bytes
    tile_eff = np.minimum(1.0, SRAM_BYTES_PER_CLOCK / need)
    matrix = kernel.matrix_flops / (peak * hw.matrix_efficiency.at(kernel.matrix_flops) * wave_eff * pad_eff * tile_eff)
    scores = s.batch * s.m * s.n
    # the softmax's exp runs on the special-function unit between the two GEMMs (FlashAttention-3 s3)
    softmax = kernel.sfu_ops / hw.sfu_peak_ops_per_s + SOFTMAX_VECTOR_FLOPS * scores / vector_peak
    compute = matrix + softmax
    kv_bytes = 2 * s.batch * s.n * s.k * act_bytes
    heads_per_wave = np.maximum(1, P / np.ceil(s.m / bq))
    kv_resident = heads_per_wave * 2 * s.n * s.k * act_bytes <= hw.l2_bytes
    dram = kernel.dram_bytes + np.where(kv_resident, 0.0, kv_bytes * (np.ceil(s.m / bq) - 1))
    l2 = kernel.dram_bytes + kv_bytes * (np.ceil(s.m / bq) - 1)
    memory = np.maximum(
        dram / (hw.dram_bandwidth_bytes_per_s * hw.dram_efficiency.at_array(dram)), l2 / hw.l2_bandwidth_bytes_per_s
    )
    time = smooth_max(compute, memory)
    ones = np.ones_like(bq)
    stages = 2 * ones
    return _pick(
        "attention",
        _Candidates(
            bq, bkv, s.k * ones, stages, ones, tiles, waves, wave_eff, pad_eff, sram, dram, l2, compute, memory, time
        ),
    )


def plan_vector(kernel: Kernel, hw: HardwareProfile, act_bytes: float) -> TilePlan:
    """Block size, passes and cross-block syncs of an elementwise or reduction kernel."""
    if kernel.reduction_length <= 0:
        return TilePlan("vector", None, block_size=256, passes=1, grid_syncs=0)
    length = kernel.reduction_length
    block = int(min(VECTOR_BLOCK_MAX, max(32, 2 ** math.ceil(math.log2(max(length / 8, 1))))))
    one_pass = length * act_bytes <= ROW_IN_SRAM_SHARE * hw.sram_per_unit_bytes
    return TilePlan("vector", None, block_size=block, passes=1 if one_pass else 2, grid_syncs=0 if one_pass else 1)
