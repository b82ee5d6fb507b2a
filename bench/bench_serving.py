"""Benchmark: requests simulated per second (goal: 1,000,000 requests in under 2 s on 2 cores), and LLM
serving of 100,000 Llama-2-7B requests with chunked prefill in under 5 s.

    .venv/bin/python bench/bench_serving.py [--requests N] [--llm-requests N]

Batch 1 (closed-form Lindley recursion) at 80% load, and dynamic batching (a loop over batches)
at light load (~1.2 requests per batch: the loop's worst case) and at heavy load. Then continuous
batching of Llama-2-7B (bf16, H100 SXM, 512 prompt + 128 output tokens, up to 64 sequences) by each
scheduler, the engine's step-time grid mapped once beforehand (its time printed apart).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import mapper
from mapper.serve.continuous import SCHEDULERS, LLMServingConfig, simulate_llm_serving
from mapper.serve.llm import engine_step_times, kv_capacity_tokens
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
    parser.add_argument("--llm-requests", type=int, default=100_000)
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

    llm(args.llm_requests)


def llm(requests: int) -> None:
    hw, options = mapper.load_hardware("h100-sxm"), mapper.PlanOptions(dtype="bf16")
    start = time.perf_counter()
    prefill, decode = engine_step_times("llama2-7b", hw, options, 64, 512, 640, chunk_tokens=512)
    kv = kv_capacity_tokens("llama2-7b", hw, options, 512)
    print(f"llama2-7b step-time grid mapped in {time.perf_counter() - start:.2f} s (KV cache {kv:,} tokens)")
    for scheduler in SCHEDULERS:
        config = LLMServingConfig(
            max_batch=64, rate_per_s=8, requests=requests, kv_capacity_tokens=kv, jitter_cv=0.03,
            jitter_dist="lognormal", scheduler=scheduler,
        )  # fmt: skip
        start = time.perf_counter()
        r = simulate_llm_serving(prefill, decode, config)
        elapsed = time.perf_counter() - start
        print(
            f"llama2-7b {scheduler:14s} {requests:>9,} requests in {elapsed:6.3f} s"
            f"  TTFT p99 {r.ttft_p99_s * 1e3:.1f} ms  TPOT p99 {r.tpot_p99_s * 1e3:.1f} ms"
            f"  e2e p99 {r.latency_p99_s:.2f} s  {r.preemptions} preemptions"
        )


if __name__ == "__main__":
    main()
