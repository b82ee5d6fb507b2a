"""Bottleneck classes: an ordered rule table with named thresholds (first match wins).

Every kernel gets exactly one class (`core.classes.CLASSES`), the evidence in
words a reviewer can check, and the owner who acts on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.classes import CLASSES, Bottleneck, Owner
from mapper.core.units import format_duration  # evidence times for people: 1.27 ms, not 1269.0 us
from mapper.core.vocab import Engine
from mapper.cost.roofline import kernel_time

# Named thresholds: each rule below cites the one it uses.
LAUNCH_SHARE = 0.5  # fixed launch overhead at least this share of the kernel's time
SYNC_SHARE = 0.3  # grid-wide synchronization at least this share
OCCUPANCY_LIMIT = 0.6  # wave x padding efficiency below this, on a compute-dominated matrix kernel
ALIGNMENT_SHARE = 0.3  # the time an unaligned GEMM's slower path adds, at least this share
INTERCONNECT_SHARE = 0.5  # a collective's wire time at least this share (multi-device plans)


@dataclass(frozen=True, slots=True)
class Facts:
    """What the rules look at, for one kernel."""

    engine: str
    time_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    sync_s: float
    intensity: float
    ridge: float
    waves: int
    wave_efficiency: float
    padding_efficiency: float
    overlap_exponent: float  # the profile's smooth max of compute and memory (`roofline.kernel_time`)
    interconnect_s: float = 0.0
    aligned_rate_share: float = 1.0  # the matrix rate an unaligned GEMM keeps (tiling.alignment_shares)
    aligned_dram_share: float = 1.0  # the DRAM efficiency it keeps
    compute_roofline_s: float = 0.0  # its FLOPs at the engine's peak (`estimate.roofline_parts`)
    memory_roofline_s: float = 0.0  # its boundary bytes at DRAM bandwidth (a host op: over the host link)
    roofline_s: float = 0.0  # the kernel at its roofline: no time without its bottleneck is below it


def _aligned_time(f: Facts) -> float:
    """The kernel's time on the aligned path: its compute and memory at the rates an aligned GEMM has (the same
    stretch under the power cap, if any, as its time has over its roofline)."""
    parts = kernel_time(f.compute_s, f.memory_s, f.overhead_s, f.sync_s, f.overlap_exponent)
    compute_s, memory_s = f.compute_s * f.aligned_rate_share, f.memory_s * f.aligned_dram_share
    aligned = kernel_time(compute_s, memory_s, f.overhead_s, f.sync_s, f.overlap_exponent)
    return f.time_s * aligned / parts if parts > 0 else f.time_s


def _unaligned(f: Facts) -> bool:
    """Off the alignment, and the slower path costs at least ALIGNMENT_SHARE of the kernel's time."""
    off = f.aligned_rate_share < 1.0 or f.aligned_dram_share < 1.0
    return off and f.time_s - _aligned_time(f) >= ALIGNMENT_SHARE * f.time_s > 0


@dataclass(frozen=True, slots=True)
class BottleneckRule:
    bottleneck: Bottleneck
    matches: Callable[[Facts], bool]
    evidence: Callable[[Facts], str]


RULES: tuple[BottleneckRule, ...] = (
    BottleneckRule(
        Bottleneck.HOST,
        lambda f: f.engine == Engine.HOST,
        lambda f: f"runs on the host: {format_duration(f.time_s)} incl. transfers",
    ),
    BottleneckRule(
        Bottleneck.INTERCONNECT,
        lambda f: f.interconnect_s >= INTERCONNECT_SHARE * f.time_s > 0,
        lambda f: f"collective {format_duration(f.interconnect_s)} of {format_duration(f.time_s)} on the links",
    ),
    BottleneckRule(
        Bottleneck.LAUNCH,
        lambda f: f.overhead_s >= LAUNCH_SHARE * f.time_s,
        lambda f: (
            f"launch {format_duration(f.overhead_s)} of {format_duration(f.time_s)}"
            f" (work {format_duration(max(f.compute_s, f.memory_s))})"
        ),
    ),
    BottleneckRule(
        Bottleneck.SYNCHRONIZATION,
        lambda f: f.sync_s >= SYNC_SHARE * f.time_s,
        lambda f: f"grid sync {format_duration(f.sync_s)} of {format_duration(f.time_s)}",
    ),
    BottleneckRule(
        Bottleneck.ALIGNMENT,
        _unaligned,
        lambda f: (
            f"a row stride off the fast kernels' alignment: {format_duration(f.time_s)}, aligned"
            f" {format_duration(_aligned_time(f))}"
        ),
    ),
    BottleneckRule(
        Bottleneck.OCCUPANCY,
        lambda f: (
            f.engine == Engine.MATRIX
            and f.compute_s >= f.memory_s
            and f.wave_efficiency * f.padding_efficiency < OCCUPANCY_LIMIT
        ),
        lambda f: (
            f"{f.waves} wave{'s' if f.waves != 1 else ''} at {f.wave_efficiency:.0%},"
            f" padding {f.padding_efficiency:.0%}"
        ),
    ),
    BottleneckRule(
        Bottleneck.MEMORY,
        lambda f: f.memory_s >= f.compute_s,
        lambda f: (
            f"intensity {f.intensity:.3g} FLOP/B below ridge {f.ridge:.0f}"
            if f.intensity < f.ridge
            else f"memory {format_duration(f.memory_s)} over compute {format_duration(f.compute_s)}"
        ),
    ),
    BottleneckRule(
        Bottleneck.COMPUTE_MATRIX,
        lambda f: f.engine == Engine.MATRIX,
        lambda f: (
            f"intensity {f.intensity:.0f} FLOP/B above ridge {f.ridge:.0f};"
            f" compute {format_duration(f.compute_s)} vs memory {format_duration(f.memory_s)}"
        ),
    ),
    BottleneckRule(
        Bottleneck.COMPUTE_VECTOR,
        lambda f: True,
        lambda f: f"{f.engine} units busy {format_duration(f.compute_s)} vs memory {format_duration(f.memory_s)}",
    ),
)


# The kernel's time with its class's loss taken away, on the same roofline the drill-down shows (kernel_time, its
# compute and memory at the peaks `roofline_s` takes): a compute- or memory-bound kernel's bound resource at its
# roofline, an occupancy-bound one's compute without its wave and padding loss, launch or sync at zero, the
# aligned path, the op on the device. What a fix that removed the bottleneck entirely would leave: never below the
# kernel's roofline (a collective's wire time is its floor), so its ratio to the time is at most time / roofline.
WITHOUT_BOTTLENECK: dict[Bottleneck, Callable[[Facts], float]] = {
    Bottleneck.HOST: lambda f: kernel_time(
        0.0, f.memory_s, f.overhead_s, f.sync_s, f.overlap_exponent
    ),  # the op on the device
    Bottleneck.INTERCONNECT: lambda f: max(f.time_s - f.interconnect_s, 0.0),
    Bottleneck.LAUNCH: lambda f: kernel_time(f.compute_s, f.memory_s, 0.0, f.sync_s, f.overlap_exponent),
    Bottleneck.SYNCHRONIZATION: lambda f: kernel_time(f.compute_s, f.memory_s, f.overhead_s, 0.0, f.overlap_exponent),
    Bottleneck.ALIGNMENT: _aligned_time,
    Bottleneck.OCCUPANCY: lambda f: kernel_time(
        max(f.compute_s * f.wave_efficiency * f.padding_efficiency, f.compute_roofline_s),
        f.memory_s,
        f.overhead_s,
        f.sync_s,
        f.overlap_exponent,
    ),
    Bottleneck.MEMORY: lambda f: kernel_time(
        f.compute_s, f.memory_roofline_s, f.overhead_s, f.sync_s, f.overlap_exponent
    ),
    Bottleneck.COMPUTE_MATRIX: lambda f: kernel_time(
        f.compute_roofline_s, f.memory_s, f.overhead_s, f.sync_s, f.overlap_exponent
    ),
    Bottleneck.COMPUTE_VECTOR: lambda f: kernel_time(
        f.compute_roofline_s, f.memory_s, f.overhead_s, f.sync_s, f.overlap_exponent
    ),
}


SPEEDUP_DEFINITION = (
    "Speed-up without its bottleneck = the kernel's time over its time with its class's loss removed on the same"
    " roofline: a memory- or compute-bound kernel's bound resource at its peak, an occupancy-bound one's compute"
    " without its wave and padding loss, no launch or sync cost, the aligned path, the op on the device. That time"
    " is never below the kernel at its roofline, so the speed-up is at most its time over its roofline time."
)


def speedup_if_removed(bottleneck: Bottleneck, facts: Facts) -> float:
    """The kernel's time over its time without its bottleneck's loss (`WITHOUT_BOTTLENECK`, never below its
    roofline); 1.0: nothing to gain."""
    rest = max(WITHOUT_BOTTLENECK[bottleneck](facts), facts.roofline_s)
    return max(facts.time_s / rest, 1.0) if rest > 0 else 1.0


def classify(facts: Facts) -> tuple[Bottleneck, str, Owner]:
    """(class, evidence, owner) of one kernel."""
    for rule in RULES:
        if rule.matches(facts):
            return rule.bottleneck, rule.evidence(facts), CLASSES[rule.bottleneck].owner
    raise AssertionError("the last rule always matches")  # pragma: no cover
