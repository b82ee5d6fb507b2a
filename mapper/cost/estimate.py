"""Cost of one kernel: time and its parts, traffic, energy and power under the cap.

Stage seven. The roofline lives here once (`kernel_time`): a smooth max of
compute and memory time plus fixed overheads. Compute time uses the engine's
peak at the plan dtype and the profile's size-dependent efficiency; memory time
uses DRAM (with its size-dependent efficiency) and L2. Power follows PRIMER s7:
idle power plus energy per FLOP and per byte, capped at the TDP by stretching
the kernel (the clock drops).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapper.core.result import Kernel, TileChoice, TilePlan
from mapper.core.vocab import Engine
from mapper.cost.collectives import collective_time
from mapper.cost.row_kernels import row_kernel_memory_s
from mapper.hardware.profile import HardwareProfile
from mapper.plan.tiling import plan_attention, plan_matrix, plan_vector, smooth_max

HOST_TRANSFER_FRACTION = 1.0  # a host fallback moves its inputs and outputs over the host link once each way


@dataclass(frozen=True, slots=True)
class Cost:
    tiling: TilePlan
    time_s: float
    compute_time_s: float
    memory_time_s: float
    overhead_s: float
    sync_s: float
    dram_bytes: float
    l2_bytes: float
    energy_j: float
    avg_power_w: float
    throttled: bool
    engine: str
    interconnect_s: float = 0.0


def kernel_time(compute_s: float, memory_s: float, overhead_s: float, sync_s: float) -> float:
    """The one roofline: imperfect overlap of compute and memory, then fixed costs."""
    return float(smooth_max(compute_s, memory_s)) + overhead_s + sync_s


def roofline_time(kernel: Kernel, engine: str, hw: HardwareProfile, dtype: str) -> float:
    """The kernel at its roofline (PRIMER s5): its FLOPs at the engine's peak or its boundary bytes at DRAM
    bandwidth, whichever is longer; no efficiency, tiling re-reads, launch or sync. A host op has no
    device roofline: its transfers over the host link are the floor."""
    if engine == Engine.HOST:
        return kernel.dram_bytes / max(hw.interconnect.link_bandwidth_bytes_per_s, 1.0)
    if engine == Engine.MATRIX:
        other = kernel.flops - kernel.matrix_flops
        compute_s = kernel.matrix_flops / hw.matrix_peak(dtype) + max(other, 0.0) / hw.vector_peak(dtype)
    else:
        compute_s = max(kernel.flops / hw.vector_peak(dtype), kernel.sfu_ops / hw.sfu_peak_ops_per_s)
    return max(compute_s, kernel.dram_bytes / hw.dram_bandwidth_bytes_per_s)


def _energy_per_flop(hw: HardwareProfile, dtype: str) -> float:
    table = hw.energy_per_flop_j
    return table.get(dtype) or table.get("bf16") or table.get("fp32") or next(iter(table.values()))


def _vector_cost(kernel: Kernel, tiling: TilePlan, hw: HardwareProfile, dtype: str, act_bytes: float):
    vector_s = kernel.flops / (hw.vector_peak(dtype) * hw.vector_efficiency.at(kernel.dram_bytes))
    sfu_s = kernel.sfu_ops / hw.sfu_peak_ops_per_s
    dram = kernel.dram_bytes * tiling.passes if tiling.passes > 1 else kernel.dram_bytes
    memory_s = dram / (hw.dram_bandwidth_bytes_per_s * hw.dram_efficiency.at(dram))
    row_s = row_kernel_memory_s(kernel, hw, act_bytes, memory_s)  # a serving engine's row-per-block kernel
    memory_s = memory_s if row_s is None else row_s
    engine = Engine.SFU if sfu_s > vector_s else Engine.VECTOR
    return max(vector_s, sfu_s), memory_s, dram, dram, engine


def estimate_cost(
    kernel: Kernel,
    hw: HardwareProfile,
    dtype: str,
    act_bytes: float,
    weight_bytes_per: float,
    power_cap_w: float | None = None,
    sparse: bool = False,
) -> Cost:
    """`sparse`: a 2:4-sparse weight GEMM (`weight_bytes_per` already compressed): the sparse matrix peak."""
    if kernel.engine == "interconnect":
        return _interconnect_cost(kernel, hw)
    overhead_s = hw.kernel_launch_s
    tiling, compute_s, memory_s, dram, l2, engine, sync_s = _engine_times(
        kernel, hw, dtype, act_bytes, weight_bytes_per, sparse
    )
    scale = max((hw.op_time_scale.get(op, 1.0) for op in kernel.op_types), default=1.0)
    if scale != 1.0:  # the device's software runs this op slower (or faster) than the model's roofline says
        compute_s, memory_s = compute_s * scale, memory_s * scale
    cap = power_cap_w if power_cap_w is not None else hw.tdp_w
    headroom_w = max(cap - hw.idle_w, 1e-3)
    dynamic_j = _dynamic_energy(kernel, hw, dtype, dram, l2)
    time_s, throttled = _under_cap(kernel_time(compute_s, memory_s, overhead_s, sync_s), dynamic_j, headroom_w)
    tiling = _on_kernel_basis(tiling, kernel, hw, dtype, scale, overhead_s, headroom_w)
    energy_j = dynamic_j + hw.idle_w * time_s
    return Cost(
        tiling,
        time_s,
        compute_s,
        memory_s,
        overhead_s,
        sync_s,
        dram,
        l2,
        energy_j,
        energy_j / time_s,
        throttled,
        engine,
    )


def _dynamic_energy(kernel: Kernel, hw: HardwareProfile, dtype: str, dram: float, l2: float) -> float:
    """Energy above idle: per FLOP at the dtype, per DRAM byte, per L2 byte that did not go on to DRAM."""
    return (
        _energy_per_flop(hw, dtype) * kernel.flops
        + hw.energy_per_dram_byte_j * dram
        + hw.energy_per_l2_byte_j * max(l2 - dram, 0.0)
    )


def _under_cap(time_s: float, dynamic_j: float, headroom_w: float) -> tuple[float, bool]:
    """(time, throttled): over the cap the clock drops until the power fits (the kernel stretches)."""
    if dynamic_j / time_s > headroom_w:
        return dynamic_j / headroom_w, True
    return time_s, False


def _on_kernel_basis(
    tiling: TilePlan,
    kernel: Kernel,
    hw: HardwareProfile,
    dtype: str,
    scale: float,
    overhead_s: float,
    headroom_w: float,
) -> TilePlan:
    """Every tile candidate timed as the kernel itself is: the same launch, op scale, grid sync and power
    cap, so a runner-up compares with the chosen tile (the search ranks them without the fixed costs)."""
    if tiling.chosen is None:
        return tiling

    def timed(c: TileChoice) -> TileChoice:
        sync_s = hw.grid_sync_s if c.split_k > 1 else 0.0
        raw = kernel_time(c.compute_s * scale, c.memory_s * scale, overhead_s, sync_s)
        return replace(
            c, time_s=_under_cap(raw, _dynamic_energy(kernel, hw, dtype, c.dram_bytes, c.l2_bytes), headroom_w)[0]
        )

    return replace(tiling, chosen=timed(tiling.chosen), alternatives=tuple(timed(a) for a in tiling.alternatives))


def _interconnect_cost(kernel: Kernel, hw: HardwareProfile) -> Cost:
    """A collective: its wire time on the interconnect plus a launch; energy per byte on the wire."""
    overhead_s = hw.kernel_launch_s
    wire = collective_time(kernel.collective, kernel.devices, kernel.dram_bytes, hw.interconnect)
    time_s = wire.time_s + overhead_s
    energy_j = hw.energy_per_dram_byte_j * wire.wire_bytes + hw.idle_w * time_s
    return Cost(
        TilePlan("interconnect", None),
        time_s,
        0.0,
        0.0,
        overhead_s,
        0.0,
        0.0,
        0.0,
        energy_j,
        energy_j / time_s if time_s else 0.0,
        False,
        kernel.engine,
        wire.time_s,
    )


def _engine_times(
    kernel: Kernel, hw: HardwareProfile, dtype: str, act_bytes: float, weight_bytes_per: float, sparse: bool = False
):
    """The tiling, compute and memory time, DRAM and L2 traffic, engine and sync time of a kernel on its engine."""
    engine = kernel.engine
    sync_s = 0.0
    if engine == "host":
        tiling = TilePlan("host", None)
        link = max(hw.interconnect.link_bandwidth_bytes_per_s, 1.0)
        compute_s, memory_s = hw.host_op_s, HOST_TRANSFER_FRACTION * kernel.dram_bytes / link
        dram = l2 = kernel.dram_bytes
    elif engine == "matrix" and kernel.rule == "flash-attention":
        tiling = plan_attention(kernel, hw, hw.matrix_peak(dtype), hw.vector_peak(dtype), act_bytes)
        compute_s, memory_s, dram, l2 = _split(tiling)
    elif engine == "matrix":
        peak = hw.sparse_matrix_peak(dtype) if sparse else hw.matrix_peak(dtype)
        tiling = plan_matrix(kernel, hw, peak, act_bytes, weight_bytes_per)
        compute_s, memory_s, dram, l2 = _split(tiling)
        if tiling.chosen.split_k > 1:
            sync_s = hw.grid_sync_s
        if _skinny(kernel, hw):  # a GEMV-shaped product: the vector units' kernel where it is cheaper
            vector = plan_vector(kernel, hw, act_bytes)
            v_compute, v_memory, v_dram, v_l2, v_engine = _vector_cost(kernel, vector, hw, dtype, act_bytes)
            if kernel_time(v_compute, v_memory, 0.0, 0.0) < kernel_time(compute_s, memory_s, 0.0, sync_s):
                return vector, v_compute, v_memory, v_dram, v_l2, v_engine, 0.0
    else:
        tiling = plan_vector(kernel, hw, act_bytes)
        compute_s, memory_s, dram, l2, engine = _vector_cost(kernel, tiling, hw, dtype, act_bytes)
        sync_s = tiling.grid_syncs * hw.grid_sync_s
    return tiling, compute_s, memory_s, dram, l2, engine, sync_s


def _skinny(kernel: Kernel, hw: HardwareProfile) -> bool:
    """A GEMM with fewer rows (or columns) than one matrix instruction tile: a candidate for either engine."""
    shape = kernel.matrix
    return (
        shape is not None
        and shape.kind == "gemm"
        and kernel.rule != "flash-attention"
        and min(shape.m, shape.n) < hw.matrix_instruction_mnk[0]
    )


def _split(tiling: TilePlan) -> tuple[float, float, float, float]:
    """Compute and memory time of the chosen tile, recovered from its time and traffic."""
    c = tiling.chosen
    return c.compute_s, c.memory_s, c.dram_bytes, c.l2_bytes
