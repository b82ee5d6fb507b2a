"""Fused attention's tile search: query and key block sizes and key/value splits (the cost stage asks it, beside
`plan.tiling`'s matrix search, whose candidate records, delivery efficiency and pick it shares).

A FlashAttention kernel keeps the S x S scores on chip: each (sequence, head, query block) walks the keys
in blocks, its working set the query block, double-buffered key and value blocks and the score tile.
Where those work items are fewer than the units (a decode step: one query a sequence), the keys are split
across units and a second pass combines the partial outputs. How a decode step's work is cut is the runtime's
(`Target.decode_attention`): one item per (sequence, query head), or, where the runtime packs grouped-query
attention, the query heads sharing a K/V head as one item's rows (`work_items`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from mapper.core.result import Kernel, TilePlan
from mapper.core.vocab import DecodeSplit, MatrixKind
from mapper.hardware.profile import HardwareProfile
from mapper.hardware.target import DecodeAttention, Target
from mapper.plan.causal import triangle_share
from mapper.plan.tiling import (
    ACCUMULATOR_BYTES,
    Candidates,
    delivery_efficiency,
    grid,
    key_ids,
    macs_per_clock_per_unit,
    pick_rows,
    smooth_max,
)

ATTENTION_BLOCKS_Q = (64, 128)  # FlashAttention-2/3 query block sizes
ATTENTION_BLOCKS_KV = (64, 128, 256)
# Splits of the key/value sequence across units, their partial outputs combined by a second pass: what
# decode kernels do when (sequence, head, query block)s are fewer than units (FlashAttention-2's split-KV,
# `num_splits_heuristic` in flash_api.cpp, up to 128; FlashDecoding, Dao et al. 2023; vLLM's PagedAttention
# V2 partitions); each split takes whole key blocks, the count any of 1..128 (FlashAttention-2 tries each).
# Measured on H200 (data/evidence/h200): one sequence of 32 heads over 8192 cached keys streams 3.6 TB/s,
# which 32 busy SMs of 132 could not.
ATTENTION_KV_SPLITS = tuple(range(1, 129))
SPLIT_BELOW_SHARE = 0.8  # only work items under this share of the units split (flash_api.cpp: "enough to almost fill")
# TensorRT-LLM's XQA multi-block count (decoderXQAImplCommon.cpp `computeMultiBlockCount`, decoderXQAConstants.h):
# a block per 128 history tokens, at most round(sqrt(8 x that)) ("otherwise the final reduction may dominate"), cut
# to 8 waves of the SMs, and to 6,000 sub-sequences in all (`getXqaMaxNumSubSeq`, the reserved workspace)
XQA_MIN_HISTORY_TOKENS = 128
XQA_TARGET_WAVES = 8
XQA_MAX_SUB_SEQUENCES = 6000
SOFTMAX_VECTOR_FLOPS = 4  # per score besides the exp: max, subtract, sum, rescale (FlashAttention-2)


def xqa_blocks(items: int, history: int, units: int) -> int:
    """XQA's multi-block count: the blocks each (sequence, K/V head) of a decode step is split into."""
    blocks = max(history // XQA_MIN_HISTORY_TOKENS, 1)
    blocks = max(min(blocks, round(math.sqrt(blocks * 8.0))), 1)
    waves = items * blocks / units
    if waves > XQA_TARGET_WAVES:
        blocks = math.floor(blocks / (waves / XQA_TARGET_WAVES))
    return max(min(max(blocks, 1), XQA_MAX_SUB_SEQUENCES // max(items, 1)), 1)


def _kv_tiles(shape) -> int:
    """Key and value tiles a block loads: two, or one where the keys are the values (MLA's latent: FlashMLA's
    SharedStorageMLA holds one double-buffered 576-wide K tile, its first 512 columns read again as V)."""
    return 1 if shape.kind == MatrixKind.LATENT_ATTENTION else 2


def _attention_grid(d: int, act_bytes: float, hw: HardwareProfile, latent: bool = False):
    """The block sizes whose working set fits a unit's SRAM (`_fitting_blocks`), read-only."""
    return _fitting_blocks(int(d), float(act_bytes), float(hw.sram_per_unit_bytes), latent)


@functools.lru_cache(maxsize=256)  # a pure function of its arguments: a device's table, built once, not state
def _fitting_blocks(d: int, act_bytes: float, sram_bytes: float, latent: bool) -> tuple[np.ndarray, ...]:
    """The block sizes whose working set fits `sram_bytes`: the query block, double-buffered key and value blocks
    (one where the keys are the values), and the score tile: fp32, or for latent attention the probabilities
    staged at the activations' width for PV (FlashMLA's smem_p)."""
    bq, bkv = grid(np.array(ATTENTION_BLOCKS_Q, float), np.array(ATTENTION_BLOCKS_KV, float))
    stages = 2.0
    kv_tiles, score_bytes = (1, act_bytes) if latent else (2, ACCUMULATOR_BYTES)
    sram = (bq * d + kv_tiles * stages * bkv * d) * act_bytes + bq * bkv * score_bytes
    ok = sram <= sram_bytes
    out = (bq[ok], bkv[ok], sram[ok])
    for a in out:
        a.setflags(write=False)
    return out


def work_items(shape, decode: DecodeAttention) -> tuple[int, int]:
    """(work items, query rows each) of a fused attention: (sequences x query heads, new tokens), or where the
    runtime packs a grouped-query decode step (one new token, query heads sharing a K/V head) the group's query
    heads as the rows of one item per (sequence, K/V head): 8 rows of 64 instead of 1, and K and V read once."""
    if decode.packs_query_group and shape.m == 1 and shape.group > 1:
        return shape.batch // shape.group, shape.group
    return shape.batch, shape.m


def causal_share(shape, bq, bkv):
    """The share of a causal attention's score blocks a kernel computes (FlashAttention's causal=True skips the
    key blocks wholly above the diagonal): the S new queries see the P cached keys and the new ones up to their
    own, a query block's last row deciding its key blocks, so on average P + (S + bq) / 2 keys rounded up to a
    key block, of the P + S a full square holds. 1 for a single query (decode) or a cross-attention (fewer keys)."""
    if shape.m <= 1 or shape.n < shape.m:
        return np.ones_like(bq)
    past = shape.n - shape.m
    return np.minimum(1.0, (past + (shape.m + bq) / 2 + bkv / 2) / shape.n)


def attention_fits(shape, act_bytes: float, hw: HardwareProfile) -> bool:
    """Does some FlashAttention block size keep the S x S scores on chip?"""
    return len(_attention_grid(shape.k, act_bytes, hw, shape.kind == MatrixKind.LATENT_ATTENTION)[0]) > 0


def runs_masked_mha(shape, decode: DecodeAttention, hw: HardwareProfile) -> bool:
    """Whether a step runs the runtime's masked multi-head attention kernel: a decode step (one query a sequence) of
    multi-head attention, or of a query-head group its packed kernel does not take, on a runtime that has one
    (`DecodeAttention.masked_mha`) and a profile that gives its item time."""
    if not decode.masked_mha or shape.m != 1 or hw.masked_mha_item_s is None:
        return False
    packed = decode.packs_query_group and (decode.packed_group_max <= 0 or shape.group <= decode.packed_group_max)
    return shape.group <= 1 or not packed


def plan_masked_mha(kernel: Kernel, target: Target) -> TilePlan:
    """A masked multi-head attention decode kernel (TensorRT-LLM's `decoderMaskedMultiheadAttention`): one thread
    block per (sequence, query head), its dot products and weighted sum on the CUDA cores (no matrix tile, so no
    query rows padded), the keys split across units in multi-block mode where the blocks are few. A query head reads
    its K/V head's cache through L2: DRAM reads each K/V head once, L2 serves it to each of its query heads."""
    hw, s = target.hw, kernel.shape
    P = hw.compute_units
    block = float(target.decode_attention.page_tokens or ATTENTION_BLOCKS_KV[0])  # a split's keys: whole pages
    splits = np.array(ATTENTION_KV_SPLITS if target.decode_attention.splits_kv else (1,), float)
    items = float(s.batch)  # sequences x query heads
    key_blocks = np.ceil(s.n / block)
    kv_blocks = np.ceil(key_blocks / splits)
    few = items < SPLIT_BELOW_SHARE * P
    ok = (splits == 1) | (few & (kv_blocks * (splits - 1) < key_blocks))
    split, kv_blocks = splits[ok], kv_blocks[ok]
    tiles = items * split
    waves = np.ceil(tiles / P)
    wave_eff = tiles / (waves * P)
    pad_kv = s.n / (split * kv_blocks * block)
    scores = s.batch * s.m * s.n
    flops = kernel.matrix_flops + SOFTMAX_VECTOR_FLOPS * scores
    compute = flops / (target.vector_peak_flops_per_s * wave_eff) + kernel.sfu_ops / hw.sfu_peak_ops_per_s
    partials = np.where(split > 1, 2 * tiles * (s.k + 1) * ACCUMULATOR_BYTES, 0.0)
    cache = _kv_tiles(s) * items * s.n * s.k * target.kv_bytes  # every query head's K and V, through L2
    dram = kernel.dram_bytes + np.where(partials > hw.l2_bytes, partials, 0.0)
    l2 = np.maximum(kernel.dram_bytes, cache) + partials
    memory, time = _timed(compute, dram, l2, split, s, tiles, target)
    ones = np.ones_like(split)
    candidates = Candidates(
        ones, block * ones, s.k * ones, ones, split, tiles, waves, wave_eff, pad_kv, 0 * ones, dram, l2, compute,
        memory, time,
    )  # fmt: skip
    return pick_rows("attention", candidates, key_ids(ones, block * ones, split), [len(split)])[0]


def plan_attention(kernel: Kernel, target: Target) -> TilePlan:
    """Query and key block sizes and key/value splits (`split_k` of the choice: the combine pass costs a grid
    sync and the partial outputs' traffic) of a fused attention kernel; a step the runtime runs on its masked
    multi-head attention kernel, that kernel's (`plan_masked_mha`)."""
    if runs_masked_mha(kernel.shape, target.decode_attention, target.hw):
        return plan_masked_mha(kernel, target)
    hw, act_bytes = target.hw, target.act_bytes
    peak, vector_peak = target.matrix_peak_flops_per_s, target.vector_peak_flops_per_s
    s = kernel.shape  # batch = B*H, m = Sq, n = Skv, k = head dim
    items, rows = work_items(s, target.decode_attention)
    P = hw.compute_units
    bq, bkv, sram, split, kv_blocks = _split_grid(s, items, rows, target)
    q_blocks = np.ceil(rows / bq)
    tiles = items * q_blocks * split
    waves = np.ceil(tiles / P)
    wave_eff = tiles / (waves * P)
    pad_kv = s.n / (split * kv_blocks * bkv)  # the key blocks' padding (the busiest split's)
    pad_eff = (rows / (q_blocks * bq)) * pad_kv
    tile_eff = delivery_efficiency(
        macs_per_clock_per_unit(hw, peak), bq, bkv, act_bytes, hw.sram_bytes_per_clock_per_unit
    )
    # the size efficiency is read at one split's work (a split kernel is `split` kernels' worth of work side by
    # side) over the whole key blocks it covers: at the real FLOPs it rose with every key inside a block and
    # made one more key faster, and split counts of powers of two padded per split made 513 keys slower than 2049
    # a causal prompt's work is the triangle's already (plan.causal); its blocks: the triangle's rounded to blocks
    kept = causal_share(s, bq, bkv) if target.causal_attention else 1.0
    blocks = kept / triangle_share(s.m, s.n) if target.causal_attention else 1.0  # diagonal blocks computed whole
    size_eff = hw.matrix_efficiency.at_array(blocks * kernel.matrix_flops / (pad_kv * split))
    matrix = blocks * kernel.matrix_flops / (peak * size_eff * wave_eff * pad_eff * tile_eff)
    scores = kept * s.batch * s.m * s.n
    # the softmax's exp runs on the special-function unit between the two GEMMs (FlashAttention-3 s3)
    softmax = blocks * kernel.sfu_ops / hw.sfu_peak_ops_per_s + SOFTMAX_VECTOR_FLOPS * scores / vector_peak
    compute = smooth_max(matrix, softmax, hw.overlap_exponent)
    kv_bytes = _kv_tiles(s) * items * s.n * s.k * target.kv_bytes  # K and V as the cache stores them, once an item
    heads_per_wave = np.maximum(1, P / q_blocks)
    kv_resident = heads_per_wave * _kv_tiles(s) * s.n * s.k * target.kv_bytes <= hw.l2_bytes
    # each split writes its rows' partial output and log-sum-exp in fp32; the combine pass reads them back
    partials = np.where(split > 1, 2 * split * items * rows * (s.k + 1) * ACCUMULATOR_BYTES, 0.0)
    reread = kept * kv_bytes * (q_blocks - 1)  # each later query block streams the keys it does not skip again
    dram = kernel.dram_bytes + np.where(kv_resident, 0.0, reread)
    dram = dram + np.where(partials > hw.l2_bytes, partials, 0.0)
    l2 = kernel.dram_bytes + reread + partials
    memory, time = _timed(compute, dram, l2, split, s, tiles, target)
    ones = np.ones_like(bq)
    candidates = Candidates(
        bq, bkv, s.k * ones, 2 * ones, split, tiles, waves, wave_eff, pad_eff, sram, dram, l2, compute, memory, time
    )
    return pick_rows("attention", candidates, key_ids(bq, bkv, split), [len(bq)])[0]


def _split_grid(s, items: float, rows: float, target: Target) -> tuple[np.ndarray, ...]:
    """(query block, key block, SRAM bytes, splits, the busiest split's key blocks) of every candidate a fused
    attention may run: its block sizes at each split of the cached keys the runtime's kernel takes
    (`DecodeAttention.split_rule`)."""
    hw, P = target.hw, target.hw.compute_units
    bq, bkv, sram = _attention_grid(s.k, target.act_bytes, hw, s.kind == MatrixKind.LATENT_ATTENTION)
    decode = target.decode_attention
    xqa = decode.splits_kv and decode.split_rule == DecodeSplit.XQA and s.m == 1
    if xqa:  # the kernel's own count, whatever the items fill (the cached keys before the new one its history)
        splits = np.array((xqa_blocks(int(items), max(int(s.n) - 1, 1), P),), float)
    else:
        splits = np.array(ATTENTION_KV_SPLITS if decode.splits_kv else (1,), float)
    pairs = len(bq)
    bq, bkv, sram = np.tile(bq, len(splits)), np.tile(bkv, len(splits)), np.tile(sram, len(splits))
    split = np.repeat(splits, pairs)
    # the key blocks dealt out evenly: the busiest split holds ceil(blocks / splits), and no split is empty;
    # work items that almost fill the units run unsplit (FlashAttention's rule: XQA's count stands as it is)
    kv_blocks = np.ceil(np.ceil(s.n / bkv) / split)
    few = items * np.ceil(rows / bq) < SPLIT_BELOW_SHARE * P
    ok = (split == 1) | (few & (kv_blocks * (split - 1) < np.ceil(s.n / bkv))) | xqa
    bq, bkv, sram, split, kv_blocks = bq[ok], bkv[ok], sram[ok], split[ok], kv_blocks[ok]
    return bq, bkv, sram, split, kv_blocks


def _timed(compute, dram, l2, split, shape, tiles, target: Target):
    """(memory time, kernel time) of attention candidates: DRAM at its curve or L2, whichever is slower; compute and
    memory overlapped, a split's combine sync, and a paged decode kernel's latency no stream hides (the cost stage
    adds that to the launch)."""
    hw = target.hw
    memory = np.maximum(
        dram / (hw.dram_bandwidth_bytes_per_s * hw.dram_efficiency.at_array(dram)), l2 / hw.l2_bandwidth_bytes_per_s
    )
    time = smooth_max(compute, memory, hw.overlap_exponent) + np.where(split > 1, hw.grid_sync_s, 0.0)
    return memory, time + decode_fixed_s(shape, tiles, hw, target.decode_attention)


def decode_fixed_s(shape, tiles, hw: HardwareProfile, decode: DecodeAttention):
    """A paged decode attention kernel's time that no stream hides (one query a sequence over a paged cache; 0 for
    a prompt, a contiguous cache, or where the profile gives neither value): the kernel's fixed latency past its
    launch (`overhead.paged_decode_s`: its prologue, each sequence's block-table read before its first key/value
    page, that page's dependent loads, the output's write) and each work item's own fixed work, held on a unit and
    spread over the units (`overhead.paged_decode_item_s` x tiles / units). A bare kernel over a contiguous cache
    (data/evidence/h200: PyTorch SDPA from a CUDA graph, 7-9 us at one sequence) shows neither. A masked multi-head
    attention kernel's items hold a unit for their own time (`overhead.masked_mha_item_s`)."""
    if shape.m != 1 or decode.page_tokens <= 0 or (hw.paged_decode_s is None and hw.paged_decode_item_s is None):
        return 0.0
    item = hw.masked_mha_item_s if runs_masked_mha(shape, decode, hw) else hw.paged_decode_item_s
    return (hw.paged_decode_s or 0.0) + (item or 0.0) * tiles / hw.compute_units
