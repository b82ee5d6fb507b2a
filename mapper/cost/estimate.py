"""Cost of one kernel: time and its parts, traffic, energy and power under the cap.

Each kernel's compute and memory time on its engine go through the one roofline
(`cost.roofline.kernel_time`: a smooth max plus fixed overheads). Compute time uses the engine's peak at the
plan dtype and the profile's size-dependent efficiency; memory time uses DRAM (with its size-dependent
efficiency, a matrix kernel's own curve where the profile has one) and L2. Power: idle
power plus energy per FLOP and per byte, capped at the TDP (`cost.power_cap`: the clock drops, compute
stretches and a FLOP's energy falls; memory does not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mapper.core.result import Kernel, TilePlan
from mapper.core.vocab import Engine, KernelRule, MatrixKind
from mapper.cost.collectives import collective_time
from mapper.cost.power_cap import under_cap
from mapper.cost.roofline import kernel_time, kernel_times
from mapper.cost.row_kernels import row_kernel_memory_s
from mapper.hardware.profile import HardwareProfile
from mapper.hardware.target import Target
from mapper.plan.attention_tiling import decode_fixed_s, plan_attention
from mapper.plan.tiling import alignment_shares, plan_matrices, plan_vector

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


def roofline_parts(kernel: Kernel, engine: str, target: Target) -> tuple[float, float]:
    """(compute, memory) of the kernel at its roofline (Williams et al., CACM 2009): its FLOPs at the engine's
    peak and its boundary bytes at DRAM bandwidth; no efficiency, tiling re-reads, launch or sync. A host op has
    no device roofline: its transfers over the host link are the floor (as memory)."""
    hw = target.hw
    if engine == Engine.HOST:
        return 0.0, kernel.dram_bytes / max(hw.interconnect.link_bandwidth_bytes_per_s, 1.0)
    if engine == Engine.MATRIX:
        other = kernel.flops - kernel.matrix_flops
        compute_s = (
            kernel.matrix_flops / target.matrix_peak_flops_per_s + max(other, 0.0) / target.vector_peak_flops_per_s
        )
    else:
        compute_s = max(kernel.flops / target.vector_peak_flops_per_s, kernel.sfu_ops / hw.sfu_peak_ops_per_s)
    return compute_s, kernel.dram_bytes / hw.dram_bandwidth_bytes_per_s


def _vector_cost(kernel: Kernel, tiling: TilePlan, target: Target, gemv: bool = False):
    """`gemv`: a skinny GEMM on the vector units streams its weights as the matrix kernels do (the matrix DRAM
    curve, and what an unaligned stride keeps of it)."""
    hw, act_bytes = target.hw, target.act_bytes
    vector_s = kernel.flops / (target.vector_peak_flops_per_s * hw.vector_efficiency.at(kernel.dram_bytes))
    sfu_s = kernel.sfu_ops / hw.sfu_peak_ops_per_s
    dram = kernel.dram_bytes * tiling.passes if tiling.passes > 1 else kernel.dram_bytes
    curve = hw.matrix_dram_curve if gemv else hw.dram_efficiency
    dram_eff = curve.at(dram) * (alignment_shares(kernel, hw, act_bytes)[1] if gemv else 1.0)
    memory_s = dram / (hw.dram_bandwidth_bytes_per_s * dram_eff)
    row_s = row_kernel_memory_s(kernel, hw, act_bytes, memory_s)  # a serving engine's row-per-block kernel
    memory_s = memory_s if row_s is None else row_s
    engine = Engine.SFU if sfu_s > vector_s else Engine.VECTOR
    return max(vector_s, sfu_s), memory_s, dram, dram, engine


def estimate_cost(kernel: Kernel, target: Target) -> Cost:
    """One kernel's cost on the target, its weights dense (a sweep's or a placement's single kernel)."""
    (searched,) = search_matrices((kernel,), (target.weight_bytes,), (False,), target)
    return estimate_searched(kernel, searched, target)


def takes_matrix_search(kernel: Kernel) -> bool:
    """A kernel `plan_matrices` tiles: a GEMM or conv on the matrix engine (fused attention has its own search)."""
    return kernel.engine == Engine.MATRIX and kernel.rule != KernelRule.FLASH_ATTENTION


def search_matrices(
    kernels: Sequence[Kernel], weight_bytes_per: Sequence[float], sparse: Sequence[bool], target: Target
) -> list[TilePlan | None]:
    """The matrix tile search of each kernel that takes one (`takes_matrix_search`; None for the others),
    one `plan_matrices` call per (peak, weight element size): a slice's new GEMMs in one numpy evaluation.
    The kept candidates come timed as their kernel (`Basis`), each record built once."""
    out: list[TilePlan | None] = [None] * len(kernels)
    groups: dict[tuple[bool, float], list[int]] = {}
    for i, k in enumerate(kernels):
        if takes_matrix_search(k):
            groups.setdefault((sparse[i], weight_bytes_per[i]), []).append(i)
    for (is_sparse, weight_per), members in groups.items():
        peak = target.sparse_matrix_peak() if is_sparse else target.matrix_peak_flops_per_s
        bases = [Basis.of(kernels[i], target) for i in members]
        plans = plan_matrices([kernels[i] for i in members], target.hw, peak, target.act_bytes, weight_per, bases)
        for i, plan in zip(members, plans):
            out[i] = plan
    return out


def estimate_searched(kernel: Kernel, searched: TilePlan | None, target: Target) -> Cost:
    """`estimate_cost` given the kernel's matrix tile search (`search_matrices`; None where it takes none)."""
    hw = target.hw
    if kernel.engine == Engine.INTERCONNECT:
        return _interconnect_cost(kernel, target)
    basis = Basis.of(kernel, target)
    overhead_s, scale = basis.overhead_s, basis.scale
    tiling, compute_s, memory_s, dram, l2, engine, sync_s = _engine_times(kernel, searched, target)
    if kernel.rule == KernelRule.FLASH_ATTENTION and tiling.chosen is not None:  # a paged decode kernel's latency
        overhead_s += decode_fixed_s(kernel.shape, tiling.best.tiles, hw, target.decode_attention)  # beside its launch
    elif kernel.engine == Engine.MATRIX:  # a small GEMM cannot finish before its tile's serial loop over K
        compute_s = max(compute_s, gemm_floor_s(kernel, hw))
    if scale != 1.0:  # the device's software runs this op slower (or faster) than the model's roofline says
        compute_s, memory_s = compute_s * scale, memory_s * scale
    parts = (compute_s, memory_s, overhead_s, sync_s)
    full_clock_s = kernel_time(*parts, basis.overlap_exponent)
    capped = under_cap(
        full_clock_s, parts, basis.flop_j, basis.energy_j(dram, l2), basis.headroom_w, basis.overlap_exponent
    )
    if tiling is not searched:  # the matrix search's candidates came timed as the kernel (`search_matrices`)
        tiling = _on_kernel_basis(tiling, basis)
    energy_j = capped.dynamic_j + hw.idle_w * capped.time_s
    return Cost(
        tiling,
        capped.time_s,
        compute_s,
        memory_s,
        overhead_s,
        sync_s,
        dram,
        l2,
        energy_j,
        energy_j / capped.time_s,
        capped.throttled,
        engine,
    )


@dataclass(frozen=True, slots=True)
class Basis:
    """What times a tile candidate as its kernel: the same launch, op scale, grid sync and power cap, so a
    runner-up compares with the chosen tile (the search ranks them without the fixed costs)."""

    scale: float  # the device's op-time scale of the kernel's slowest op
    overhead_s: float
    headroom_w: float  # power above idle under the cap
    flop_j: float  # the kernel's FLOPs' energy at the dtype
    dram_j: float  # per DRAM byte
    l2_j: float  # per L2 byte that did not go on to DRAM
    grid_sync_s: float  # a split-K candidate's reduction
    overlap_exponent: float  # the profile's smooth max of compute and memory

    @staticmethod
    def of(kernel: Kernel, target: Target) -> Basis:
        hw = target.hw
        return Basis(
            _op_scale(kernel, hw),
            target.launch_s,
            target.headroom_w,
            target.energy_per_flop_j * kernel.flops,
            hw.energy_per_dram_byte_j,
            hw.energy_per_l2_byte_j,
            hw.grid_sync_s,
            hw.overlap_exponent,
        )

    def times(
        self, compute_s: list[float], memory_s: list[float], dram: list[float], l2: list[float], split_k: list[int]
    ) -> list[float]:
        """Candidates' times as the kernel's: `kernel_time` of their scaled work, then the power cap."""
        scale, overhead = self.scale, self.overhead_s
        compute = [c * scale for c in compute_s]
        memory = [m * scale for m in memory_s]
        sync = [self.grid_sync_s if s > 1 else 0.0 for s in split_k]
        raw = kernel_times(compute, memory, overhead, sync, self.overlap_exponent)
        flop_j, headroom_w, exponent = self.flop_j, self.headroom_w, self.overlap_exponent
        return [
            under_cap(t, (c, m, overhead, y), flop_j, self.energy_j(d, b), headroom_w, exponent).time_s
            for t, c, m, y, d, b in zip(raw, compute, memory, sync, dram, l2)
        ]

    def energy_j(self, dram: float, l2: float) -> float:
        """Energy above idle: the kernel's FLOPs', per DRAM byte, per L2 byte that did not go on to DRAM."""
        return self.flop_j + self.dram_j * dram + self.l2_j * max(l2 - dram, 0.0)


def _op_scale(kernel: Kernel, hw: HardwareProfile) -> float:
    """The device's time scale of the kernel's slowest op (1.0: as the roofline says)."""
    return max((hw.op_time_scale.get(op, 1.0) for op in kernel.op_types), default=1.0) if hw.op_time_scale else 1.0


def _on_kernel_basis(tiling: TilePlan, basis: Basis) -> TilePlan:
    """Every tile candidate timed as the kernel itself is (`Basis`)."""
    if tiling.chosen is None:
        return tiling
    choices = (tiling.chosen, *tiling.alternatives)
    times = basis.times(
        [c.compute_s for c in choices],
        [c.memory_s for c in choices],
        [c.dram_bytes for c in choices],
        [c.l2_bytes for c in choices],
        [c.split_k for c in choices],
    )
    timed = [c.with_time(t) for c, t in zip(choices, times)]
    return replace(tiling, chosen=timed[0], alternatives=tuple(timed[1:]))


def _interconnect_cost(kernel: Kernel, target: Target) -> Cost:
    """A collective: its wire time on the interconnect plus a launch; energy per byte on the wire."""
    hw, overhead_s = target.hw, target.launch_s
    wire = collective_time(
        kernel.collective, kernel.devices, kernel.dram_bytes, hw.interconnect, False, hw.all_reduce_efficiency
    )
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


def _engine_times(kernel: Kernel, searched: TilePlan | None, target: Target):
    """The tiling, compute and memory time, DRAM and L2 traffic, engine and sync time of a kernel on its engine
    (`searched`: its matrix tile search)."""
    hw, act_bytes, exponent = target.hw, target.act_bytes, target.overlap_exponent
    engine = kernel.engine
    sync_s = 0.0
    if engine == Engine.HOST:
        tiling = TilePlan("host", None)
        link = max(hw.interconnect.link_bandwidth_bytes_per_s, 1.0)
        compute_s, memory_s = hw.host_op_s, HOST_TRANSFER_FRACTION * kernel.dram_bytes / link
        dram = l2 = kernel.dram_bytes
    elif engine == Engine.MATRIX and kernel.rule == KernelRule.FLASH_ATTENTION:
        tiling = plan_attention(kernel, target)
        compute_s, memory_s, dram, l2 = _split(tiling)
        if tiling.best.split_k > 1:  # split key/value sequence: the partial outputs' combine pass
            sync_s = hw.grid_sync_s
    elif engine == Engine.MATRIX:
        if searched is None:
            raise ValueError(f"matrix kernel {kernel.name!r} reached the cost without its tile search")
        tiling = searched
        compute_s, memory_s, dram, l2 = _split(tiling)
        if tiling.best.split_k > 1:
            sync_s = hw.grid_sync_s
        if _skinny(kernel, hw):  # a GEMV-shaped product: the vector units' kernel where it is cheaper
            vector = plan_vector(kernel, hw, act_bytes)
            v_compute, v_memory, v_dram, v_l2, v_engine = _vector_cost(kernel, vector, target, True)
            if kernel_time(v_compute, v_memory, 0.0, 0.0, exponent) < kernel_time(
                compute_s, memory_s, 0.0, sync_s, exponent
            ):
                return vector, v_compute, v_memory, v_dram, v_l2, v_engine, 0.0
    else:
        tiling = plan_vector(kernel, hw, act_bytes)
        compute_s, memory_s, dram, l2, engine = _vector_cost(kernel, tiling, target)
        sync_s = tiling.grid_syncs * hw.grid_sync_s
    return tiling, compute_s, memory_s, dram, l2, engine, sync_s


def gemm_floor_s(kernel: Kernel, hw: HardwareProfile) -> float:
    """A GEMM's least time past its launch (0 for other kernels, and where the profile gives no floor): a fixed part
    (`overhead.gemm_floor_s`: the first tiles' loads, the epilogue's store) and one tile's serial main loop over K,
    `overhead.gemm_k_latency_s` an element of K up to `overhead.gemm_serial_k`, past which the library splits K
    across units. Measured (AIConfigurator, H200, TensorRT-LLM bf16 Linear, one row, n = 32): 2.5 us at K = 32,
    3.8 us at 1024, 5.0 us at 2048, then flat as split-K takes over."""
    shape = kernel.matrix
    if shape is None or shape.kind != MatrixKind.GEMM or hw.gemm_floor_s is None:
        return 0.0
    serial_k = min(shape.k, hw.gemm_serial_k) if hw.gemm_serial_k else shape.k
    return hw.gemm_floor_s + serial_k * (hw.gemm_k_latency_s or 0.0)


def _skinny(kernel: Kernel, hw: HardwareProfile) -> bool:
    """A GEMM with fewer rows (or columns) than one matrix instruction tile: a candidate for either engine."""
    shape = kernel.matrix
    return (
        shape is not None
        and shape.kind == MatrixKind.GEMM
        and kernel.rule != KernelRule.FLASH_ATTENTION
        and min(shape.m, shape.n) < hw.matrix_instruction_mnk[0]
    )


def _split(tiling: TilePlan) -> tuple[float, float, float, float]:
    """Compute and memory time of the chosen tile, recovered from its time and traffic."""
    c = tiling.best
    return c.compute_s, c.memory_s, c.dram_bytes, c.l2_bytes
