"""Decoder-LLM serving: prefill and decode phases, continuous batching, a KV-cache capacity limit.

Stage ten for decoders (PRIMER s8): per-step times come from the engine (prefill at a batch and
prompt length, one decode step at a batch and context length) on a coarse grid, interpolated; an
iteration-level scheduler (Orca/vLLM style) admits requests while slots and KV cache allow and
reports time to first token (TTFT) and time per output token (TPOT).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.handle import open_model
from mapper.pipeline import map_workload
from mapper.plan.kernels import Sizer, model_dtype
from mapper.serve.engine import engine_batch_time
from mapper.serve.load_curve import LoadCurve, load_curve, serving_section
from mapper.serve.serving import ServingConfig, ServingResult, draw_jitter, simulate_serving, validate_config
from mapper.serve.trace import Trace

KV_MEMORY_FRACTION = (
    0.9  # of device memory left after the weights (runtime, activations and fragmentation take the rest)
)
GRID_POINTS = 4  # context lengths per interpolation grid (times are near-affine in length)
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
    ttft_p99_s: float
    ttft_mean_s: float
    tpot_p50_s: float
    tpot_p90_s: float
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
    if config.trace is not None:
        arrival = np.asarray(config.trace.arrival_s, dtype=np.float64)
    else:
        arrival = np.cumsum(arrival_rng.standard_exponential(config.requests)) / config.rate_per_s
    n = len(arrival)
    if n == 0:
        raise MapperError("no requests to simulate (the trace is empty)")
    trace = config.trace
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
    need = prompt + output
    if int(need.max()) > capacity:
        row = int(np.argmax(need > capacity))
        raise MapperError(
            f"request {row + 1} needs {int(need[row])} KV tokens (prompt + output) but the cache holds"
            f" {capacity}; shorten it or use a device with more memory"
        )
    jitter = draw_jitter(2 * n + int(output.sum()), config.jitter_cv, config.jitter_dist, jitter_rng).tolist()
    first_token = np.empty(n)
    finish = np.empty(n)
    running = np.empty(0, dtype=np.int64)  # request ids
    made = np.empty(0, dtype=np.int64)  # tokens generated so far, per running request
    now, nxt, kv_used, step, busy_weighted = 0.0, 0, 0, 0, 0.0
    arr, need_l = arrival.tolist(), need.tolist()
    while nxt < n or len(running):
        if not len(running) and nxt < n and arr[nxt] > now:
            now = arr[nxt]  # idle until the next arrival
        admitted = []
        while (
            nxt < n
            and arr[nxt] <= now
            and len(running) + len(admitted) < config.max_batch
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
    ttft = first_token - arrival
    latency = finish - arrival
    multi = output > 1
    tpot = (finish[multi] - first_token[multi]) / (output[multi] - 1) if multi.any() else np.zeros(1)
    makespan = max(float(finish.max() - arrival[0]), 1e-300)
    q = lambda x, p: float(np.percentile(x, p))
    return LLMServingResult(
        q(ttft, 50),
        q(ttft, 90),
        q(ttft, 99),
        float(ttft.mean()),
        q(tpot, 50),
        q(tpot, 90),
        q(tpot, 99),
        float(tpot.mean()),
        q(latency, 50),
        q(latency, 99),
        float(latency.mean()),
        n / makespan,
        float(output.sum()) / makespan,
        busy_weighted / makespan,
        n,
        capacity,
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


# ---- step times from the engine ---------------------------------------------------------------------


def _grid(top: int) -> list[int]:
    return sorted({max(1, round(top * f)) for f in np.linspace(1.0 / GRID_POINTS, 1.0, GRID_POINTS)})


class GridTime:
    """(batch, tokens) -> seconds, bilinear on a grid the engine is mapped at once per point."""

    def __init__(self, point: Callable[[int, int], float], batches: list[int], tokens: list[int]):
        self.batches = np.array(batches, dtype=np.float64)
        self.tokens = np.array(tokens, dtype=np.float64)
        self.table = np.array([[point(b, t) for t in tokens] for b in batches])

    def __call__(self, batch: int, tokens: float) -> float:
        by_batch = np.array([np.interp(tokens, self.tokens, row) for row in self.table])
        return float(np.interp(batch, self.batches, by_batch))


def decoder_dims(source) -> Callable[[int, int], dict[str, int]]:
    """(new tokens, cached tokens) -> a decoder's bindings besides batch and seq (which go by the
    shortcuts): every past length (`past`, `past_sequence_length`...) the cached tokens, a total length the
    export declares apart (`total_seq`) their sum, and a merged decoder's branch input the decoder that
    reads the cache. Built-ins and exported files alike (`ModelHandle.roles`)."""
    roles = open_model(source).roles

    def dims(seq: int, past: int) -> dict[str, int]:
        values = {"past": past, "total": past + seq, "branch": 1}
        return {name: values[role] for name, role in roles.items() if role in values}

    return dims


def engine_step_times(source, hw, options, max_batch: int, max_prompt: int, max_context: int):
    """Prefill(batch, prompt length) and decode(batch, context) from the engine on coarse grids."""
    model = open_model(source)
    step_dims = decoder_dims(model)

    def latency(batch: int, seq: int, past: int) -> float:
        workload = model.bind(step_dims(seq, past), batch=batch, seq=seq)
        return map_workload(workload, hw, options).totals.latency_s

    batches = sorted(
        {1, max(1, max_batch // 4), max(1, max_batch // 2), max_batch}
    )  # step time is near-affine in batch
    prefill = GridTime(lambda b, t: latency(b, t, 0), batches, _grid(max_prompt))
    decode = GridTime(lambda b, t: latency(b, 1, t), batches, _grid(max_context))
    return prefill, decode


def kv_capacity_tokens(source, hw, options) -> int:
    """Tokens the KV cache holds: KV_MEMORY_FRACTION of device memory after the weights, over the
    KV bytes per token (the graph's past key/value inputs at the plan precision)."""
    past = 16
    model = open_model(source)
    graph = model.bind(decoder_dims(model)(1, past), batch=1, seq=1).graph
    dtype = model_dtype(graph) if options.dtype == "auto" else options.dtype
    sizer = Sizer(graph, dtype, options.weight_dtype)
    kv = sum(sizer.bytes(graph.tensors[name]) for name in graph.inputs if "past" in name) / past
    if not kv:
        raise MapperError(f"model {graph.name}: no past key/value inputs; LLM serving needs a decoder with a KV cache")
    free = hw.dram_bytes - sum(sizer.bytes(graph.tensors[w]) for w in graph.weights)
    if free <= 0:
        raise MapperError(f"model {graph.name}: the weights do not fit in {hw.name}'s memory; no room for a KV cache")
    return int(KV_MEMORY_FRACTION * free // kv)


def simulate_model_llm_serving(source, hw, options, config: LLMServingConfig) -> LLMServingResult:
    """simulate_llm_serving with the engine's step times, the device's KV capacity and the profile's jitter
    (`source`: a model handle, or what `open_model` takes; opened once for every step mapped)."""
    source = open_model(source)
    validate_llm_config(config)  # before the engine maps the step grid
    if config.jitter_cv is None:
        config = replace(config, jitter_cv=hw.jitter_cv, jitter_dist=config.jitter_dist or hw.jitter_dist)
    if config.kv_capacity_tokens is None:
        config = replace(config, kv_capacity_tokens=kv_capacity_tokens(source, hw, options))
    trace = config.trace
    max_prompt = (
        int(trace.prompt_tokens.max())
        if trace is not None and trace.prompt_tokens is not None
        else config.prompt_tokens
    )
    max_output = (
        int(trace.output_tokens.max())
        if trace is not None and trace.output_tokens is not None
        else config.output_tokens
    )
    prefill, decode = engine_step_times(source, hw, options, config.max_batch, max_prompt, max_prompt + max_output)
    return simulate_llm_serving(prefill, decode, config)


def llm_section(result: LLMServingResult, config: LLMServingConfig) -> dict:
    """The sheet's Serving section for a decoder (JSON-ready)."""
    return {
        "policy": "continuous",
        "max_batch": config.max_batch,
        "offered_rate_per_s": config.rate_per_s,
        "seed": config.seed,
        **{k: getattr(result, k) for k in LLMServingResult.__slots__ if k != "assumptions"},
        "assumptions": list(result.assumptions),
    }


# ---- one serving question, answered as `mapper serve` answers it ----------------------------------


@dataclass(frozen=True, slots=True)
class ServeRequest:
    """What `mapper serve` and the dashboard's Serving page ask about one model: the load and the batching
    (`serving`; its jitter None: the profile's), a decoder's request lengths, and what else to report.
    `decoder=None` decides by the model's dim roles: a KV-cache length ("past") means continuous batching
    with TTFT/TPOT, anything else a request queue with dynamic or static batches."""

    serving: ServingConfig = field(default_factory=ServingConfig)
    prompt_tokens: int = 512  # decoders, where the trace gives none
    output_tokens: int = 128
    decoder: bool | None = None
    service_time_s: float | None = None  # a fixed batch time instead of the engine's (what-if): a request queue
    load_curve: bool = False  # request queue: also sweep offered load up to saturation
    p99_target_s: float | None = None  # with load_curve: the highest rate meeting it


@dataclass(frozen=True, slots=True)
class ServingRun:
    """What serve_model ran: the config it resolved, the result, and the load curve when one was asked."""

    config: ServingConfig | LLMServingConfig
    result: ServingResult | LLMServingResult
    curve: LoadCurve | None = None

    @property
    def continuous(self) -> bool:
        return isinstance(self.result, LLMServingResult)

    def section(self) -> dict:
        """The sheet's Serving section (JSON-ready): what `mapper serve --json` prints."""
        if self.continuous:
            return llm_section(self.result, self.config)
        return serving_section(self.result, self.config, self.curve)


def is_decoder(model) -> bool:
    """Whether `serve_model` serves this model (a handle, or what `open_model` takes) by continuous batching:
    it has a KV-cache length among its dim roles."""
    return "past" in open_model(model).roles.values()


def serve_model(
    model, hw, options, request: ServeRequest = ServeRequest(), dims: dict[str, int] | None = None
) -> ServingRun:
    """Serve `model` (a handle, or what `open_model` takes) on `hw`: continuous batching for a decoder,
    else a request queue whose batch time is the engine's latency at each batch size (`dims`: the other
    bindings). The one place that picks the simulation, so the CLI and the dashboard agree."""
    model = open_model(model)
    s = request.serving
    s = replace(
        s, jitter_cv=hw.jitter_cv if s.jitter_cv is None else s.jitter_cv, jitter_dist=s.jitter_dist or hw.jitter_dist
    )
    decoder = is_decoder(model) if request.decoder is None else request.decoder
    if decoder and request.service_time_s is None:
        config = LLMServingConfig(
            s.max_batch,
            s.rate_per_s,
            s.requests,
            s.seed,
            request.prompt_tokens,
            request.output_tokens,
            None,
            s.jitter_cv,
            s.jitter_dist,
            s.trace,
        )
        return ServingRun(config, simulate_model_llm_serving(model, hw, options, config))
    service = (
        request.service_time_s if request.service_time_s is not None else engine_batch_time(model, dims, hw, options)
    )
    curve = load_curve(service, s, p99_target_s=request.p99_target_s) if request.load_curve else None
    return ServingRun(s, simulate_serving(service, s), curve)
