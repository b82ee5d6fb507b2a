"""Pipeline parallelism: contiguous stages balanced by time, and the sends between them.

After cost. Kernels stay in graph order; the stage boundaries minimize the slowest stage (binary
search on the stage-time bound with a greedy fill: optimal for contiguous partitions). One batch
walks through every stage in turn (latency = all stages + the sends); back-to-back batches overlap
across stages, so steady-state throughput is set by the slowest stage.
"""

from __future__ import annotations

import numpy as np


def balance_stages(times: list[float], stages: int) -> list[int]:
    """Stage index per kernel: contiguous, `stages` groups, the largest group time minimal."""
    n = len(times)
    stages = max(1, min(stages, n))
    if stages == 1:
        return [0] * n
    t = np.asarray(times, dtype=float)
    values = t.tolist()  # the fill walks Python floats: the same doubles, without a numpy scalar per kernel

    def fill(bound: float) -> list[int] | None:
        out, stage, acc = [], 0, 0.0
        for x in values:
            if acc + x > bound and acc > 0:
                stage, acc = stage + 1, 0.0
            if stage >= stages:
                return None
            out.append(stage)
            acc += x
        return out

    lo, hi = float(t.max()), float(t.sum())
    for _ in range(60):
        mid = (lo + hi) / 2
        if fill(mid) is None:
            lo = mid
        else:
            hi = mid
    return fill(hi) or [0] * n


def stage_times(times: list[float], stage_of: list[int], stages: int) -> list[float]:
    out = [0.0] * stages
    for t, s in zip(times, stage_of, strict=True):
        out[s] += t
    return out
