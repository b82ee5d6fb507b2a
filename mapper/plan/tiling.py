"""Tiling search: the compile-time scheduling step, vectorized over candidates with numpy.

Matrix kernels (GEMM, conv as implicit GEMM) try every tile aligned to
the matrix instruction whose multi-stage working set fits the unit's SRAM, with
split-K when there are too few tiles; fused attention tries query/key block
sizes (`plan.attention_tiling`). Each candidate gets wave and padding (tile) quantization, DRAM traffic
with L2 reuse, and a time; the fastest wins and the runners-up are kept.
Vector kernels get a block size, a pass count and their grid synchronizations.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mapper.core.result import Kernel, TileChoice, TilePlan
from mapper.core.vocab import KernelRule, MatrixKind, MatrixSchedule
from mapper.hardware.profile import HardwareProfile

TILE_MULTIPLES = (1, 2, 4)  # tile edge = instruction edge x these (and 64..256 for small instructions)
TILE_EDGES = (64, 128, 256)
TILE_K = (32, 64, 128)
STAGES = (2, 3, 4)  # multi-stage (cp.async / TMA) buffering depth
SPLIT_K = (1, 2, 4, 8, 16)
ACCUMULATOR_BYTES = 4  # fp32 accumulators: a tile's working set is stages x (A and B slices) + its C tile
L2_REUSE_FRACTION = 0.5  # an operand this share of L2 or smaller stays resident across tiles
# The device's own figures the search reads from its profile, each with its source there: the operand bytes a
# unit's SRAM delivers per clock (`sram_bytes_per_clock_per_unit`: small tiles need more bytes per MAC and
# starve the matrix units), the units sharing one L2 fetch of an operand panel (`l2_cluster_sharing`: Hopper's
# TMA multicast to a 2-CTA cluster) and the smooth max's power (`overlap_exponent`: multi-stage pipelining
# hides most loads behind the math).
ALTERNATIVES_KEPT = 3
PICK_CHUNK = 32  # ranked candidates read at a time (`_pick`): 19-28 ranks held the 4 kept tiles of BERT-base's GEMMs
VECTOR_BLOCK_MAX = 1024
ROW_IN_SRAM_SHARE = 0.5  # a reduced row that fits in half a unit's SRAM is reduced in one pass


def smooth_max(a, b, exponent: float):
    """The p-norm of two times at the profile's `overlap_exponent`: imperfect overlap of compute and memory."""
    return (np.asarray(a, float) ** exponent + np.asarray(b, float) ** exponent) ** (1 / exponent)


def _edges(instr: int) -> np.ndarray:
    cands = {instr * m for m in TILE_MULTIPLES} | {e for e in TILE_EDGES if e % max(instr, 1) == 0}
    return np.array(sorted(c for c in cands if c >= instr and c <= max(256, instr)), dtype=float)


def grid(*axes):
    mesh = np.meshgrid(*axes, indexing="ij")
    return [m.reshape(-1) for m in mesh]


def macs_per_clock_per_unit(hw: HardwareProfile, peak: float) -> float:
    return peak / 2 / max(hw.compute_units, 1) / max(hw.clock_hz, 1.0)


def delivery_efficiency(macs_per_clock: float, tile_m, tile_n, act_bytes: float, sram_bytes_per_clock: float):
    """A tile's operand-delivery efficiency: the share of the matrix units' rate that SRAM's bytes per clock
    sustain, given the operand bytes a tile needs per MAC (small tiles starve the units)."""
    need = macs_per_clock * (tile_m + tile_n) / (tile_m * tile_n) * act_bytes
    return np.minimum(1.0, sram_bytes_per_clock / need)


@functools.lru_cache(maxsize=64)  # a pure function of its arguments: a constant table built lazily, not state
def _candidates(instruction: tuple[int, int, int], act_bytes: float) -> tuple[np.ndarray, ...]:
    """Every (tile m, n, k, stages, split-K) for an instruction shape, with its SRAM working set
    (stages x the A and B slices, plus the fp32 C tile); the same for every kernel on a device, so built once.
    Read-only arrays."""
    im, in_, ik = instruction
    tm, tn, tk, st, sk = grid(
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


def key_ids(tile_m: np.ndarray, tile_n: np.ndarray, split_k: np.ndarray) -> np.ndarray:
    """Each candidate's (tile m, tile n, split-K) as one integer: equal triples, equal ids (`pick_rows` keeps
    one candidate of each)."""
    return np.unique(np.stack((tile_m, tile_n, split_k), axis=1), axis=0, return_inverse=True)[1].reshape(-1)


@functools.lru_cache(maxsize=64)  # pure, like `_candidates`: a device's figures, not state
def _fitting(
    instruction: tuple[int, int, int],
    act_bytes: float,
    sram_bytes: float,
    macs_per_clock: float,
    sram_bytes_per_clock: float,
) -> tuple[np.ndarray, ...]:
    """The candidates whose working set fits the unit's SRAM, the fewest stages of each (tile m, n, k,
    split-K), in their order (what every search on the device starts from), whether each runs without
    split-K, and each tile's operand-delivery efficiency (the share of the matrix units' rate that SRAM's
    bytes per clock sustain), and each one's (tile m, tile n, split-K) as one number (`key_ids`). Read-only.

    Stages set the working set alone, not the time: the fewest that fit come first at an equal time and hold
    the (m, n, split-K) key of every deeper one, which `pick_rows` would pass over (665 -> 245 candidates on
    H100, the same picks)."""
    tm, tn, tk, st, sk, sram = _candidates(instruction, act_bytes)
    fitting = np.flatnonzero(sram <= sram_bytes)
    first = np.unique(np.stack((tm, tn, tk, sk), axis=1)[fitting], axis=0, return_index=True)[1]
    kept = fitting[np.sort(first)]
    tm, tn, tk, st, sk, sram = (a[kept] for a in (tm, tn, tk, st, sk, sram))
    delivery = delivery_efficiency(macs_per_clock, tm, tn, act_bytes, sram_bytes_per_clock)
    out = (tm, tn, tk, st, sk, sram, sk == 1, delivery, key_ids(tm, tn, sk))
    for a in out:
        a.setflags(write=False)
    return out


@dataclass(frozen=True, slots=True)
class Candidates:
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
    compute_s: np.ndarray
    memory_s: np.ndarray
    time_s: np.ndarray


# `Candidates` rows that TileChoice holds as ints (tile, stages, split-K, tiles, waves, SRAM bytes), the rest floats
_COUNT_FIELDS = [0, 1, 2, 3, 4, 5, 6, 9]
_MEASURED_FIELDS = [7, 8, 10, 11, 12, 13, 14]


class CandidateTimer(Protocol):
    """Times a kernel's kept candidates as the kernel runs (cost.estimate's `Basis`: launch, op scale, power cap)."""

    def times(
        self, compute_s: list[float], memory_s: list[float], dram: list[float], l2: list[float], split_k: list[int]
    ) -> list[float]: ...


def plan_matrices(
    kernels: Sequence[Kernel],
    hw: HardwareProfile,
    peak: float,
    act_bytes: float,
    weight_bytes_per: float,
    timers: Sequence[CandidateTimer] | None = None,
) -> list[TilePlan]:
    """The tile search of several matrix kernels in one numpy evaluation (a slice's new GEMMs): every
    (kernel, candidate) pair that may run is one element of flat arrays, kernels in order, so each
    element goes through the same floating-point operations as a search of its kernel alone. With
    `timers` (one a kernel), the kept candidates' `time_s` is their kernel's time, not the search's."""
    P = hw.compute_units
    macs = macs_per_clock_per_unit(hw, peak)
    tm, tn, tk, st, sk, sram, single, tile_eff, key_id = _fitting(
        hw.matrix_instruction_mnk, act_bytes, hw.sram_per_unit_bytes, macs, hw.sram_bytes_per_clock_per_unit
    )
    shapes = np.array([(s.m, s.n, s.k, s.batch) for s in (k.shape for k in kernels)], dtype=np.float64)
    M, N, K, B = (shapes[:, i : i + 1] for i in range(4))
    base_tiles = B * np.ceil(M / tm) * np.ceil(N / tn)
    ok = single | ((base_tiles < P) & (sk <= np.ceil(K / tk)))
    counts = ok.sum(axis=1).tolist()
    plans: dict[int, TilePlan] = {}
    if any(counts):
        rows, cols = ok.nonzero()
        kept = [i for i, n in enumerate(counts) if n]
        figures = np.array([_matrix_figures(kernels[i], hw, act_bytes, weight_bytes_per) for i in kept], float)
        candidates = _matrix_times(figures, rows, cols, (tm, tn, tk, st, sk, sram, tile_eff), hw, peak)
        kept_timers = [timers[i] for i in kept] if timers else None
        for i, plan in zip(kept, pick_rows("matrix", candidates, key_id[cols], [counts[i] for i in kept], kept_timers)):
            plans[i] = plan
    for i, n in enumerate(counts):
        if not n:  # nothing fits: fall back to the smallest aligned tile, single stage
            plans[i] = _plan_unfit(kernels[i], hw, peak, act_bytes, weight_bytes_per, timers[i] if timers else None)
    return [plans[i] for i in range(len(kernels))]


def _plan_unfit(
    kernel: Kernel,
    hw: HardwareProfile,
    peak: float,
    act_bytes: float,
    weight_bytes_per: float,
    timer: CandidateTimer | None,
) -> TilePlan:
    tm, tn, tk, st, sk, sram = _candidates(hw.matrix_instruction_mnk, act_bytes)
    ok = (tm == tm.min()) & (tn == tn.min()) & (tk == tk.min()) & (st == st.min()) & (sk == 1)
    macs = macs_per_clock_per_unit(hw, peak)
    tile_eff = delivery_efficiency(macs, tm, tn, act_bytes, hw.sram_bytes_per_clock_per_unit)
    (cols,) = ok.nonzero()
    table = (tm, tn, tk, st, sk, sram, tile_eff)
    figures = np.array([_matrix_figures(kernel, hw, act_bytes, weight_bytes_per)], float)
    candidates = _matrix_times(figures, np.zeros_like(cols), cols, table, hw, peak)
    return pick_rows("matrix", candidates, key_ids(tm, tn, sk)[cols], [len(cols)], [timer] if timer else None)[0]


def _matrix_times(
    figures: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    table: tuple[np.ndarray, ...],
    hw: HardwareProfile,
    peak: float,
) -> Candidates:
    """Each (kernel row, candidate column) pair's waves, padding, traffic and time, as flat arrays: `figures`
    holds a row of `_matrix_figures` per kernel, `table` the candidates' tile, stages, split-K, SRAM and
    operand-delivery efficiency."""
    P = hw.compute_units
    M, N, K, B, flops, boundary, a_bytes, b_bytes, base_eff, dram_share = figures.T[:, rows]
    tm, tn, tk, st, sk, sram, tile_eff = (a[cols] for a in table)
    tiles_m, tiles_n = np.ceil(M / tm), np.ceil(N / tn)
    tiles = B * tiles_m * tiles_n * sk
    waves = np.ceil(tiles / P)
    wave_eff = tiles / (waves * P)
    pad_eff = (M * N) / (tiles_m * tm * tiles_n * tn)
    k_eff = K / (np.ceil(K / (sk * tk)) * tk * sk)
    compute = flops / (peak * base_eff * wave_eff * pad_eff * k_eff * tile_eff)
    # A wave runs as a near-square block of tiles (swizzled rasterization) moving through K together:
    # the tiles of one block row share A's k-slices in L2, those of one block column share B's.
    wave_m = np.minimum(tiles_m, np.ceil(np.sqrt(P)))
    wave_n = np.minimum(tiles_n, np.ceil(P / wave_m))
    passes_a = np.where(a_bytes <= L2_REUSE_FRACTION * hw.l2_bytes, 1, np.ceil(tiles_n / wave_n))
    passes_b = np.where(b_bytes <= L2_REUSE_FRACTION * hw.l2_bytes, 1, np.ceil(tiles_m / wave_m))
    partials = np.where(sk > 1, 2 * sk * B * M * N * ACCUMULATOR_BYTES, 0.0)
    dram = (
        boundary + a_bytes * (passes_a - 1) + b_bytes * (passes_b - 1) + np.where(partials > hw.l2_bytes, partials, 0)
    )
    l2 = (a_bytes * tiles_n + b_bytes * tiles_m) / hw.l2_cluster_sharing + partials
    dram_eff = hw.matrix_dram_curve.at_array(dram) * dram_share
    dram_s = dram / (hw.dram_bandwidth_bytes_per_s * dram_eff)
    memory, time = _memory_and_time(compute, dram_s, l2, sk, hw)
    if hw.matrix_schedule == MatrixSchedule.STREAM_K:  # a partial last wave spread over every unit, where faster
        wave_eff, compute, l2, memory, time = _stream_k(
            tiles, tm * tn, (compute * wave_eff, dram_s, l2, sk), (wave_eff, compute, memory, time), hw
        )
    return Candidates(tm, tn, tk, st, sk, tiles, waves, wave_eff, pad_eff, sram, dram, l2, compute, memory, time)


def _memory_and_time(compute, dram_s, l2, split_k, hw: HardwareProfile):
    """(memory time, time) of matrix candidates: DRAM and L2 transfers pipeline with each other, so the slower level
    sets the memory time; compute and memory overlap (the smooth max), and a split-K candidate's reduction syncs."""
    memory = np.maximum(dram_s, l2 / hw.l2_bandwidth_bytes_per_s)
    return memory, smooth_max(compute, memory, hw.overlap_exponent) + np.where(split_k > 1, hw.grid_sync_s, 0.0)


def _stream_k(tiles, tile_elements, figures, data_parallel, hw: HardwareProfile):
    """(wave efficiency, compute, L2 bytes, memory, time) of candidates under a stream-K library
    (`MatrixSchedule.STREAM_K`: Osama et al., PPoPP 2023): a partial last wave's tiles have their K loops dealt over
    every unit, so no unit idles, and the units sharing a tile fix it up, each writing one fp32 partial tile that
    its owner reads back through L2. The library takes that only where it beats data-parallel waves (a tail of a
    few tiles' shares costs more than it saves on a small kernel); whole waves and one partial wave run as they
    are."""
    work, dram_s, l2, sk = figures  # work: the compute time with every unit busy
    wave_eff, compute, memory, time = data_parallel
    units = hw.compute_units
    tail = (tiles > units) & (tiles % units > 0)
    l2_sk = l2 + np.where(tail, 2 * units * tile_elements * ACCUMULATOR_BYTES, 0.0)
    memory_sk, time_sk = _memory_and_time(work, dram_s, l2_sk, sk, hw)
    use = tail & (time_sk < time)
    return (
        np.where(use, 1.0, wave_eff),
        np.where(use, work, compute),
        np.where(use, l2_sk, l2),
        np.where(use, memory_sk, memory),
        np.where(use, time_sk, time),
    )


def alignment_shares(kernel: Kernel, hw: HardwareProfile, act_bytes: float) -> tuple[float, float]:
    """(matrix rate, DRAM efficiency) shares a GEMM keeps on the device's slower path when its row strides (K of
    A, N of B and C, in bytes) are off the profile's `matrix_alignment_bytes`: Hopper's TMA-fed cuBLAS kernels
    need 16-byte strides (measured on H200: n = 3073 at 0.13 of n = 3072's rate, GPT-2's vocabulary 50257 at
    0.18 of the padded 50304's, data/evidence/h200). (1.0, 1.0): aligned, not a GEMM, or no rule."""
    s, align = kernel.matrix, hw.matrix_alignment_bytes
    rate, dram = hw.unaligned_matrix, hw.unaligned_dram  # the schema gives all three or none
    if align is None or rate is None or dram is None or s is None or s.kind != MatrixKind.GEMM:
        return 1.0, 1.0
    if kernel.rule == KernelRule.FLASH_ATTENTION:
        return 1.0, 1.0
    if (s.k * act_bytes) % align == 0 and (s.n * act_bytes) % align == 0:
        return 1.0, 1.0
    return rate, dram


def _matrix_figures(kernel: Kernel, hw: HardwareProfile, act_bytes: float, weight_bytes_per: float) -> tuple:
    """A kernel's scalars the search reads: M, N, K, batch, matrix FLOPs, boundary bytes, A's and B's bytes
    (operands re-read once per tile row/column, except what L2 keeps across a wave), the size efficiency
    and the shares of the matrix rate and DRAM efficiency its alignment keeps (`alignment_shares`)."""
    s = kernel.shape
    M, N, K, B = float(s.m), float(s.n), float(s.k), float(s.batch)
    # implicit GEMM never materializes im2col: A's distinct bytes are the input's, its tap re-reads hit L1
    a_bytes = B * (s.a_elements or M * K) * act_bytes
    weights = kernel.weight_bytes > 0
    b_bytes = (1 if weights else B) * K * N * (weight_bytes_per if weights else act_bytes)
    base_eff = hw.matrix_efficiency.at(kernel.matrix_flops)
    rate_share, dram_share = alignment_shares(kernel, hw, act_bytes)
    return M, N, K, B, kernel.matrix_flops, kernel.dram_bytes, a_bytes, b_bytes, base_eff * rate_share, dram_share


RANK_DIGITS = 12  # significant digits a candidate's time is ranked at (`ranked_times`)


def ranked_times(times: np.ndarray) -> np.ndarray:
    """Times rounded to RANK_DIGITS significant digits for ranking, so that candidates equal in exact arithmetic tie
    on every machine: numpy's float64 power and exp differ in their last bits between CPUs (SVML's kernels where
    AVX-512 is found, its own elsewhere: 1e-16 to 1e-13 apart in the acceptance corpus), which flipped the order of
    two tiles of one time (64x256 and 256x64) and so the chosen tile; rounded, ties keep the candidates' order."""
    magnitude = np.floor(np.log10(np.maximum(np.abs(times), np.finfo(float).tiny)))
    scale = 10.0 ** (RANK_DIGITS - 1 - magnitude)
    return np.round(times * scale) / scale


def pick_rows(
    kind: str,
    c: Candidates,
    key_id: np.ndarray,
    counts: Sequence[int],
    timers: Sequence[CandidateTimer] | None = None,
) -> list[TilePlan]:
    """For each row (a kernel's run of `counts[i]` candidates, rows one after another): the fastest candidate
    and the next ALTERNATIVES_KEPT of other (tile m, tile n, split-K), ties in the candidates' order.
    Each row's first PICK_CHUNK ranks are read at once (the first few distinct tiles are usually within
    ~30 ranks); a row that needs more reads on in chunks."""
    rows = np.repeat(np.arange(len(counts)), counts)
    order = np.lexsort((ranked_times(c.time_s), rows))  # by row, then time; stable: ties keep the candidates' order
    starts = list(itertools.accumulate(counts[:-1], initial=0))
    window = np.minimum(np.array(starts)[:, None] + np.arange(PICK_CHUNK), len(order) - 1)
    ranked = order[window]
    chosen = []
    for start, count, first, keys in zip(starts, counts, ranked.tolist(), key_id[ranked].tolist()):
        picks, seen = [], set()
        for offset in range(0, count, PICK_CHUNK):
            if offset:  # past the window: read this row on
                first = order[start + offset : start + min(count, offset + PICK_CHUNK)].tolist()
                keys = key_id[first].tolist()
            for i, key in zip(first[: count - offset], keys[: count - offset]):
                if key not in seen:
                    seen.add(key)
                    picks.append(i)
                    if len(picks) > ALTERNATIVES_KEPT:
                        break
            if len(picks) > ALTERNATIVES_KEPT:
                break
        chosen.append(picks)
    flat = np.array([i for picks in chosen for i in picks])
    values = np.stack([getattr(c, f)[flat] for f in Candidates.__slots__])
    counted = values[_COUNT_FIELDS].astype(np.int64).T.tolist()  # int() of each: truncation, as the record's ints
    measured = values[_MEASURED_FIELDS].T.tolist()
    if timers:  # each row's kept candidates timed as its kernel (`CandidateTimer`) before the records are built
        at = 0
        for timer, picks in zip(timers, chosen):
            rows_n, rows_x = counted[at : at + len(picks)], measured[at : at + len(picks)]
            at += len(picks)
            compute, memory, dram, l2 = ([x[i] for x in rows_x] for i in (4, 5, 2, 3))
            times = timer.times(compute, memory, dram, l2, [n[4] for n in rows_n])
            for x, t in zip(rows_x, times):
                x[6] = t
    choices = iter(map(_choice, counted, measured))
    return [_plan(kind, [next(choices) for _ in picks]) for picks in chosen]


def _plan(kind: str, choices: list[TileChoice]) -> TilePlan:
    return TilePlan(kind, choices[0], tuple(choices[1:]))


def _choice(n: list[int], x: list[float]) -> TileChoice:
    """A candidate's counts (`_COUNT_FIELDS`) and measures (`_MEASURED_FIELDS`) as the record."""
    return TileChoice(n[0], n[1], n[2], n[3], n[4], n[5], n[6], x[0], x[1], n[7], x[2], x[3], x[4], x[5], x[6])


def plan_vector(kernel: Kernel, hw: HardwareProfile, act_bytes: float) -> TilePlan:
    """Block size, passes and cross-block syncs of an elementwise or reduction kernel."""
    if kernel.reduction_length <= 0:
        return TilePlan("vector", None, block_size=256, passes=1, grid_syncs=0)
    length = kernel.reduction_length
    block = int(min(VECTOR_BLOCK_MAX, max(32, 2 ** math.ceil(math.log2(max(length / 8, 1))))))
    one_pass = length * act_bytes <= ROW_IN_SRAM_SHARE * hw.sram_per_unit_bytes
    return TilePlan("vector", None, block_size=block, passes=1 if one_pass else 2, grid_syncs=0 if one_pass else 1)
