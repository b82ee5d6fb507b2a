"""Decoder-LLM serving from the engine: step times, KV-cache capacity, and `serve_model`.

Serving for decoders, above the pipeline (docs/manual.md, "LLM serving"): per-step times come from the
engine (prefill at a batch and prompt length, one decode step at a batch and context length) on a coarse grid,
interpolated, and feed the continuous-batching scheduler (serve/continuous.py), which reports TTFT and TPOT.
`serve_model` picks that or a request queue (serve/serving.py) for one model, as `mapper serve` does.
With speculative decoding (serve/speculative.py) the decode step is a speculative round's time per token, from
grids of the draft's decode step and the target's verification step (serve/steps.py), and the KV cache shares
the devices with the draft's weights and cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.result import MappingResult, MemoryPlan
from mapper.handle import open_model
from mapper.pipeline import map_memory
from mapper.plan.runtime import choose_runtime
from mapper.serve.continuous import (
    DEFAULT_CHUNK_TOKENS,
    SCHEDULERS,
    LLMServingConfig,
    LLMServingResult,
    simulate_llm_serving,
    validate_llm_config,
)
from mapper.serve.engine import engine_batch_time
from mapper.serve.load_curve import LoadCurve, load_curve, serving_section
from mapper.serve.ranks import over_ranks, rank_config
from mapper.serve.scheduler import Scheduler
from mapper.serve.serving import ServingConfig, ServingResult, simulate_serving
from mapper.serve.speculative import SpeculativeConfig
from mapper.serve.steps import decoder_dims, engine_step_times, open_draft, speculative_step_times

# The share of each device's memory the serving engine may hold: weights, the activation reserve and the KV cache
# (vLLM's `gpu_memory_utilization`, 0.9 by default; the rest is the CUDA context, other processes, fragmentation)
KV_MEMORY_FRACTION = 0.9


@dataclass(frozen=True, slots=True)
class KvBudget:
    """A device's KV-cache room under a plan, and the three inputs it is computed from: what the device may hold
    (KV_MEMORY_FRACTION of its memory), less the weights it holds and the activation reserve of a profile run
    at the scheduler's token budget (vLLM profiles one forward pass at its batched-token budget and keeps its
    peak), over the KV bytes one token adds on the device. Per device: under TP each holds 1/tp of the heads'
    cache and of the split weights, under PP 1/pp of the layers (`schedule.memory.plan_memory`)."""

    usable_bytes: float  # KV_MEMORY_FRACTION x the device's memory
    weight_bytes: float  # the weights one device holds under the plan
    activation_bytes: float  # the profile run's activation peak on one device
    kv_bytes_per_token: float  # the cache one more token takes on one device
    token_budget: int  # tokens of the profile run (the scheduler's largest step)
    page_tokens: int = 0  # tokens a block of the runtime's paged cache holds (0: contiguous): whole pages only
    draft: str = ""  # speculative decoding's draft on the same devices, where there is one
    draft_weight_bytes: float = 0.0  # the draft's weights on one device
    draft_kv_bytes_per_token: float = 0.0  # the draft's cache of one more token on one device

    @property
    def tokens(self) -> int:
        free = self.usable_bytes - self.weight_bytes - self.draft_weight_bytes - self.activation_bytes
        tokens = int(free // (self.kv_bytes_per_token + self.draft_kv_bytes_per_token))
        return tokens // self.page_tokens * self.page_tokens if self.page_tokens > 1 else tokens

    def text(self) -> str:
        """The derivation, for the serving assumptions."""
        gb = 1e9
        pages = f" ({self.tokens // self.page_tokens:,} pages of {self.page_tokens})" if self.page_tokens > 1 else ""
        draft = f" - draft {self.draft}'s weights {self.draft_weight_bytes / gb:.2f} GB" if self.draft else ""
        run = ", the larger model's" if self.draft else ""
        per_token = f"{self.kv_bytes_per_token:,.0f}" + (
            f" + {self.draft_kv_bytes_per_token:,.0f} (draft)" if self.draft else ""
        )
        return (
            f"KV cache per device: {KV_MEMORY_FRACTION:g} x memory {self.usable_bytes / KV_MEMORY_FRACTION / gb:.1f}"
            f" GB - weights {self.weight_bytes / gb:.2f} GB{draft} - activations {self.activation_bytes / gb:.2f} GB"
            f" (a {self.token_budget:,}-token profile run{run}) = {self.tokens:,} tokens{pages} at {per_token} B per"
            " token"
        )


def kv_page_tokens(model, hw, options) -> int:
    """Tokens a block of the runtime's paged KV cache holds (`plan.runtime`'s preset for this model and plan)."""
    graph = model.bind(decoder_dims(model)(1, 1), batch=1, seq=1).graph
    return choose_runtime(graph, hw, options).decode_attention.page_tokens


def cache_memory(plan: MemoryPlan | None, model_name: str) -> MemoryPlan:
    """A step's memory plan, refused in one line where the model keeps no KV cache (not a decoder)."""
    if plan is None or plan.kv_cache_bytes <= 0:
        raise MapperError(f"model {model_name}: no KV cache; LLM serving needs a decoder with one")
    return plan


def device_budget(hw, one: MemoryPlan, profile: MemoryPlan, token_budget: int, page_tokens: int) -> KvBudget:
    """A device's KV budget from a plan's one-token step (nothing cached: the parameters alone, a long step also
    folds length-sized constants, and the cache one token adds) and its profile run (the activation peak at the
    token budget)."""
    return KvBudget(
        KV_MEMORY_FRACTION * hw.dram_bytes,
        one.weight_bytes,
        profile.activation_bytes,
        one.kv_cache_bytes,
        token_budget,
        page_tokens,
    )


def _memory(model, hw, options, tokens: int) -> MemoryPlan:
    """The plan's memory at a prefill of `tokens` tokens with nothing cached."""
    dims = decoder_dims(model)
    return cache_memory(map_memory(model.bind(dims(tokens, 0), batch=1, seq=tokens), hw, options), model.name)


def kv_budget(source, hw, options, token_budget: int, draft=None) -> KvBudget:
    """The KV-cache room of one device under `options`' TP x PP (x EP): the plan's memory at a profile run (a
    prefill of `token_budget` tokens, nothing cached) mapped as every other step is (`KvBudget`). `draft`: a
    speculative draft on the same devices under the same plan, its weights and its cache of every token held
    beside the target's (the two run one after the other: the activation reserve is the larger profile run's)."""
    model = open_model(source)
    one, profile = _memory(model, hw, options, 1), _memory(model, hw, options, token_budget)
    budget = device_budget(hw, one, profile, token_budget, kv_page_tokens(model, hw, options))
    if draft is not None:
        draft = open_model(draft)
        d_one, d_profile = _memory(draft, hw, options, 1), _memory(draft, hw, options, token_budget)
        budget = replace(
            budget,
            activation_bytes=max(budget.activation_bytes, d_profile.activation_bytes),
            draft=draft.source or draft.name,
            draft_weight_bytes=d_one.weight_bytes,
            draft_kv_bytes_per_token=d_one.kv_cache_bytes,
        )
    if budget.tokens < 1:
        weights = budget.weight_bytes + budget.draft_weight_bytes
        raise MapperError(
            f"model {model.name} on {hw.name}: {weights / 1e9:.1f} GB of weights"
            f"{' (target and draft)' if draft is not None else ''} and {budget.activation_bytes / 1e9:.1f} GB of"
            f" activations per device leave no room for a KV cache in {KV_MEMORY_FRACTION:g} x"
            f" {hw.dram_bytes / 1e9:.0f} GB; raise --tp or --pp"
        )
    return budget


def kv_capacity_tokens(source, hw, options, token_budget: int) -> int:
    """Tokens one device's KV cache holds under the plan (`kv_budget`)."""
    return kv_budget(source, hw, options, token_budget).tokens


def simulate_model_llm_serving(source, hw, options, config: LLMServingConfig) -> LLMServingResult:
    """simulate_llm_serving with the engine's step times, the device's KV capacity and the profile's jitter
    (`source`: a model handle, or what `open_model` takes; opened once for every step mapped)."""
    chunk = config.chunk_tokens if config.scheduler == Scheduler.CHUNKED else None
    ranks = options.attention_ranks  # attention DP: one rank served, its share of the requests (serve/ranks.py)
    config, prefill, decode, steps = _engine_inputs(open_model(source), hw, options, rank_config(config, ranks), chunk)
    result = over_ranks(simulate_llm_serving(prefill, decode, config), ranks)
    if steps is None:
        return result
    return replace(result, speculative=steps.at(round(result.mean_running) or 1, _mean_context(config)))


def request_lengths(config: LLMServingConfig, reduce: Callable[[np.ndarray], float]) -> tuple[float, float]:
    """(prompt, output) tokens of the config's requests: `reduce` (max, mean) over the trace's lengths where it
    gives them, else the config's own."""
    trace = config.trace
    prompt = (
        reduce(trace.prompt_tokens) if trace is not None and trace.prompt_tokens is not None else config.prompt_tokens
    )
    output = (
        reduce(trace.output_tokens) if trace is not None and trace.output_tokens is not None else config.output_tokens
    )
    return prompt, output


def _mean_context(config: LLMServingConfig) -> float:
    """The mean context of a decode step: the prompt and half the output (the trace's means where it gives them)."""
    prompt, output = request_lengths(config, lambda a: float(a.mean()))
    return prompt + output / 2


def compare_schedulers(source, hw, options, config: LLMServingConfig) -> tuple[LLMServingResult, ...]:
    """The same requests (trace or seed) served by each scheduler, on one set of engine step times."""
    if config.speculative is not None:
        raise MapperError(
            "--compare-schedulers serves chunked prefill too, which speculative decoding is not modelled beside;"
            " drop one of them"
        )
    ranks = options.attention_ranks
    config, prefill, decode, _ = _engine_inputs(
        open_model(source), hw, options, rank_config(config, ranks), config.chunk_tokens
    )
    return tuple(
        over_ranks(simulate_llm_serving(prefill, decode, replace(config, scheduler=s)), ranks) for s in SCHEDULERS
    )


def _engine_inputs(source, hw, options, config: LLMServingConfig, chunk_tokens: int | None):
    """The config with the profile's jitter and the device's KV capacity filled in, and the engine's prefill
    and decode step times over the lengths it will ask for (prompts, or chunks where those are longer); with
    speculative decoding, a round's time per token as the decode step, and the steps it is made of."""
    spec = validate_llm_config(config).speculative  # before the engine maps the step grid
    draft = open_draft(spec) if spec is not None else None
    if config.jitter_cv is None:
        config = replace(config, jitter_cv=hw.jitter_cv, jitter_dist=config.jitter_dist or hw.jitter_dist)
    max_prompt, max_output = (int(n) for n in request_lengths(config, lambda a: int(a.max())))
    if config.kv_capacity_tokens is None:  # the room the plan leaves on each device (`KvBudget`)
        budget = kv_budget(source, hw, options, chunk_tokens or max_prompt, draft)
        config = replace(
            config,
            kv_capacity_tokens=budget.tokens,
            kv_capacity_source=budget.text(),
            kv_page_tokens=budget.page_tokens,
        )
    if spec is not None and draft is not None:
        spec = replace(spec, draft=draft)  # opened once for every step mapped
        steps = speculative_step_times(source, spec, hw, options, config.max_batch, max_prompt, max_prompt + max_output)
        return config, steps.prefill, steps.decode, steps
    prefill, decode = engine_step_times(
        source, hw, options, config.max_batch, max_prompt, max_prompt + max_output, chunk_tokens
    )
    return config, prefill, decode, None


def llm_section(result: LLMServingResult, config: LLMServingConfig) -> dict:
    """The sheet's Serving section for a decoder (JSON-ready)."""
    return {
        "policy": "continuous",
        "max_batch": config.max_batch,
        "offered_rate_per_s": config.rate_per_s,
        "seed": config.seed,
        **{k: getattr(result, k) for k in LLMServingResult.__slots__ if k not in ("assumptions", "speculative")},
        **({"speculative": result.speculative} if result.speculative is not None else {}),
        "assumptions": list(result.assumptions),
    }


# ---- one serving question, answered as `mapper serve` answers it ----------------------------------


DEFAULT_OUTPUT_TOKENS = 128  # a decoder's output tokens per request where neither the trace nor the user gives them


@dataclass(frozen=True, slots=True)
class ServeRequest:
    """What `mapper serve` and the dashboard's Serving page ask about one model: the load and the batching
    (`serving`; its jitter None: the profile's), a decoder's request lengths, and what else to report.
    `decoder=None` decides by the model's dim roles: a KV-cache length ("past") means continuous batching
    with TTFT/TPOT, anything else a request queue with dynamic or static batches."""

    serving: ServingConfig = field(default_factory=ServingConfig)
    prompt_tokens: int = 512  # decoders, where the trace gives none
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    decoder: bool | None = None
    service_time_s: float | None = None  # a fixed batch time instead of the engine's (what-if): a request queue
    load_curve: bool = False  # request queue: also sweep offered load up to saturation
    p99_target_s: float | None = None  # with load_curve: the highest rate meeting it
    scheduler: str = Scheduler.PREFILL_FIRST.value  # decoders: prefill-first | decode-first | chunked
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS  # decoders, chunked: prompt tokens per step
    compare_schedulers: bool = False  # decoders: also serve the same requests by every scheduler
    speculative: SpeculativeConfig | None = None  # decoders: speculative decoding (serve/speculative.py); None: off
    # Serve the batch the user mapped (its batch dim in `dims`): a request queue of static batches of that
    # size, a decoder with that many sequences; the serving config's own max batch and policy otherwise.
    follow_mapped_batch: bool = False


@dataclass(frozen=True, slots=True)
class ServingRun:
    """What serve_model ran: the config it resolved, the result, and the load curve when one was asked."""

    config: ServingConfig | LLMServingConfig
    result: ServingResult | LLMServingResult
    curve: LoadCurve | None = None
    schedulers: tuple[LLMServingResult, ...] = ()  # decoders: the same requests by every scheduler, when asked

    @property
    def continuous(self) -> bool:
        return isinstance(self.result, LLMServingResult)

    def section(self) -> dict:
        """The sheet's Serving section (JSON-ready): what `mapper serve --json` prints."""
        result, config = self.result, self.config
        if isinstance(result, LLMServingResult) and isinstance(config, LLMServingConfig):  # `continuous`
            section = llm_section(result, config)
            if self.schedulers:
                section["schedulers"] = [scheduler_row(r) for r in self.schedulers]
            return section
        if isinstance(result, ServingResult) and isinstance(config, ServingConfig):
            return serving_section(result, config, self.curve)
        raise TypeError("a serving run pairs a config and a result of one kind (both continuous or neither)")


SCHEDULER_COLUMNS = tuple(
    f"{measure}_{p}_s" for measure in ("ttft", "tpot", "latency") for p in ("p50", "p90", "p99")
) + ("throughput_tokens_per_s", "mean_running", "preemptions")


def scheduler_row(result: LLMServingResult) -> dict:
    """One scheduler's figures in the comparison (JSON-ready)."""
    return {"scheduler": result.scheduler, **{k: getattr(result, k) for k in SCHEDULER_COLUMNS}}


def is_decoder(model) -> bool:
    """Whether `serve_model` serves this model (a handle, or what `open_model` takes) by continuous batching:
    it has a KV-cache length among its dim roles."""
    return "past" in open_model(model).roles.values()


def mapped_batch(model, dims: dict[str, int] | None) -> int | None:
    """The batch the bindings map (the first dim whose role is batch), or None where they give none."""
    batch = [dims[name] for name, role in model.roles.items() if role == "batch" and dims and name in dims]
    return batch[0] if batch else None


def follow_batch(config: ServingConfig, batch: int | None, decoder: bool) -> ServingConfig:
    """The serving config at the mapped batch: a decoder runs that many sequences; a request queue batches
    dynamically up to it (a server does not hold a lone request for a full batch: at a light load a batch is
    what has arrived, each size's service time the engine's latency at that size)."""
    if batch is None or batch < 1:
        return config
    if decoder:
        return replace(config, max_batch=batch)
    return replace(config, policy="dynamic", max_batch=batch)


def serve_model(
    model,
    hw,
    options,
    request: ServeRequest = ServeRequest(),
    dims: dict[str, int] | None = None,
    mapped: MappingResult | None = None,
) -> ServingRun:
    """Serve `model` (a handle, or what `open_model` takes) on `hw`: continuous batching for a decoder,
    else a request queue whose batch time is the engine's latency at each batch size (`dims`: the other
    bindings; `mapped`: a mapping already made, whose batch a request queue then does not map again).
    The one place that picks the simulation, so the CLI and the dashboard agree."""
    model = open_model(model)
    s = request.serving
    s = replace(
        s, jitter_cv=hw.jitter_cv if s.jitter_cv is None else s.jitter_cv, jitter_dist=s.jitter_dist or hw.jitter_dist
    )
    decoder = is_decoder(model) if request.decoder is None else request.decoder
    if request.follow_mapped_batch:
        s = follow_batch(s, mapped_batch(model, dims), decoder)
    if request.speculative is not None and not (decoder and request.service_time_s is None):
        raise MapperError(
            f"speculative decoding applies to a decoder served by continuous batching; {model.name} is served as a"
            " request queue here"
        )
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
            request.scheduler,
            request.chunk_tokens,
            speculative=request.speculative,
        )
        if request.compare_schedulers:
            runs = compare_schedulers(model, hw, options, config)
            return ServingRun(config, runs[SCHEDULERS.index(config.scheduler)], schedulers=runs)
        return ServingRun(config, simulate_model_llm_serving(model, hw, options, config))
    service = (
        request.service_time_s
        if request.service_time_s is not None
        else engine_batch_time(model, dims, hw, options, mapped)
    )
    curve = load_curve(service, s, p99_target_s=request.p99_target_s) if request.load_curve else None
    return ServingRun(s, simulate_serving(service, s), curve)
