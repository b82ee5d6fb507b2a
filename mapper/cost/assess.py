"""Each kernel tiled, costed and classed, placed on the one-stream timeline.

`estimate_kernels` runs the tiling search and roofline cost (`estimate`) and the bottleneck classes
(`bottleneck`) over a mapping's kernels; identical kernels (a decoder's repeated blocks) are assessed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mapper.core.caches import ModelCaches
from mapper.core.result import Kernel, KernelAssessment
from mapper.core.timeline import KernelEstimates, Kernels, record_column, spread, timeline_starts
from mapper.core.vocab import MatrixKind
from mapper.cost.bottleneck import Facts, classify, speedup_if_removed
from mapper.cost.estimate import Cost, estimate_searched, roofline_parts, search_matrices
from mapper.cost.roofline import memory_stall_fraction
from mapper.hardware.target import Target
from mapper.plan.tiling import alignment_shares

# 2:4 structured sparsity (NVIDIA Ampere and later; Mishra et al. 2021, arXiv:2104.08378): two of every four
# weights are kept, each with a 2-bit position index, so a dense element costs half its bytes plus 1 bit.
SPARSE_KEPT_FRACTION = 0.5
SPARSE_METADATA_BYTES_PER_ELEMENT = 2 * 2 / 4 / 8  # 2 bits x 2 kept values per 4 elements, in bytes
# weight GEMMs (convs as implicit GEMMs); attention has no weights
SPARSE_MATRIX_KINDS = (MatrixKind.GEMM, MatrixKind.CONV)


def estimate_kernels(built: Sequence[Kernel], target: Target, caches: ModelCaches | None = None) -> KernelEstimates:
    """Tile, cost and classify each kernel on the target, placing it on the one-stream timeline. On a 2:4 sparse
    target, weight GEMMs read compressed weights and run at the profile's sparse matrix peak. With the model's
    `caches`, an assessment is kept across slices: a sweep's shapes of equal extents (batch 2 x seq 256
    and batch 4 x seq 128 give the same projections) search each tiling once, and the new ones of a slice
    are assessed together (`assess_kernels`: one numpy evaluation of their tile searches)."""
    # repeated layers (80 decoder blocks) are assessed once, as the first of their key: each template's key is
    # hashed once, and the positions of a template (`Kernels.template_at`) take its answer in numpy, without a key or a
    # Python call
    kernels = Kernels.of(built)
    templates, index = kernels.templates, kernels.template_at
    distinct: dict[tuple, int] = {}
    firsts: list[Kernel] = []
    own_at: list[int] = []
    for k in templates:  # figures only: a repeated layer's kernel is not written
        key = assessment_key(k)
        i = distinct.get(key)
        if i is None:
            i = distinct[key] = len(firsts)
            firsts.append(k)
        own_at.append(i)

    def assess(positions: list[int]) -> list[tuple[str, KernelAssessment]]:
        return assess_kernels([firsts[i] for i in positions], target)

    if caches is None:
        assessed = assess(list(range(len(firsts))))
    else:
        assessed = caches.assessments(target.key, list(distinct), assess)
    # each template as the search chose its engine
    chosen = [
        k if k.engine == assessed[i][0] else k.replaced(engine=assessed[i][0])
        for k, i in zip(templates, own_at, strict=True)
    ]
    by_template = [assessed[i][1] for i in own_at]
    starts = timeline_starts(record_column(by_template, "time_s")[index])[0]
    placed = Kernels.of_templates(chosen, index, kernels.names, kernels.nodes)
    placed._firsts = kernels.first_positions()  # the same positions: handed on
    return KernelEstimates(placed, spread(by_template, index), starts, by_template)


def assessment_key(k: Kernel) -> tuple:
    """What a kernel's assessment depends on (its name and nodes do not: repeats share one)."""
    return (k.matrix, k.rule, k.engine, k.flops, k.matrix_flops, k.sfu_ops, k.dram_bytes, k.weight_bytes,
            k.reduction_rows, k.reduction_length, k.rows, k.row_length, k.op_types,
            k.collective, k.devices)  # fmt: skip


def is_sparse_gemm(k: Kernel) -> bool:
    """A kernel 2:4 sparsity applies to: a GEMM or conv that reads weights."""
    return k.matrix is not None and k.matrix.kind in SPARSE_MATRIX_KINDS and k.weight_bytes > 0


def sparse_weight_bytes_per(weight_bytes_per: float) -> float:
    """Bytes a dense weight element costs once compressed 2:4 (kept values + position metadata)."""
    return weight_bytes_per * SPARSE_KEPT_FRACTION + SPARSE_METADATA_BYTES_PER_ELEMENT


def assess_kernels(kernels: list[Kernel], target: Target) -> list[tuple[str, KernelAssessment]]:
    """(the engine the tile search chose, the kernel's assessment) of each kernel: its tile, time, traffic and
    class. The matrix tile searches of all of them run as one numpy evaluation (`search_matrices`)."""
    compressed = sparse_weight_bytes_per(target.weight_bytes)
    flags = [target.sparse and is_sparse_gemm(k) for k in kernels]
    kernels = [_sparsified(k, target.weight_bytes, compressed) if f else k for k, f in zip(kernels, flags)]
    weight_per = [compressed if f else target.weight_bytes for f in flags]
    searched = search_matrices(kernels, weight_per, flags, target)
    return [_assessed(k, estimate_searched(k, s, target), target) for k, s in zip(kernels, searched)]


def _sparsified(k: Kernel, weight_per: float, compressed: float) -> Kernel:
    """A 2:4-sparse weight GEMM reads its weights compressed: fewer weight (and boundary) bytes."""
    saved = k.weight_bytes * (1 - compressed / weight_per)
    return replace(k, dram_bytes=k.dram_bytes - saved, weight_bytes=k.weight_bytes - saved)


def _assessed(k: Kernel, c: Cost, target: Target) -> tuple[str, KernelAssessment]:
    chosen, dtype, exponent = c.tiling.chosen, target.dtype, target.overlap_exponent
    intensity = k.flops / c.dram_bytes if c.dram_bytes else float("inf")
    rate_share, dram_share = alignment_shares(k, target.hw, target.act_bytes)
    compute_roof, memory_roof = roofline_parts(k, c.engine, target)
    facts = Facts(
        c.engine, c.time_s, c.compute_time_s, c.memory_time_s, c.overhead_s, c.sync_s, intensity,
        target.ridge_flop_per_byte, chosen.waves if chosen else 0, chosen.wave_efficiency if chosen else 1.0,
        chosen.padding_efficiency if chosen else 1.0, exponent, c.interconnect_s, rate_share, dram_share,
        compute_roof, memory_roof, max(compute_roof, memory_roof),
    )  # fmt: skip
    stall = memory_stall_fraction(c.compute_time_s, c.memory_time_s, c.time_s, exponent)
    bottleneck, evidence, owner = classify(facts)
    return c.engine, KernelAssessment(
        tiling=c.tiling, dtype=dtype, time_s=c.time_s, compute_time_s=c.compute_time_s,
        memory_time_s=c.memory_time_s, overhead_s=c.overhead_s, sync_s=c.sync_s, dram_bytes=c.dram_bytes,
        l2_bytes=c.l2_bytes, intensity_flop_per_byte=intensity,
        achieved_flops_per_s=k.flops / c.time_s if c.time_s else 0.0, stall_fraction=stall, energy_j=c.energy_j,
        avg_power_w=c.avg_power_w, throttled=c.throttled, bottleneck=bottleneck, evidence=evidence, owner=owner,
        roofline_time_s=facts.roofline_s, speedup_if_removed=speedup_if_removed(bottleneck, facts),
    )  # fmt: skip
