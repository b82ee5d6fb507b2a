"""The one roofline of a kernel's time (PRIMER s5): a smooth max of compute and memory time plus fixed costs.

The cost stage (`cost.estimate`), the power cap (`cost.power_cap`) and the bottleneck classes read it here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mapper.plan.tiling import OVERLAP_EXPONENT


def kernel_time(compute_s: float, memory_s: float, overhead_s: float, sync_s: float) -> float:
    """The one roofline: imperfect overlap of compute and memory (`tiling.smooth_max`), then fixed costs."""
    return kernel_times((compute_s,), (memory_s,), overhead_s, (sync_s,))[0]


def kernel_times(
    compute_s: Sequence[float], memory_s: Sequence[float], overhead_s: float, sync_s: Sequence[float]
) -> list[float]:
    """`kernel_time` of several (compute, memory, sync) at one overhead, the powers in one numpy call. The
    same floats as `tiling.smooth_max` of scalars: numpy's power loop raises to the exponent, the root
    is the C library's pow (numpy's float64 scalar power and math.pow both call it)."""
    n = len(compute_s)
    powered = (np.array((*compute_s, *memory_s), float) ** OVERLAP_EXPONENT).tolist()
    root = 1 / OVERLAP_EXPONENT
    return [math.pow(powered[i] + powered[n + i], root) + overhead_s + sync_s[i] for i in range(n)]
