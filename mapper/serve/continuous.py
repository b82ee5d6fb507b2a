"""Continuous batching for decoder LLMs: an iteration-level scheduler (Orca/vLLM style) over step times.

Pure: prefill(batch, prompt length) and decode(batch, context) times come in as functions (mapper/serve/llm.py
builds them from the engine); requests are admitted while slots and the KV cache allow, and time to
first token (TTFT) and time per output token (TPOT) come out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.serve.serving import ServingConfig, draw_jitter, validate_config
from mapper.serve.trace import Trace

MAX_TOKENS = limits.MAX_TOKENS

StepTime = Callable[[int, float], float]  # (batch, tokens) -> seconds


@dataclass(frozen=True, slots=True)
class LLMServingConfig:
    max_batch: int = 32  # sequences decoding together
    rate_per_s: float = 1.0
    requests: int = 1_000
    seed: int = 0
    prompt_tokens: int = 512  # per request, where the trace gives none
    output_tokens: int = 128
    kv_capacity_tokens: int | None = None  # None: from device memory (simulate_model_llm_serving)
    jitter_cv: float | None = None
    jitter_dist: str | None = None
    trace: Trace | None = None


@dataclass(frozen=True, slots=True)
class LLMServingResult:
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p95_s: float
    ttft_p99_s: float
    ttft_mean_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    tpot_p95_s: float
    tpot_p99_s: float
    tpot_mean_s: float
    latency_p50_s: float
    latency_p99_s: float
    latency_mean_s: float
    throughput_requests_per_s: float
    throughput_tokens_per_s: float  # output tokens
    mean_running: float  # time-average sequences in the running batch
    requests: int
    kv_capacity_tokens: int
    assumptions: tuple[str, ...]


def validate_llm_config(config: LLMServingConfig) -> LLMServingConfig:
    checked = validate_config(
        ServingConfig(
            policy="dynamic",
            max_batch=config.max_batch,
            rate_per_s=config.rate_per_s,
            requests=config.requests,
            seed=config.seed,
            jitter_cv=config.jitter_cv,
            jitter_dist=config.jitter_dist,
            trace=config.trace,
        )
    )
    for name in ("prompt_tokens", "output_tokens"):
        value = getattr(config, name)
        if not (isinstance(value, int) and 1 <= value <= MAX_TOKENS):
            raise MapperError(
                f"{name.replace('_', ' ')} {value!r} must be an integer from 1 to {limits.limit_text('MAX_TOKENS')}"
            )
    trace = config.trace
    requests = len(trace) if trace is not None else config.requests
    output = (
        int(trace.output_tokens.sum())
        if trace is not None and trace.output_tokens is not None
        else requests * config.output_tokens
    )
    if requests + output > limits.MAX_LLM_TOKENS:  # one scheduler step (and one jitter draw) per token at batch 1
        raise MapperError(
            f"{requests:,} requests x their output tokens is {requests + output:,} steps, over"
            f" {limits.limit_text('MAX_LLM_TOKENS')}; simulate fewer requests or shorter outputs"
        )
    if config.kv_capacity_tokens is not None and not (
        isinstance(config.kv_capacity_tokens, int) and config.kv_capacity_tokens >= 1
    ):
        raise MapperError(f"KV-cache capacity {config.kv_capacity_tokens!r} tokens must be an integer >= 1")
    return replace(config, jitter_cv=checked.jitter_cv, jitter_dist=checked.jitter_dist)


@dataclass(frozen=True, slots=True)
class _Requests:
    """Each request's arrival time and prompt and output lengths (tokens)."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray

    @property
    def need(self) -> np.ndarray:  # KV tokens reserved at admission
        return self.prompt + self.output


def simulate_llm_serving(prefill_time: StepTime, decode_time: StepTime, config: LLMServingConfig) -> LLMServingResult:
    """Continuous batching, one loop iteration per engine step (not per request or token).

    Each step: admit waiting requests first come first served while a slot is free and the KV cache
    holds their prompt + output tokens (reserved at admission, so nothing is ever preempted); if any
    were admitted, run their prefill (one step at their count and longest prompt; it yields their
    first token) while the others wait; otherwise run one decode step for the running batch at its
    mean context length. Jitter multiplies every step."""
    config = validate_llm_config(config)
    if config.kv_capacity_tokens is None:
        raise MapperError("KV-cache capacity is unknown: give kv_capacity_tokens (tokens the cache holds)")
    capacity = config.kv_capacity_tokens
    arrival_rng, jitter_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2))
    reqs = _requests(config, arrival_rng)
    n, need, output = len(reqs.arrival), reqs.need, reqs.output
    if int(need.max()) > capacity:
        row = int(np.argmax(need > capacity))
        raise MapperError(
            f"request {row + 1} needs {int(need[row])} KV tokens (prompt + output) but the cache holds"
            f" {capacity}; shorten it or use a device with more memory"
        )
    jitter = draw_jitter(2 * n + int(output.sum()), config.jitter_cv, config.jitter_dist, jitter_rng).tolist()
    first_token, finish, busy_weighted = _schedule(prefill_time, decode_time, reqs, config.max_batch, capacity, jitter)
    return _result(reqs, first_token, finish, busy_weighted, config)


def _requests(config: LLMServingConfig, arrival_rng: np.random.Generator) -> _Requests:
    """The trace's requests, or Poisson arrivals at the configured rate; lengths from the trace or the config."""
    trace = config.trace
    if trace is not None:
        arrival = np.asarray(trace.arrival_s, dtype=np.float64)
    else:
        arrival = np.cumsum(arrival_rng.standard_exponential(config.requests)) / config.rate_per_s
    n = len(arrival)
    if n == 0:
        raise MapperError("no requests to simulate (the trace is empty)")
    prompt = (
        trace.prompt_tokens
        if trace is not None and trace.prompt_tokens is not None
        else np.full(n, config.prompt_tokens, dtype=np.int64)
    )
    output = (
        trace.output_tokens
        if trace is not None and trace.output_tokens is not None
        else np.full(n, config.output_tokens, dtype=np.int64)
    )
    return _Requests(arrival, prompt, output)


def _schedule(
    prefill_time: StepTime, decode_time: StepTime, reqs: _Requests, max_batch: int, capacity: int, jitter: list
) -> tuple[np.ndarray, np.ndarray, float]:
    """The scheduler loop: each request's first-token and finish times, and the time-weighted batch size."""
    prompt, output, need = reqs.prompt, reqs.output, reqs.need
    n = len(reqs.arrival)
    first_token = np.empty(n)
    finish = np.empty(n)
    running = np.empty(0, dtype=np.int64)  # request ids
    made = np.empty(0, dtype=np.int64)  # tokens generated so far, per running request
    now, nxt, kv_used, step, busy_weighted = 0.0, 0, 0, 0, 0.0
    arr, need_l = reqs.arrival.tolist(), need.tolist()
    while nxt < n or len(running):
        if not len(running) and nxt < n and arr[nxt] > now:
            now = arr[nxt]  # idle until the next arrival
        admitted = []
        while (
            nxt < n
            and arr[nxt] <= now
            and len(running) + len(admitted) < max_batch
            and kv_used + need_l[nxt] <= capacity
        ):
            admitted.append(nxt)
            kv_used += need_l[nxt]
            nxt += 1
        if admitted:
            ids = np.array(admitted, dtype=np.int64)
            dt = prefill_time(len(ids), float(prompt[ids].max())) * jitter[step]
            now += dt
            busy_weighted += dt * len(running)
            first_token[ids] = now
            running, made = np.concatenate([running, ids]), np.concatenate([made, np.ones(len(ids), np.int64)])
        elif len(running):
            context = float((prompt[running] + made).mean())
            dt = decode_time(len(running), context) * jitter[step]
            now += dt
            busy_weighted += dt * len(running)
            made += 1
        else:  # nothing running and the head request does not fit: excluded by the capacity check above
            raise MapperError("internal: the scheduler stalled with an empty batch")
        step += 1
        done = made >= output[running]
        if done.any():
            finish[running[done]] = now
            kv_used -= int(need[running[done]].sum())
            running, made = running[~done], made[~done]
    return first_token, finish, busy_weighted


def _result(
    reqs: _Requests, first_token: np.ndarray, finish: np.ndarray, busy_weighted: float, config: LLMServingConfig
) -> LLMServingResult:
    arrival, output, n = reqs.arrival, reqs.output, len(reqs.arrival)
    ttft = first_token - arrival
    latency = finish - arrival
    multi = output > 1
    tpot = (finish[multi] - first_token[multi]) / (output[multi] - 1) if multi.any() else np.zeros(1)
    makespan = max(float(finish.max() - arrival[0]), 1e-300)
    q = lambda x, p: float(np.percentile(x, p))
    return LLMServingResult(
        q(ttft, 50),
        q(ttft, 90),
        q(ttft, 95),
        q(ttft, 99),
        float(ttft.mean()),
        q(tpot, 50),
        q(tpot, 90),
        q(tpot, 95),
        q(tpot, 99),
        float(tpot.mean()),
        q(latency, 50),
        q(latency, 99),
        float(latency.mean()),
        n / makespan,
        float(output.sum()) / makespan,
        busy_weighted / makespan,
        n,
        config.kv_capacity_tokens,
        describe_llm(config, n),
    )


def describe_llm(config: LLMServingConfig, n: int) -> tuple[str, ...]:
    arrivals = (
        f"arrivals: trace {config.trace.source or '(in memory)'}, {n:,} requests"
        if config.trace is not None
        else f"arrivals: Poisson at {config.rate_per_s:g}/s, {n:,} requests, seed {config.seed}"
    )
    lengths = (
        f"lengths: {config.prompt_tokens} prompt and {config.output_tokens} output tokens per request"
        " (where the trace gives none)"
    )
    return (
        arrivals,
        lengths,
        f"policy: continuous batching, up to {config.max_batch} sequences; first come first served admission",
        f"KV cache: {config.kv_capacity_tokens:,} tokens; prompt + output reserved at admission (no preemption)",
        "prefill of newly admitted requests runs as one step before decoding resumes (decodes wait)",
        "step times: engine on a coarse grid of batch and context length, linearly interpolated",
        "jitter: none"
        if config.jitter_dist == "none" or not config.jitter_cv
        else f"jitter: {config.jitter_dist}, multiplicative per step, mean 1, CV {config.jitter_cv:g}",
    )
