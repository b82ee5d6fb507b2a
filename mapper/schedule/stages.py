"""Pipeline parallelism: contiguous stages balanced by time, and the sends between them.

After cost. Kernels stay in graph order; the stage boundaries minimize the slowest stage (binary
search on the stage-time bound with a greedy fill: optimal for contiguous partitions). One batch
walks through every stage in turn (latency = all stages + the sends); back-to-back batches overlap
across stages, so steady-state throughput is set by the slowest stage.
"""

from __future__ import annotations

import math

import numpy as np

BISECTIONS = 60  # halvings of the bound's interval at most (the search usually ends on its float long before)


def balance_stages(times: list[float], stages: int) -> list[int]:
    """Stage index per kernel: contiguous, `stages` groups, the largest group time minimal."""
    n = len(times)
    stages = max(1, min(stages, n))
    if stages == 1:
        return [0] * n
    t = np.asarray(times, dtype=float)

    def fill(bound: float) -> tuple[list[int] | None, float]:
        """Greedy stages under `bound`: a stage takes kernels while its running sum stays within it (a kernel
        alone may exceed it). A stage's running sums are one `cumsum` from its first kernel: the same additions,
        in the same order, as a sum kept kernel by kernel. Also the least bound that fills otherwise: the least
        running sum of a stage with the kernel it left out (every bound below it cuts where this one does)."""
        out, start, stage, change = np.zeros(n, dtype=np.int64), 0, 0, math.inf
        while start < n:
            if stage >= stages:
                return None, change
            sums = np.cumsum(t[start:])
            over = (sums[1:] > bound) & (sums[:-1] > 0)  # the kernel that would take the stage past the bound
            taken = int(np.argmax(over)) + 1 if over.any() else len(sums)
            if taken < len(sums):
                change = min(change, float(sums[taken]))
            out[start : start + taken] = stage
            start, stage = start + taken, stage + 1
        return out.tolist(), change

    # The least bound some fill meets, searched between the largest kernel and the whole sum. A feasible fill's
    # slowest stage is a bound the same fill meets, so the upper end drops to it; an infeasible fill's change point
    # is the least bound that could fill otherwise, so the lower end rises to it. Either end moves to a bound a fill
    # meets or misses exactly, and the search ends where they meet: the least such bound, and its fill.
    lo, hi = float(t.max()), float(t.sum())
    best, change = fill(lo)
    if best is not None:
        return best
    best = fill(hi)[0]
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            break
        found, change = fill(mid)
        if found is None and change < hi:  # every bound below the change point fills as `mid`: infeasible
            lo = mid = change
            found, change = fill(mid)
            if found is None:
                continue
        if found is None:  # no bound below `hi` fills otherwise: `hi` is the least
            break
        best, hi = found, _slowest(t, found)
        if lo >= hi:
            break
    return best or [0] * n


def _slowest(t: np.ndarray, stage_of: list[int]) -> float:
    """The slowest stage's time (each stage summed kernel by kernel, as `fill`'s running sums)."""
    cuts = np.flatnonzero(np.diff(stage_of)) + 1
    return max(float(np.cumsum(part)[-1]) for part in np.split(t, cuts))
