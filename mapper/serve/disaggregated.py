"""Disaggregated prefill and decode against aggregated serving with chunked prefill, on one workload.

Disaggregated (DistServe, Zhong et al., OSDI 2024; Splitwise, Patel et al., ISCA 2024): prompts prefill on one
device pool, each replica of its own plan; the prefill makes the first token (TTFT); the request's KV cache then
crosses the link between the pools (each device sends its shard: the prompt's tokens x the larger of the two
plans' per-device bytes a token, over the per-device link, plus its latency) and the sequence decodes on the
other pool, under that pool's plan, by continuous batching. Aggregated: every replica of one plan serves both
phases with chunked prefill (Sarathi-Serve, vLLM's default), on as many devices as its replicas take. Requests
are dealt round-robin to replicas (a router without load information), the same arrivals for both; a pool of
attention DP (a mixture of experts' decode pool) deals them to each replica's ranks, each with its own running
batch and KV cache (serve/ranks.py), its step one rank's with the experts at every rank's tokens.

Every step time is the engine's, on each pool's own plan (`serve.steps.engine_step_times`), and each pool's KV
capacity is what its devices have room for under it (`serve.llm.kv_budget`). `tokens_per_s_per_device` puts the
two on one footing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.hardware.profile import HardwareProfile
from mapper.plan.experts import replica_devices
from mapper.serve.chunked import run_chunked
from mapper.serve.continuous import (
    LLMServingConfig,
    LLMServingResult,
    draw_requests,
    timeline_result,
    validate_llm_config,
    workload_text,
)
from mapper.serve.llm import KvBudget, kv_budget, request_lengths
from mapper.serve.scheduler import (
    Jitter,
    Requests,
    Scheduler,
    SchedulerRun,
    StepTime,
    Timeline,
    run_whole_prefill,
)
from mapper.serve.serving import filled_jitter
from mapper.serve.steps import GridTime, engine_step_times, step_grids, step_latency

GB = 1e9


@dataclass(frozen=True, slots=True)
class Pool:
    """A device pool: one plan (TP x PP x EP devices a replica) and how many replicas of it."""

    options: PlanOptions
    replicas: int = 1

    @property
    def devices_per_replica(self) -> int:
        return replica_devices(self.options.tp, self.options.pp, self.options.ep)  # EP rides the TP ranks at tp > 1

    @property
    def devices(self) -> int:
        return self.devices_per_replica * self.replicas

    @property
    def servers(self) -> int:
        """What requests are dealt to: each replica, or under attention DP each of its ranks (its own running batch
        and KV cache: serve/ranks.py)."""
        return self.replicas * self.options.attention_ranks

    def text(self) -> str:
        o = self.options
        plan = f"TP {o.tp}" + (f" x PP {o.pp}" if o.pp > 1 else "") + (f", EP {o.ep}" if o.ep > 1 else "")
        plan += ", attention DP (a rank's own requests and KV cache)" if o.attention_dp else ""
        plan += ", expert TP (each expert sliced over the ranks)" if o.expert_tp else ""
        return f"{self.replicas} x {plan} ({self.devices} devices)"


@dataclass(frozen=True, slots=True)
class Disaggregation:
    """The two pools and the link between them (None: the profile's device link, where both fit one node)."""

    prefill: Pool
    decode: Pool
    kv_link_bytes_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class DisaggregatedRun:
    """Both ways of serving the same requests, and what the disaggregated one's KV transfer cost."""

    disaggregated: LLMServingResult
    aggregated: LLMServingResult
    setup: Disaggregation
    aggregated_pool: Pool
    link_bytes_per_s: float
    transfer_s_per_prompt_token: float
    assumptions: tuple[str, ...]

    def section(self) -> dict:
        """The comparison (JSON-ready): each way's figures, its devices and tokens/s per device."""

        def row(result: LLMServingResult, pools: str, devices: int) -> dict:
            keys = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "latency_p50_s", "latency_p99_s")
            return {
                "pools": pools,
                "devices": devices,
                **{k: getattr(result, k) for k in keys},
                "throughput_tokens_per_s": result.throughput_tokens_per_s,
                "tokens_per_s_per_device": result.throughput_tokens_per_s / devices,
                "kv_capacity_tokens": result.kv_capacity_tokens,
                "preemptions": result.preemptions,
            }

        s = self.setup
        return {
            "disaggregated": row(
                self.disaggregated,
                f"prefill {s.prefill.text()}, decode {s.decode.text()}",
                s.prefill.devices + s.decode.devices,
            ),
            "aggregated": row(
                self.aggregated, f"{self.aggregated_pool.text()}, chunked prefill", self.aggregated_pool.devices
            ),
            "kv_link_bytes_per_s": self.link_bytes_per_s,
            "kv_transfer_s_per_prompt_token": self.transfer_s_per_prompt_token,
            "assumptions": list(self.assumptions),
        }


def kv_link(hw: HardwareProfile, setup: Disaggregation) -> tuple[float, str]:
    """The per-device bandwidth between the pools and where it comes from."""
    if setup.kv_link_bytes_per_s is not None:
        if not (setup.kv_link_bytes_per_s > 0 and np.isfinite(setup.kv_link_bytes_per_s)):
            raise MapperError(f"KV link {setup.kv_link_bytes_per_s!r} B/s must be a positive number")
        return setup.kv_link_bytes_per_s, "given (--kv-link-gbps)"
    devices, node = setup.prefill.devices + setup.decode.devices, hw.interconnect.max_devices
    if devices > node:
        raise MapperError(
            f"the two pools take {devices} devices, over the {node} one {hw.name} node connects: give"
            " --kv-link-gbps, the network between nodes per device (e.g. 50 for a 400 Gb/s NIC a GPU)"
        )
    return hw.interconnect.link_bandwidth_bytes_per_s, f"the device link within one node ({hw.interconnect.topology})"


def _dealt(order: np.ndarray, replicas: int) -> list[np.ndarray]:
    """Request indices per replica, dealt round-robin in `order` (each replica's in that order)."""
    return [order[r::replicas] for r in range(replicas)]


def _sub(reqs: Requests, idx: np.ndarray, arrival: np.ndarray, output: np.ndarray | None = None) -> Requests:
    out = reqs.output[idx] if output is None else output[idx]
    return Requests(arrival[idx], reqs.prompt[idx], out, reqs.page_tokens)


def simulate_disaggregated(
    source, hw: HardwareProfile, options: PlanOptions, config: LLMServingConfig, setup: Disaggregation
) -> DisaggregatedRun:
    """Serve the config's requests both ways (module docstring): disaggregated on `setup`'s pools, aggregated on
    replicas of `options`' plan with chunked prefill taking as many devices as the two pools (at least one)."""
    config = validate_llm_config(config)
    if config.speculative is not None:
        raise MapperError("disaggregated serving with speculative decoding is not modelled; drop one of them")
    for name, pool in (("prefill", setup.prefill), ("decode", setup.decode)):
        if not (isinstance(pool.replicas, int) and 1 <= pool.replicas <= hw.interconnect.max_devices * 64):
            raise MapperError(f"{name} replicas {pool.replicas!r} must be an integer from 1 up")
    link, link_source = kv_link(hw, setup)
    reqs, jitter = _draws(config)
    dis, per_token_s, budgets = _disaggregated(source, hw, setup, reqs, config, jitter, link)
    pool = Pool(options, max(1, (setup.prefill.devices + setup.decode.devices) // Pool(options).devices_per_replica))
    aggregated = _aggregated(source, hw, pool, reqs, config, jitter)
    assumptions = (
        *dis_text(setup, link, link_source, per_token_s, *budgets),
        (
            f"aggregated: {pool.text()}, chunked prefill of {config.chunk_tokens:,} tokens a step,"
            f" {aggregated.kv_capacity_tokens:,} KV tokens a replica"
        ),
        *workload_text(config, len(reqs.arrival)),
        (
            f"up to {config.max_batch} sequences a replica; step times: the engine's on each pool's plan, on a coarse"
            " grid of batch and length, linearly interpolated"
        ),
    )
    return DisaggregatedRun(dis, aggregated, setup, pool, link, per_token_s, assumptions)


def _draws(config: LLMServingConfig) -> tuple[Requests, Callable[[], Jitter]]:
    """The config's requests and each replica's jitter draws (both ways of serving draw from one stream)."""
    arrival_rng, jitter_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2))
    reqs = draw_requests(config, arrival_rng)
    cv, dist = filled_jitter(config.jitter_cv, config.jitter_dist)

    def jitter() -> Jitter:
        return Jitter.for_requests(reqs, cv, dist, jitter_rng)

    return reqs, jitter


def pool_budgets(source, hw: HardwareProfile, setup: Disaggregation, config: LLMServingConfig) -> tuple[KvBudget, ...]:
    """The prefill pool's KV room at a profile run of the longest prompt, the decode pool's at the batch cap's."""
    max_prompt = int(request_lengths(config, lambda a: int(a.max()))[0])
    return kv_budget(source, hw, setup.prefill.options, max_prompt), kv_budget(
        source, hw, setup.decode.options, config.max_batch
    )


def serve_pools(
    hw: HardwareProfile,
    setup: Disaggregation,
    config: LLMServingConfig,
    steps: tuple[StepTime, StepTime],
    budgets: tuple[KvBudget, KvBudget],
) -> tuple[LLMServingResult, float]:
    """The disaggregated half of `simulate_disaggregated` on the caller's step times (the prefill pool's prefill,
    the decode pool's decode, on `step_grids`' points) and pool budgets (`pool_budgets`): the same requests and
    jitter draws, so the same figures (a deployment search passes the steps it already mapped)."""
    config = validate_llm_config(config)
    dis, per_token_s = _pools(hw, setup, _draws(config), config, kv_link(hw, setup)[0], steps, budgets)
    return dis, per_token_s


def _disaggregated(
    source, hw: HardwareProfile, setup: Disaggregation, reqs: Requests, config: LLMServingConfig, jitter, link: float
) -> tuple[LLMServingResult, float, tuple[str, str]]:
    """The requests prefilled on the prefill pool (one token each: TTFT), their caches moved over `link`, decoded on
    the decode pool; with the transfer's seconds a prompt token and the two pools' KV budgets in words."""
    max_prompt, max_output = int(reqs.prompt.max()), int(reqs.output.max())
    p_opts, d_opts = setup.prefill.options, setup.decode.options
    p_budget = kv_budget(source, hw, p_opts, max_prompt)
    d_budget = kv_budget(source, hw, d_opts, config.max_batch)
    batches, prompts, contexts = step_grids(config.max_batch, max_prompt, max_prompt + max_output)
    prefill_step, decode_step = step_latency(source, hw, p_opts), step_latency(source, hw, d_opts)
    prefill_time = GridTime(lambda b, t: prefill_step(b, t, 0), batches, prompts)  # each pool maps its own phase
    decode_time = GridTime(lambda b, t: decode_step(b, 1, t), batches, contexts)
    steps, budgets = (prefill_time, decode_time), (p_budget, d_budget)
    dis, per_token_s = _pools(hw, setup, (reqs, jitter), config, link, steps, budgets)
    return dis, per_token_s, (p_budget.text(), d_budget.text())


def _pools(
    hw: HardwareProfile,
    setup: Disaggregation,
    draws: tuple[Requests, Callable[[], Jitter]],
    config: LLMServingConfig,
    link: float,
    steps: tuple[StepTime, StepTime],
    budgets: tuple[KvBudget, KvBudget],
) -> tuple[LLMServingResult, float]:
    reqs, jitter = draws
    prefill_time, decode_time = steps
    p_budget, d_budget = budgets
    paged = replace(reqs, page_tokens=d_budget.page_tokens)
    _fits(paged, d_budget.tokens, "decode")
    _fits(replace(reqs, output=np.ones_like(reqs.output), page_tokens=p_budget.page_tokens), p_budget.tokens, "prefill")
    n = len(reqs.arrival)
    first_token, finish, busy = np.zeros(n), np.zeros(n), 0.0
    ones = np.ones_like(reqs.output)
    for idx in _dealt(np.arange(n), setup.prefill.servers):  # prompts only: one token each
        run = SchedulerRun(
            prefill_time, decode_time, _sub(paged, idx, reqs.arrival, ones), config.max_batch, p_budget.tokens, jitter()
        )
        first_token[idx] = run_whole_prefill(run, decode_first=False).first_token
    per_token_s = max(p_budget.kv_bytes_per_token, d_budget.kv_bytes_per_token) / link
    ready = first_token + reqs.prompt * per_token_s + hw.interconnect.latency_s
    arrived = lambda b, t: 0.0  # the sequence arrives prefilled: admission runs no prefill step
    for idx in _dealt(np.argsort(ready, kind="stable"), setup.decode.servers):
        run = SchedulerRun(arrived, decode_time, _sub(paged, idx, ready), config.max_batch, d_budget.tokens, jitter())
        timeline = run_whole_prefill(run, decode_first=False)
        finish[idx], busy = timeline.finish, busy + timeline.busy_weighted
    finish = np.where(reqs.output > 1, finish, first_token)
    served = replace(config, kv_capacity_tokens=d_budget.tokens)
    dis = timeline_result(reqs, Timeline(first_token, finish, busy, 0), served, d_budget.tokens)
    return replace(dis, scheduler="disaggregated", assumptions=()), per_token_s


def _fits(reqs: Requests, capacity: int, pool: str) -> None:
    need = reqs.need
    if int(need.max()) > capacity:
        row = int(np.argmax(need > capacity))
        raise MapperError(
            f"request {row + 1} needs {int(need[row])} KV tokens on the {pool} pool, which holds {capacity:,} a"
            " replica; give that pool more devices (its --tp) or shorten the request"
        )


def _aggregated(source, hw, pool: Pool, reqs: Requests, config: LLMServingConfig, jitter) -> LLMServingResult:
    """The same requests on `pool`'s replicas, each serving both phases with chunked prefill."""
    max_prompt, max_output = int(reqs.prompt.max()), int(reqs.output.max())
    budget = kv_budget(source, hw, pool.options, config.chunk_tokens)
    prefill, decode = engine_step_times(
        source, hw, pool.options, config.max_batch, max_prompt, max_prompt + max_output, config.chunk_tokens
    )
    n = len(reqs.arrival)
    first_token, finish, busy, preemptions = np.zeros(n), np.zeros(n), 0.0, 0
    paged = replace(reqs, page_tokens=budget.page_tokens)
    _fits(paged, budget.tokens, "aggregated")
    for idx in _dealt(np.arange(n), pool.servers):
        run = SchedulerRun(prefill, decode, _sub(paged, idx, reqs.arrival), config.max_batch, budget.tokens, jitter())
        t = run_chunked(run, chunk_tokens=config.chunk_tokens)
        first_token[idx], finish[idx] = t.first_token, t.finish
        busy, preemptions = busy + t.busy_weighted, preemptions + t.preemptions
    chunked = replace(config, scheduler=Scheduler.CHUNKED.value, kv_capacity_tokens=budget.tokens)
    result = timeline_result(reqs, Timeline(first_token, finish, busy, preemptions), chunked, budget.tokens)
    return replace(result, assumptions=())


def dis_text(
    setup: Disaggregation, link: float, source: str, per_token_s: float, p_kv: str, d_kv: str
) -> tuple[str, ...]:
    """The disaggregated run's assumptions: its pools, the transfer, each pool's KV budget."""
    return (
        (
            f"disaggregated: prefill on {setup.prefill.text()}, decode on {setup.decode.text()}; requests dealt"
            " round-robin to each pool's replicas (an attention-DP pool's ranks); a prefill step batches the waiting"
            " prompts and makes the first token"
        ),
        (
            f"KV transfer: each device sends its shard over {link / GB:g} GB/s a device ({source}):"
            f" {per_token_s * 1e6:.3f} us a prompt token (the larger plan's per-device bytes a token) plus the link"
            " latency, before decoding"
        ),
        f"prefill pool {p_kv}",
        f"decode pool {d_kv}",
    )
