"""Bottleneck classes: an ordered rule table with named thresholds (first match wins).

Stage eight. Every kernel gets exactly one class (PRIMER s6), the evidence in
words a reviewer can check, and the owner who acts on it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Named thresholds: each rule below cites the one it uses.
LAUNCH_SHARE = 0.5          # fixed launch overhead at least this share of the kernel's time
SYNC_SHARE = 0.3            # grid-wide synchronization at least this share
OCCUPANCY_LIMIT = 0.6       # wave x padding efficiency below this, on a compute-dominated matrix kernel
INTERCONNECT_SHARE = 0.5    # a collective's wire time at least this share (multi-device plans)

OWNERS = {
    "compute-bound (matrix)": "ML compiler engineer",
    "compute-bound (vector/SFU)": "ML compiler engineer",
    "memory-bound": "ML compiler engineer",
    "occupancy / wave quantization": "ML compiler engineer",
    "launch / latency-bound": "runtime systems engineer",
    "synchronization": "runtime systems engineer",
    "interconnect": "runtime systems engineer",
    "host / unsupported": "framework integration lead",
}
FIXES = {
    "compute-bound (matrix)": "lower precision or a better tile",
    "compute-bound (vector/SFU)": "fuse it, or use a cheaper approximation",
    "memory-bound": "fuse it, change layout, or quantize weights",
    "occupancy / wave quantization": "split-K, retile, or a larger batch",
    "launch / latency-bound": "fuse kernels or capture a CUDA graph",
    "synchronization": "a one-pass algorithm",
    "interconnect": "overlap the collective or shard differently",
    "host / unsupported": "write a device kernel or rewrite the graph",
}


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
    interconnect_s: float = 0.0


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


@dataclass(frozen=True, slots=True)
class BottleneckRule:
    bottleneck: str
    matches: Callable[[Facts], bool]
    evidence: Callable[[Facts], str]


RULES: tuple[BottleneckRule, ...] = (
    BottleneckRule("host / unsupported", lambda f: f.engine == "host",
                   lambda f: f"runs on the host: {_us(f.time_s)} incl. transfers"),
    BottleneckRule("interconnect", lambda f: f.interconnect_s >= INTERCONNECT_SHARE * f.time_s > 0,
                   lambda f: f"collective {_us(f.interconnect_s)} of {_us(f.time_s)} on the links"),
    BottleneckRule("launch / latency-bound", lambda f: f.overhead_s >= LAUNCH_SHARE * f.time_s,
                   lambda f: f"launch {_us(f.overhead_s)} of {_us(f.time_s)} (work {_us(max(f.compute_s, f.memory_s))})"),
    BottleneckRule("synchronization", lambda f: f.sync_s >= SYNC_SHARE * f.time_s,
                   lambda f: f"grid sync {_us(f.sync_s)} of {_us(f.time_s)}"),
    BottleneckRule("occupancy / wave quantization",
                   lambda f: f.engine == "matrix" and f.compute_s >= f.memory_s
                   and f.wave_efficiency * f.padding_efficiency < OCCUPANCY_LIMIT,
                   lambda f: f"{f.waves} wave{'s' if f.waves != 1 else ''} at {f.wave_efficiency:.0%},"
                             f" padding {f.padding_efficiency:.0%}"),
    BottleneckRule("memory-bound", lambda f: f.memory_s >= f.compute_s,
                   lambda f: f"intensity {f.intensity:.3g} FLOP/B below ridge {f.ridge:.0f}"
                   if f.intensity < f.ridge else f"memory {_us(f.memory_s)} over compute {_us(f.compute_s)}"),
    BottleneckRule("compute-bound (matrix)", lambda f: f.engine == "matrix",
                   lambda f: f"intensity {f.intensity:.0f} FLOP/B above ridge {f.ridge:.0f};"
                             f" compute {_us(f.compute_s)} vs memory {_us(f.memory_s)}"),
    BottleneckRule("compute-bound (vector/SFU)", lambda f: True,
                   lambda f: f"{f.engine} units busy {_us(f.compute_s)} vs memory {_us(f.memory_s)}"),
)


def classify(facts: Facts) -> tuple[str, str, str]:
    """(class, evidence, owner) of one kernel."""
    for rule in RULES:
        if rule.matches(facts):
            return rule.bottleneck, rule.evidence(facts), OWNERS[rule.bottleneck]
    raise AssertionError("the last rule always matches")  # pragma: no cover
