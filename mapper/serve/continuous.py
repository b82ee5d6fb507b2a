"""Continuous batching for decoder LLMs: an iteration-level scheduler (Orca/vLLM style) over step times.

Pure: prefill(batch, prompt length) and decode(batch, context) times come in as functions (mapper/serve/llm.py
builds them from the engine); requests are admitted while slots and the KV cache allow, a scheduler
(serve/scheduler.py: prefill-first, decode-first, chunked prefill) orders the steps, and time to first
token (TTFT), time per output token (TPOT) and request latency percentiles come out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.units import overload_sentence
from mapper.core.vocab import values
from mapper.serve.chunked import run_chunked
from mapper.serve.scheduler import (
    Jitter,
    Requests,
    Scheduler,
    SchedulerRun,
    StepTime,
    Timeline,
    run_whole_prefill,
)
from mapper.serve.serving import ServingConfig, filled_jitter, validate_config
from mapper.serve.speculative import SpeculativeConfig, validate_speculative
from mapper.serve.trace import Trace

MAX_TOKENS = limits.MAX_TOKENS
SCHEDULERS = values(Scheduler)
DEFAULT_CHUNK_TOKENS = 512  # vLLM's chunked-prefill token budget for a large GPU (max_num_batched_tokens)


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
    scheduler: str = Scheduler.PREFILL_FIRST
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS  # chunked: prompt tokens prefilled per step beside the decodes
    kv_capacity_source: str = ""  # how the capacity was computed (serve.llm.KvBudget.text), where it was
    kv_page_tokens: int = 0  # tokens a block of the paged cache holds (the runtime's; 0: contiguous)
    speculative: SpeculativeConfig | None = None  # speculative decoding (serve/speculative.py); None: off


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
    latency_p90_s: float
    latency_p99_s: float
    latency_mean_s: float
    throughput_requests_per_s: float
    throughput_tokens_per_s: float  # output tokens
    mean_running: float  # time-average sequences in the running batch
    requests: int
    kv_capacity_tokens: int
    scheduler: str
    preemptions: int  # chunked: sequences evicted from a full KV cache (recomputed on readmission)
    assumptions: tuple[str, ...]
    offered_rate_per_s: float = 0.0  # requests/s arriving (the config's rate, or the trace's)
    capacity_per_s: float = 0.0  # requests/s the engine sustains at its batch (`llm_capacity_per_s`)
    overload: str = ""  # the sentence when the offered rate is over the capacity (overload_sentence), else ""
    speculative: dict | None = None  # speculative decoding's round at the operating point (serve.llm), where on


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
    if config.scheduler not in SCHEDULERS:
        raise MapperError(f"scheduler {config.scheduler!r} is not one of {', '.join(SCHEDULERS)}")
    for name in ("prompt_tokens", "output_tokens", "chunk_tokens"):
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
    page = config.kv_page_tokens
    if not (isinstance(page, int) and not isinstance(page, bool) and 0 <= page <= MAX_TOKENS):
        raise MapperError(f"KV-cache page {page!r} tokens must be an integer from 0 (contiguous) to {MAX_TOKENS:,}")
    if config.kv_capacity_tokens is not None and not (
        isinstance(config.kv_capacity_tokens, int) and config.kv_capacity_tokens >= 1
    ):
        raise MapperError(f"KV-cache capacity {config.kv_capacity_tokens!r} tokens must be an integer >= 1")
    speculative = config.speculative
    if speculative is not None:
        speculative = validate_speculative(speculative)
        if config.scheduler == Scheduler.CHUNKED:
            raise MapperError(
                "speculative decoding is modelled with the prefill-first and decode-first schedulers, not beside a"
                " chunked prefill; choose --scheduler prefill-first or decode-first"
            )
    return replace(
        config,
        jitter_cv=checked.jitter_cv,
        jitter_dist=checked.jitter_dist,
        scheduler=Scheduler(config.scheduler).value,
        speculative=speculative,
    )


def simulate_llm_serving(prefill_time: StepTime, decode_time: StepTime, config: LLMServingConfig) -> LLMServingResult:
    """Continuous batching, one loop iteration per engine step (not per request or token), by the config's
    scheduler (serve/scheduler.py). Jitter multiplies every step."""
    config = validate_llm_config(config)
    if config.kv_capacity_tokens is None:
        raise MapperError("KV-cache capacity is unknown: give kv_capacity_tokens (tokens the cache holds)")
    capacity = config.kv_capacity_tokens
    arrival_rng, jitter_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2))
    reqs = draw_requests(config, arrival_rng)
    n, need = len(reqs.arrival), reqs.need
    if int(need.max()) > capacity:
        row = int(np.argmax(need > capacity))
        raise MapperError(
            f"request {row + 1} needs {int(need[row])} KV tokens (prompt + output, in whole pages) but the cache holds"
            f" {capacity}; shorten it or use a device with more memory"
        )
    cv, dist = filled_jitter(config.jitter_cv, config.jitter_dist)
    jitter = Jitter.for_requests(reqs, cv, dist, jitter_rng)
    run = SchedulerRun(prefill_time, decode_time, reqs, config.max_batch, capacity, jitter)
    if config.scheduler == Scheduler.CHUNKED:
        timeline = run_chunked(run, chunk_tokens=config.chunk_tokens)
    else:
        timeline = run_whole_prefill(run, decode_first=config.scheduler == Scheduler.DECODE_FIRST)
    offered = config.rate_per_s if config.trace is None else n / max(float(reqs.arrival[-1] - reqs.arrival[0]), 1e-300)
    capacity_per_s = llm_capacity_per_s(prefill_time, decode_time, reqs, config.max_batch, capacity)
    return replace(
        timeline_result(reqs, timeline, config, capacity),
        offered_rate_per_s=offered,
        capacity_per_s=capacity_per_s,
        overload=overload_sentence(offered, capacity_per_s),
    )


def llm_capacity_per_s(
    prefill_time: StepTime, decode_time: StepTime, reqs: Requests, max_batch: int, kv_tokens: int
) -> float:
    """Requests/s a full engine sustains: each request costs its prefill plus its share of the decode steps of
    a full batch (as many sequences as max_batch and the KV cache allow), at the mean lengths. A queue offered
    more grows without bound, whatever its percentiles over a finite run say."""
    prompt, output = float(reqs.prompt.mean()), float(reqs.output.mean())
    batch = max(1, min(max_batch, int(kv_tokens // max(prompt + output, 1.0))))
    per_request = prefill_time(1, prompt) + output * decode_time(batch, prompt + output / 2) / batch
    return 1.0 / per_request if per_request > 0 else 0.0


def draw_requests(config: LLMServingConfig, arrival_rng: np.random.Generator) -> Requests:
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
    return Requests(arrival, prompt, output, config.kv_page_tokens)


TAIL = (50, 90, 95, 99)  # the TTFT and TPOT percentiles a result holds, in its fields' order
LATENCY_TAIL = (50, 90, 99)  # and the request latency's


def timeline_result(reqs: Requests, timeline: Timeline, config: LLMServingConfig, capacity: int) -> LLMServingResult:
    arrival, output, n = reqs.arrival, reqs.output, len(reqs.arrival)
    first_token, finish = timeline.first_token, timeline.finish
    ttft = first_token - arrival
    latency = finish - arrival
    multi = output > 1
    tpot = (finish[multi] - first_token[multi]) / (output[multi] - 1) if multi.any() else np.zeros(1)
    makespan = max(float(finish.max() - arrival[0]), 1e-300)
    # each sample's percentiles in one call: one partition, the same interpolation (and floats) as a call apiece
    ttft_q, tpot_q = np.percentile(ttft, TAIL).tolist(), np.percentile(tpot, TAIL).tolist()
    latency_q = np.percentile(latency, LATENCY_TAIL).tolist()
    return LLMServingResult(
        ttft_q[0],
        ttft_q[1],
        ttft_q[2],
        ttft_q[3],
        float(ttft.mean()),
        tpot_q[0],
        tpot_q[1],
        tpot_q[2],
        tpot_q[3],
        float(tpot.mean()),
        latency_q[0],
        latency_q[1],
        latency_q[2],
        float(latency.mean()),
        n / makespan,
        float(output.sum()) / makespan,
        timeline.busy_weighted / makespan,
        n,
        capacity,
        config.scheduler,
        timeline.preemptions,
        describe_llm(config, n),
    )


# keyed by Scheduler, a str: a validated config's scheduler (its value) looks its text up as it is
SCHEDULER_TEXT: dict[str, Callable[[LLMServingConfig], tuple[str, ...]]] = {
    Scheduler.PREFILL_FIRST: lambda c: (
        f"KV cache: {c.kv_capacity_tokens:,} tokens; prompt + output reserved at admission (no preemption)",
        "scheduler prefill-first: newly admitted requests prefill as one step before decoding resumes (decodes wait)",
    ),
    Scheduler.DECODE_FIRST: lambda c: (
        f"KV cache: {c.kv_capacity_tokens:,} tokens; prompt + output reserved at admission (no preemption)",
        "scheduler decode-first: new requests are admitted and prefilled only once the running batch has drained",
    ),
    Scheduler.CHUNKED: lambda c: (
        (
            f"KV cache: {c.kv_capacity_tokens:,} tokens, filled on demand (a prompt at admission, a token per step);"
            " when full, the latest admitted sequence is preempted and recomputed on readmission"
        ),
        (
            f"scheduler chunked: every step decodes each running sequence and prefills up to {c.chunk_tokens:,}"
            " prompt tokens; the step costs decode + chunk prefill less one shared weight read (a 1-token prefill)"
        ),
        "chunked prefill: a chunk costs a prefill of its length (attention to earlier chunks not added)",
    ),
}


def speculative_text(spec: SpeculativeConfig) -> tuple[str, ...]:
    return (
        spec.text(),
        (
            "speculative decoding, not modelled: tree attention, acceptance varying by position or prompt, the spread"
            " of accepted tokens between sequences (each round credits every sequence its expectation), the draft's"
            " lookahead KV slots"
        ),
    )


def workload_text(config: LLMServingConfig, n: int) -> tuple[str, str]:
    """The arrivals and the request lengths, as the assumptions say them."""
    arrivals = (
        f"arrivals: trace {config.trace.source or '(in memory)'}, {n:,} requests"
        if config.trace is not None
        else f"arrivals: Poisson at {config.rate_per_s:g}/s, {n:,} requests, seed {config.seed}"
    )
    lengths = (
        f"lengths: {config.prompt_tokens} prompt and {config.output_tokens} output tokens per request"
        " (where the trace gives none)"
    )
    return arrivals, lengths


def describe_llm(config: LLMServingConfig, n: int) -> tuple[str, ...]:
    return (
        *workload_text(config, n),
        f"policy: continuous batching, up to {config.max_batch} sequences; first come first served admission",
        *SCHEDULER_TEXT[config.scheduler](config),
        *((config.kv_capacity_source,) if config.kv_capacity_source else ()),
        "step times: engine on a coarse grid of batch and context length, linearly interpolated",
        *(speculative_text(config.speculative) if config.speculative else ()),
        "jitter: none"
        if config.jitter_dist == "none" or not config.jitter_cv
        else f"jitter: {config.jitter_dist}, multiplicative per step, mean 1, CV {config.jitter_cv:g}",
    )
