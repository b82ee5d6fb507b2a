"""Stage six: each kernel tiled, costed and classed, placed on the one-stream timeline.

`estimate_kernels` runs the tiling search and roofline cost (`estimate`) and the bottleneck classes
(`bottleneck`) over a mapping's kernels; identical kernels (a decoder's repeated blocks) are assessed once.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.core.result import Kernel, KernelAssessment, KernelEstimate
from mapper.cost.bottleneck import Facts, classify
from mapper.cost.estimate import estimate_cost
from mapper.hardware.profile import HardwareProfile
from mapper.plan.kernels import Sizer


def estimate_kernels(
    kernels: list[Kernel], hw: HardwareProfile, dtype: str, sizer: Sizer, power_cap_w: float | None
) -> list[KernelEstimate]:
    """Tile, cost and classify each kernel, placing it on the one-stream timeline."""
    out, start = [], 0.0
    ridge = (
        hw.ridge_point(dtype)
        if dtype != "fp32" or "fp32" in hw.matrix_peak_flops_per_s
        else hw.vector_peak("fp32") / hw.dram_bandwidth_bytes_per_s
    )
    seen: dict[tuple, tuple[str, KernelAssessment]] = {}  # repeated layers (80 decoder blocks) are assessed once
    for k in kernels:
        key = _assessment_key(k)
        if key not in seen:
            seen[key] = assess_kernel(k, hw, dtype, sizer, power_cap_w, ridge)
        engine, assessment = seen[key]
        out.append(KernelEstimate(k if k.engine == engine else replace(k, engine=engine), assessment, start))
        start += assessment.time_s
    return out


def _assessment_key(k: Kernel) -> tuple:
    """What a kernel's assessment depends on (its name and nodes do not: repeats share one)."""
    return (k.matrix, k.rule, k.engine, k.flops, k.matrix_flops, k.sfu_ops, k.dram_bytes, k.weight_bytes,
            k.reduction_rows, k.reduction_length, k.rows, k.row_length, k.op_types)  # fmt: skip


def assess_kernel(
    k: Kernel, hw: HardwareProfile, dtype: str, sizer: Sizer, power_cap_w: float | None, ridge: float
) -> tuple[str, KernelAssessment]:
    """(the engine the tile search chose, the kernel's assessment): its tile, time, traffic and class."""
    c = estimate_cost(k, hw, dtype, sizer.act, sizer.weight, power_cap_w)
    chosen = c.tiling.chosen
    intensity = k.flops / c.dram_bytes if c.dram_bytes else float("inf")
    facts = Facts(
        c.engine, c.time_s, c.compute_time_s, c.memory_time_s, c.overhead_s, c.sync_s, intensity, ridge,
        chosen.waves if chosen else 0, chosen.wave_efficiency if chosen else 1.0,
        chosen.padding_efficiency if chosen else 1.0, c.interconnect_s,
    )  # fmt: skip
    stall = min(max(0.0, c.memory_time_s - c.compute_time_s) / c.time_s if c.time_s else 0.0, 1.0)
    bottleneck, evidence, owner = classify(facts)
    return c.engine, KernelAssessment(
        tiling=c.tiling, dtype=dtype, time_s=c.time_s, compute_time_s=c.compute_time_s,
        memory_time_s=c.memory_time_s, overhead_s=c.overhead_s, sync_s=c.sync_s, dram_bytes=c.dram_bytes,
        l2_bytes=c.l2_bytes, intensity_flop_per_byte=intensity,
        achieved_flops_per_s=k.flops / c.time_s if c.time_s else 0.0, stall_fraction=stall, energy_j=c.energy_j,
        avg_power_w=c.avg_power_w, throttled=c.throttled, bottleneck=bottleneck, evidence=evidence, owner=owner,
    )  # fmt: skip
