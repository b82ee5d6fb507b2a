"""Benchmark: requests simulated per second (goal: 1,000,000 requests in under 2 s on 2 cores).

    .venv/bin/python bench/bench_serving.py [--requests N]

Batch 1 (closed-form Lindley recursion) at 80% load, and dynamic batching (a loop over batches)
at light load (~1.2 requests per batch: the loop's worst case) and at heavy load.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from mapper.serve.serving import ServingConfig, simulate_serving


def service(batch: int) -> float:
    return 1e-3 + 1e-4 * batch  # a batch-affine service time like a small encoder's (s)


CASES = (
    ("batch-1, 80% load", ServingConfig(max_batch=1, rate_per_s=0.8 / service(1), jitter_cv=0.03)),
    ("dynamic 32 / 2 ms, light load", ServingConfig(max_batch=32, max_wait_s=2e-3, rate_per_s=100, jitter_cv=0.03)),
    (
        "dynamic 32 / 2 ms, 75% of saturation",
        ServingConfig(max_batch=32, max_wait_s=2e-3, rate_per_s=0.75 * 32 / service(32), jitter_cv=0.03),
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    args = parser.parse_args()
    simulate_serving(service, ServingConfig(requests=1000))  # imports and first-call costs out of the timing
    for name, config in CASES:
        config = replace(config, requests=args.requests)
        start = time.perf_counter()
        r = simulate_serving(service, config)
        elapsed = time.perf_counter() - start
        print(
            f"{name:38s} {args.requests:>11,} requests in {elapsed:6.3f} s = {args.requests / elapsed:>12,.0f}"
            f" requests/s  (p99 {r.p99_s * 1e3:.2f} ms, mean batch {r.mean_batch:.1f})"
        )


if __name__ == "__main__":
    main()
