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

    def fill(bound: float) -> list[int] | None:
        """Greedy stages under `bound`: a stage takes kernels while its running sum stays within it (a kernel
        alone may exceed it). A stage's running sums are one `cumsum` from its first kernel: the same additions,
        in the same order, as a sum kept kernel by kernel."""
        out, start, stage = np.zeros(n, dtype=np.int64), 0, 0
        while start < n:
            if stage >= stages:
                return None
            sums = np.cumsum(t[start:])
            over = (sums[1:] > bound) & (sums[:-1] > 0)  # the kernel that would take the stage past the bound
            taken = int(np.argmax(over)) + 1 if over.any() else len(sums)
            out[start : start + taken] = stage
            start, stage = start + taken, stage + 1
        return out.tolist()

    lo, hi = float(t.max()), float(t.sum())
    for _ in range(60):
        mid = (lo + hi) / 2
        if fill(mid) is None:
            lo = mid
        else:
            hi = mid
    return fill(hi) or [0] * n
