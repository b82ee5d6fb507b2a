"""The one roofline of a kernel's time (Williams, Waterman and Patterson, CACM 2009): a smooth max of compute
and memory time plus fixed costs, and the memory stall read off it.

The cost stage (`cost.estimate`), the power cap (`cost.power_cap`), the bottleneck classes and the roll-up
read them here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def kernel_time(compute_s: float, memory_s: float, overhead_s: float, sync_s: float, overlap_exponent: float) -> float:
    """The one roofline: imperfect overlap of compute and memory (`tiling.smooth_max` at the profile's
    `overlap_exponent`), then fixed costs."""
    return kernel_times((compute_s,), (memory_s,), overhead_s, (sync_s,), overlap_exponent)[0]


def kernel_times(
    compute_s: Sequence[float],
    memory_s: Sequence[float],
    overhead_s: float,
    sync_s: Sequence[float],
    overlap_exponent: float,
) -> list[float]:
    """`kernel_time` of several (compute, memory, sync) at one overhead, the powers in one numpy call. The
    same floats as `tiling.smooth_max` of scalars: numpy's power loop raises to the exponent, the root
    is the C library's pow (numpy's float64 scalar power and math.pow both call it)."""
    n = len(compute_s)
    powered = (np.array((*compute_s, *memory_s), float) ** overlap_exponent).tolist()
    root = 1 / overlap_exponent
    return [math.pow(powered[i] + powered[n + i], root) + overhead_s + sync_s[i] for i in range(n)]


# The one definition of memory stall: every page, sheet and roll-up shows this sentence (`mapper.__all__`).
MEMORY_STALL_DEFINITION = (
    "Memory stall = the share of a kernel's time its engines wait on DRAM: its compute and memory time overlapped"
    " as its roofline overlaps them, less its compute time, over its time. A memory-bound kernel (memory time at"
    " least its compute time) waits at least (memory - compute) / time, so it is never 0% stalled; a layer"
    " type's and the model's stall are time-weighted over their kernels."
)


def memory_stall_fraction(compute_s: float, memory_s: float, time_s: float, overlap_exponent: float) -> float:
    """The share of a kernel's `time_s` its engines wait on DRAM (`MEMORY_STALL_DEFINITION`): the roofline's overlap
    of its compute and memory (`kernel_time` without fixed costs) less its compute, over its time. With launch,
    sync and stall its time splits as compute + stall + launch + sync (at the full clock: under a power cap the
    compute's stretch is in the time, not the stall)."""
    if time_s <= 0:
        return 0.0
    waits_s = max(kernel_time(compute_s, memory_s, 0.0, 0.0, overlap_exponent) - compute_s, 0.0)
    return min(waits_s / time_s, 1.0)
