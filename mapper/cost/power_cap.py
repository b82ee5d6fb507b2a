"""The power cap: above it the clock drops and compute time stretches.

A kernel whose power at the full clock is over the cap runs at the clock ratio c < 1 where its power meets
the cap: its compute time grows as 1/c, its FLOPs' energy falls as c^2 (dynamic power C V^2 f, the voltage
tracking the clock across the DVFS range), its memory time and its bytes' energy stay. c is solved on the
max roofline, time = max(compute / c, memory) + fixed costs: where the kernel stays memory-bound,
flop_j c^2 + byte_j = H (memory + fixed) gives c at once; else flop_j c^3 + (byte_j - H fixed) c - H compute
= 0, convex with one positive root, which Newton's method reaches from c = 1 without overshooting. The time
is then the smooth roofline's at that clock (`kernel_time`), so the power lands at or under the cap.

Measured on one H200 (data/evidence/h200/power.csv, held 3 s each at the 700 W cap): bf16 GEMMs of 8192^3
and 4096^3 both settle at 658-659 TFLOP/s (SM clock 1.5 GHz), while a 128-row GEMM streaming its weights at
3.5 TB/s loses 3% (1.47 GHz); a constant-energy stretch would have slowed it by a third.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.cost.roofline import kernel_time

NEWTON_TOLERANCE = 1e-12  # on the clock ratio; quadratic convergence reaches it in ~6 steps from c = 1
NEWTON_STEPS_MAX = 60


@dataclass(frozen=True, slots=True)
class Capped:
    """A kernel's time and energy above idle under the cap, and whether the cap slowed it."""

    time_s: float
    dynamic_j: float
    throttled: bool


def under_cap(
    time_s: float,
    parts: tuple[float, float, float, float],
    flop_j: float,
    dynamic_j: float,
    headroom_w: float,
    overlap_exponent: float,
) -> Capped:
    """`time_s` and `dynamic_j` (energy above idle, `flop_j` of it the FLOPs') at the full clock, `parts` its
    (compute, memory, launch, sync) seconds, `headroom_w` the power above idle the cap leaves, `overlap_exponent`
    the profile's (the roofline's smooth max)."""
    if dynamic_j / time_s <= headroom_w:
        return Capped(time_s, dynamic_j, False)
    compute_s, memory_s, overhead_s, sync_s = parts
    byte_j = dynamic_j - flop_j
    if flop_j <= 0.0 or compute_s <= 0.0:  # no clock to lower: the stream itself stretches until it fits
        return Capped(dynamic_j / headroom_w, dynamic_j, True)
    clock = _clock(compute_s, memory_s, overhead_s + sync_s, flop_j, byte_j, headroom_w)
    time_s = kernel_time(compute_s / clock, memory_s, overhead_s, sync_s, overlap_exponent)
    return Capped(time_s, flop_j * clock * clock + byte_j, True)


def _clock(compute_s: float, memory_s: float, fixed_s: float, flop_j: float, byte_j: float, headroom_w: float):
    """The clock ratio at which the kernel's power on the max roofline meets the headroom."""
    if memory_s > compute_s:  # memory-bound at the full clock: does it stay so down to the cap?
        knee = compute_s / memory_s
        if flop_j * knee * knee + byte_j <= headroom_w * (memory_s + fixed_s):
            return math.sqrt(max(headroom_w * (memory_s + fixed_s) - byte_j, 0.0) / flop_j)
    linear, constant = byte_j - headroom_w * fixed_s, headroom_w * compute_s
    clock = 1.0
    for _ in range(NEWTON_STEPS_MAX):
        value = flop_j * clock**3 + linear * clock - constant
        step = value / (3.0 * flop_j * clock * clock + linear)
        clock -= step
        if abs(step) < NEWTON_TOLERANCE:
            break
    return clock
