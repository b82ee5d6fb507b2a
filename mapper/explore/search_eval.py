"""Serving one plan of a deployment search at each batch cap and chunk (mapper/explore/search.py runs every plan).

A configuration is a plan (TP x PP x EP, precisions, launch), a batch cap and a chunk, served by continuous
batching with chunked prefill (vLLM's default) on the engine's step times (`search_steps.PlanSteps`). Its load:

- with a rate for the fleet, the fewest replicas of the plan that serve it within the SLA (each replica takes
  rate / replicas, Poisson; a replica the analytic capacity says is overloaded is not simulated), so tokens/s per
  device is what the rate needs of the devices it takes;
- without one, every replica the fleet holds, each at `load` x its own saturation rate at that cap and chunk
  (`serve.continuous.llm_capacity_per_s`: a request's prefill plus its share of full-batch decode steps).

Figures: output tokens/s per device, tokens/s per user (1 / mean TPOT), TTFT/TPOT/request p99, energy per
output token (the decode step's energy at the grid batch nearest the mean running batch, per sequence, plus the
prompt's prefill spread over the output), and the first SLA check it fails with its figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.targets import Targets
from mapper.core.units import overload_sentence
from mapper.explore.search_space import Plan, Pruned, SearchSpec
from mapper.explore.search_steps import LazyGrid, PlanSteps
from mapper.serve.continuous import LLMServingConfig, LLMServingResult, llm_capacity_per_s, simulate_llm_serving
from mapper.serve.llm import KvBudget
from mapper.serve.ranks import over_ranks
from mapper.serve.scheduler import Requests, Scheduler, StepTime


@dataclass(frozen=True, slots=True)
class Point:
    """One served configuration and its figures."""

    plan: Plan
    max_batch: int
    chunk_tokens: int
    rate_per_s: float  # requests/s each replica was offered
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    ttft_p99_s: float
    tpot_p99_s: float
    latency_p99_s: float
    energy_per_token_j: float
    kv_capacity_tokens: int
    mean_running: float
    failure: str  # "" when it meets every target, else the first it misses with its figure

    @property
    def feasible(self) -> bool:
        return not self.failure

    @property
    def label(self) -> str:
        chunk = f" chunk {self.chunk_tokens}" if self.chunk_tokens else ""
        return f"{self.plan.text()} batch {self.max_batch}{chunk}"

    def row(self) -> dict:
        o, plan = self.plan.options, self.plan
        p, draft = plan.prefill, plan.speculative
        return {
            "deployment": str(plan.deployment),
            "tp": o.tp,
            "pp": o.pp,
            "ep": o.ep,
            "attention_dp": o.attention_dp,
            "expert_tp": o.expert_tp,
            "dtype": str(o.dtype),
            "weight_dtype": str(o.weight_dtype),
            "kv_dtype": str(o.kv_dtype),
            "launch": str(o.launch),
            "prefill_tp": None if p is None else p.tp,
            "prefill_replicas": None if p is None else plan.pools[0],
            "decode_replicas": None if p is None else plan.pools[1],
            "draft": None if draft is None else draft.draft_name,
            "draft_tokens": None if draft is None else draft.draft_tokens,
            "replicas": self.plan.replicas,
            "devices": self.plan.replicas * self.plan.devices_per_replica,
            "max_batch": self.max_batch,
            "chunk_tokens": self.chunk_tokens,
            "rate_per_s_per_replica": self.rate_per_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "ttft_p99_s": self.ttft_p99_s,
            "tpot_p99_s": self.tpot_p99_s,
            "latency_p99_s": self.latency_p99_s,
            "energy_per_token_j": self.energy_per_token_j,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "mean_running": self.mean_running,
            "meets_sla": self.feasible,
            "failure": self.failure,
        }


def first_failure(targets: Targets, result: LLMServingResult) -> str:
    """The first target the run misses, in words with its figure ("" when it meets them all)."""
    if result.overload:
        return f"overloaded: {result.overload}"
    section = {"policy": "continuous", **{k: getattr(result, k) for k in ("ttft_p99_s", "tpot_p99_s", "latency_p99_s")}}
    for check in targets.checks(section):
        if not check.met:
            return f"misses {check.label}: {check.value_s * 1e3:.1f} ms (target {check.target_s * 1e3:g} ms)"
    return ""


def requests_at(spec: SearchSpec, cap: int) -> int:
    """Requests simulated at a cap: the spec's, down to a quarter of them (at least 16 a batch slot) at the
    smallest caps, whose runs take one step per token and are never the throughput end of the frontier."""
    return min(spec.requests, max(spec.requests // 4, 16 * cap))


def serving_config(spec: SearchSpec, hw, budget: KvBudget, cap: int, chunk: int, rate: float) -> LLMServingConfig:
    """The config `simulate_model_llm_serving` builds for the same request (its jitter the profile's)."""
    return LLMServingConfig(
        cap,
        rate,
        requests_at(spec, cap),
        spec.seed,
        spec.prompt_tokens,
        spec.output_tokens,
        budget.tokens,
        hw.jitter_cv,
        hw.jitter_dist,
        None,
        Scheduler.CHUNKED.value,
        chunk,
        kv_capacity_source=budget.text(),
        kv_page_tokens=budget.page_tokens,
    )


class PlanServer:
    """One aggregated plan's configurations served on its shared steps (chunked prefill, each chunk of the spec).
    The disaggregated and speculative servers (search_pools) answer the same calls on their own steps."""

    def __init__(self, steps: PlanSteps, plan: Plan, spec: SearchSpec):
        self.steps, self.plan, self.spec, self.hw = steps, plan, spec, steps.hw
        self.context = spec.prompt_tokens + spec.output_tokens
        self._budgets: dict[int, KvBudget] = {}
        self._grids: dict[tuple[int, int], tuple] = {}
        self.floor_tokens_per_s_per_device = 0.0  # a configuration bounded below it is not served (`bound_cut`)

    @property
    def ranks(self) -> int:
        """Ranks one simulated run stands for: attention DP's, each with requests of its own (serve/ranks.py)."""
        return self.plan.options.attention_ranks

    @property
    def chunks(self) -> tuple[int, ...]:
        """The scheduler's chunk choices (0: a scheduler without chunks)."""
        return self.spec.chunks

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a decode step yields per sequence (the roofline bound's divisor)."""
        return 1.0

    def budget(self, chunk: int) -> KvBudget:
        if chunk not in self._budgets:
            self._budgets[chunk] = self.steps.kv_budget(chunk)
        return self._budgets[chunk]

    def sequences(self, chunk: int) -> int:
        """Requests the KV cache holds whole (prompt + output, in whole pages)."""
        b = self.budget(chunk)
        need = self.context if b.page_tokens <= 1 else -(-self.context // b.page_tokens) * b.page_tokens
        return b.tokens // need

    def step_times(self, cap: int, chunk: int) -> tuple[StepTime, StepTime]:
        """The prefill and decode step times the scheduler runs at this cap and chunk (kept: the capacity, the
        run and the energy read the same grids, each grid keeping the rows it interpolated)."""
        key = (cap, chunk)
        if key not in self._grids:
            self._grids[key] = self.grids_at(cap, chunk)
        return self._grids[key]

    def grids_at(self, cap: int, chunk: int) -> tuple[StepTime, StepTime]:
        return self.steps.grids(cap, self.spec.prompt_tokens, self.context, chunk)

    def capacity_per_s(self, cap: int, chunk: int) -> float:
        prefill, decode = self.step_times(cap, chunk)
        one = np.ones(1, dtype=np.int64)
        reqs = Requests(np.zeros(1), one * self.spec.prompt_tokens, one * self.spec.output_tokens)
        return self.ranks * llm_capacity_per_s(prefill, decode, reqs, cap, self.budget(chunk).tokens)

    def simulate(self, cap: int, chunk: int, rate: float) -> LLMServingResult:
        prefill, decode = self.step_times(cap, chunk)
        config = serving_config(self.spec, self.hw, self.budget(chunk), cap, chunk, rate)
        return simulate_llm_serving(prefill, decode, config)

    def energy_per_token_j(self, cap: int, chunk: int, running: float) -> float:
        spec = self.spec
        decode = self.step_times(cap, chunk)[1]
        assert isinstance(decode, LazyGrid)  # an aggregated plan's decode grid
        context = min(decode.tokens, key=lambda t: abs(t - (spec.prompt_tokens + spec.output_tokens / 2)))
        return self.steps.energy_per_token_j(decode, running, context, spec.prompt_tokens, spec.output_tokens)

    def serve(self, cap: int, chunk: int, replicas: int, rate: float) -> Point:
        """One replica at `rate` requests/s, its figures scaled to the plan's devices (attention DP: one rank at its
        share, the replica's throughput the ranks')."""
        result = over_ranks(self.simulate(cap, chunk, rate / self.ranks), self.ranks)
        plan = replace(self.plan, replicas=replicas)
        return Point(
            plan,
            cap,
            chunk,
            rate,
            result.throughput_tokens_per_s / plan.devices_per_replica,
            1.0 / result.tpot_mean_s if result.tpot_mean_s > 0 else 0.0,
            result.ttft_p99_s,
            result.tpot_p99_s,
            result.latency_p99_s,
            self.energy_per_token_j(cap, chunk, result.mean_running),
            result.kv_capacity_tokens,
            result.mean_running,
            first_failure(self.spec.targets, result),
        )

    def at_rate(self, cap: int, chunk: int) -> Point | None:
        """The fleet's rate on the fewest replicas that meet the SLA (else the most the fleet holds)."""
        top = max(1, self.spec.devices // self.plan.devices_per_replica)
        capacity, rate = self.capacity_per_s(cap, chunk), self.spec.rate_per_s or 0.0
        first = max(1, int(np.ceil(rate / capacity))) if capacity > 0 else top
        point = None
        for replicas in range(min(first, top), top + 1):
            point = self.serve(cap, chunk, replicas, rate / replicas)
            if point.feasible:
                return point
        if point is not None and first > top:
            over = overload_sentence(rate / top, capacity)
            return replace(point, failure=f"overloaded: {over}")
        return point

    def bound_cut(self, cap: int, chunk: int) -> str:
        """Why this cap is not served ("" where it is): without a rate, a configuration is served at a share of
        its saturation rate, so its tokens/s per device is at most that rate's output tokens over its devices; under
        the floor (the best aggregated configuration meeting the SLA) it can never be chosen."""
        floor = self.floor_tokens_per_s_per_device
        if self.spec.rate_per_s is not None or floor <= 0:
            return ""
        per_device = self.spec.output_tokens / self.plan.devices_per_replica
        ceiling = self.capacity_ceiling_per_s() * per_device  # one prefill mapped for every cap and chunk
        if ceiling < floor:
            return (
                f"at most {ceiling:,.0f} tok/s/device at saturation (a prompt's prefill alone), under the aggregated"
                f" choice's {floor:,.0f}"
            )
        bound = self.capacity_per_s(cap, chunk) * per_device
        if bound >= floor:
            return ""
        return f"at most {bound:,.0f} tok/s/device at saturation, under the aggregated choice's {floor:,.0f}"

    def capacity_ceiling_per_s(self) -> float:
        """At least `capacity_per_s` at every cap and chunk, from one mapped step: a request costs its prompt's
        prefill at batch 1 (a grid point of every cap's and chunk's prefill grid) plus its share of decode steps,
        which are never negative, so the prefill alone bounds the rate (inf where there is no such bound)."""
        prefill = self.prefill_one_s()
        return self.ranks * (1.0 / prefill) if prefill > 0 else math.inf  # as capacity_per_s rounds it

    def prefill_one_s(self) -> float:
        """The prefill of one prompt the capacity reads (`llm_capacity_per_s`: the prefill grid at batch 1)."""
        return self.steps.latency(1, self.spec.prompt_tokens, 0)

    def at_load(self, cap: int, chunk: int) -> Point:
        """Every replica the fleet holds, each at the spec's share of its saturation rate."""
        replicas = max(1, self.spec.devices // self.plan.devices_per_replica)
        return self.serve(cap, chunk, replicas, self.spec.load * self.capacity_per_s(cap, chunk))


def plan_prune(server: PlanServer) -> Pruned | None:
    """Capacity (one request's KV cache must fit beside the weights) and the TPOT roofline bound at batch 1."""
    spec, hw, what = server.spec, server.hw, server.plan.text()
    try:
        held = max(server.sequences(c) for c in server.chunks)
    except MapperError as e:
        return Pruned(what, "capacity", str(e))
    if held < 1:
        b = server.budget(min(server.chunks))
        return Pruned(
            what,
            "capacity",
            f"{b.weight_bytes / 1e9:.1f} GB of weights and {b.activation_bytes / 1e9:.1f} GB of activations a device"
            f" leave no room for a {server.context:,}-token request's KV cache in {b.usable_bytes / 1e9:.0f} GB",
        )
    target = spec.targets.tpot_p99_s
    weights = server.budget(server.chunks[0]).weight_bytes
    bound = weights / hw.dram_bandwidth_bytes_per_s / server.tokens_per_step
    if target is not None and bound > target:
        per = "" if server.tokens_per_step == 1 else f" over {server.tokens_per_step:.2f} tokens a round"
        return Pruned(
            what,
            "roofline",
            f"a decode step reads {weights / 1e9:.1f} GB of weights a device:"
            f" at least {bound * 1e3:.1f} ms{per} at {hw.dram_bandwidth_bytes_per_s / 1e12:.2f} TB/s, over TPOT"
            f" {target * 1e3:g} ms",
        )
    return None


SATURATED = 1.03  # a doubled cap that adds less than 3% tokens/s per device ends a plan's caps (load mode)


def serve_plan(server: PlanServer) -> tuple[list[Point], list[Pruned]]:
    """Every cap and chunk of one plan that passed `plan_prune`, caps ascending: caps above the requests the
    cache holds whole are pruned (they serve as the first cap that holds them all, adding only preemptions);
    after a cap that misses TPOT the larger ones are not served (a larger batch only slows the decode step), nor,
    without a rate, after a cap whose doubling gained under 3% tokens/s per device (the engine is saturated)."""
    points, pruned = [], []
    for chunk in server.chunks:
        served, cut = _serve_chunk(server, chunk)
        points += served
        pruned += cut
    return points, pruned


def _serve_chunk(server: PlanServer, chunk: int) -> tuple[list[Point], list[Pruned]]:
    spec, what = server.spec, server.plan.text()
    try:
        held = server.sequences(chunk)
    except MapperError as e:
        return [], [Pruned(f"{what} chunk {chunk}", "capacity", str(e))]
    if held < 1:
        return [], [Pruned(f"{what} chunk {chunk}", "capacity", "the KV cache holds no whole request")]
    caps = sorted(spec.caps)
    first_over = next((c for c in caps if c >= held), caps[-1])
    points: list[Point] = []
    pruned: list[Pruned] = []
    stop: tuple[str, str] | None = None
    for cap in caps:
        name = f"{what} batch {cap}" + (f" chunk {chunk}" if chunk else "")
        if cap > first_over:
            pruned.append(
                Pruned(name, "batch-cap", f"the KV cache holds {held} whole requests: serves as {first_over}")
            )
            continue
        if stop is not None:
            pruned.append(Pruned(name, *stop))
            continue
        try:
            cut = server.bound_cut(cap, chunk)
            if cut:
                pruned.append(Pruned(name, "bound", cut))
                continue
            point = server.at_rate(cap, chunk) if spec.rate_per_s is not None else server.at_load(cap, chunk)
        except MapperError as e:  # a pool whose KV cache holds no whole request at this cap
            pruned.append(Pruned(name, "capacity", str(e)))
            continue
        if point is None:
            continue
        if point.failure.startswith("misses TPOT"):
            stop = ("tpot-rises", f"batch {cap} already misses TPOT ({point.tpot_p99_s * 1e3:.1f} ms)")
        elif (
            spec.rate_per_s is None
            and points
            and point.tokens_per_s_per_device < SATURATED * points[-1].tokens_per_s_per_device
        ):
            stop = ("saturated", f"batch {cap} gained under 3% tokens/s per device over batch {points[-1].max_batch}")
        points.append(point)
    return points, pruned
