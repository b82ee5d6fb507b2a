"""Deployment search under a latency target: the best plan for a model, a fleet and an SLA, and why.

Given a decoder, a profile, N devices, a workload (prompt and output tokens, a rate or none) and an SLA (TTFT,
TPOT or request-latency p99), which deployment serves the most output tokens per second per device, what is
the frontier, and what flips the choice. Stages, each a function over typed records:

1. The space (`search_space.plan_options`): TP 1/2/4/8 x PP 1/2/4 (x EP where the model has routed experts: over
   the TP ranks, or over devices of their own with attention data parallelism, each rank its own requests and KV
   cache; EP beside replicated attention is not deployed by any runtime and not searched),
   compute, weight and KV-cache precisions, launch mode; per plan, batch caps 1-512 in powers of two and the
   chunked scheduler's chunk; replicas fill the fleet (with a rate: the fewest that meet the SLA). Beside the
   aggregated plans: prefill and decode pools over one node, and each plan with a speculative draft where one
   is given (`search_pools`). A model without a KV cache searches precision and batch cap under a request p99
   instead (`search_queue`).
2. Prune before serving (`search_space.structural_prune`, `search_eval.plan_prune`): devices and one node's
   link, precisions the profile lacks, EP that does not split the experts, capacity (weights + one request's KV
   cache on a device: the KV budget `mapper serve` uses), the TPOT roofline bound (a decode step reads the
   per-device weights at the profile's bandwidth at least), caps above the requests the cache holds whole,
   and (without a rate) a derived configuration whose saturation throughput is under the best aggregated
   configuration meeting the SLA. Each pruned entry keeps its reason.
3. Evaluate (`search_eval`): each configuration served by continuous batching with chunked prefill on the
   engine's step times. One parsed model serves every plan (`mapper.open_model`: the handle keeps per-structure
   work), its bound steps kept across plans; each plan maps a step once and only where the scheduler reads
   beside it (`search_steps`), on the grids `mapper serve` lays, so a configuration's figures are the ones its
   `mapper serve` command prints; a pool reads the steps of the aggregated plan with its options.
4. Answer (`SearchResult`): the Pareto frontier of tokens/s per device against tokens/s per user, the best
   configuration meeting the SLA, the first failure of the configurations one step beside it, which target
   moves the choice and where, and the `mapper serve` command of the chosen plan (one replica at its share).

Not searched here: attention data parallelism beside TP > 1 (SGLang's --dp below --tp), pools over nodes or with
PP/EP, a trace of arrivals. The plans run through the sweep's executors (a process pool gives the same answer;
Dask untested).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, replace

from mapper.core.options import PlanOptions
from mapper.core.targets import TARGET_ROWS, Targets
from mapper.core.vocab import PlanDtype
from mapper.explore.executors import ExecutorSpec, run_tasks, start_workers_early
from mapper.explore.search_eval import PlanServer, Point, plan_prune, requests_at, serve_plan
from mapper.explore.search_pools import PoolServer, SpeculativeServer, pool_plans, speculative_plans
from mapper.explore.search_queue import QUEUE_REQUESTS, QueueSteps, check_queue_spec, serve_queue_plan
from mapper.explore.search_space import PRUNE_REASONS, Plan, Pruned, SearchSpec, structural_prune, validate_spec
from mapper.explore.search_steps import BoundSteps, PlanSteps
from mapper.handle import open_model
from mapper.hardware.profile import HardwareProfile
from mapper.report.reproduce import option_flags
from mapper.serve.steps import decoder_dims, open_draft

FIGURE = {"p99_s": "latency_p99_s", "ttft_p99_s": "ttft_p99_s", "tpot_p99_s": "tpot_p99_s"}  # Targets -> Point


def meets(point: Point, targets: Targets) -> bool:
    """Whether the point meets `targets` (its overload fails every set)."""
    if point.failure.startswith("overloaded"):
        return False
    return all(getattr(targets, f) is None or getattr(point, FIGURE[f]) <= getattr(targets, f) for f in FIGURE)


def choose(points: list[Point], targets: Targets) -> Point | None:
    """The most tokens/s per device meeting the targets; ties: more tokens/s per user, fewer devices a replica."""
    ok = [p for p in points if meets(p, targets)]
    key = lambda p: (p.tokens_per_s_per_device, p.tokens_per_s_per_user, -p.plan.devices_per_replica)
    return max(ok, key=key) if ok else None


def pareto(points: list[Point]) -> list[Point]:
    """The points no other beats on both tokens/s per device and tokens/s per user, by tokens/s per device."""
    ranked = sorted(points, key=lambda p: (-p.tokens_per_s_per_device, -p.tokens_per_s_per_user))
    front, best_user = [], -1.0
    for p in ranked:
        if p.tokens_per_s_per_user > best_user:
            front.append(p)
            best_user = p.tokens_per_s_per_user
    return front


STEPS = ("tp", "pp", "ep", "attention_dp", "expert_tp", "dtype", "weight_dtype", "kv_dtype", "launch")


def _beside(a: Point, b: Point) -> bool:
    """Whether b differs from a in one choice: one plan option, the cap by a factor of two, or the chunk."""
    oa, ob = a.plan.options, b.plan.options
    diff = [f for f in STEPS if getattr(oa, f) != getattr(ob, f)]
    caps = a.max_batch != b.max_batch
    chunk = a.chunk_tokens != b.chunk_tokens
    if len(diff) + caps + chunk != 1:
        return False
    return not caps or max(a.max_batch, b.max_batch) == 2 * min(a.max_batch, b.max_batch)


RATE_UNIT = {False: "tok/s/device", True: "requests/s/device"}  # a point's rate figure: LLM tokens, or requests whole


def neighbours(best: Point, points: list[Point], count: int = 5) -> list[str]:
    """The configurations one step beside the choice that miss the SLA, with their first failure."""
    near = [p for p in points if not p.feasible and _beside(best, p)]
    near.sort(key=lambda p: -p.tokens_per_s_per_device)
    return [f"{p.label} {p.failure}" for p in near[:count]]


def sensitivity(best: Point, points: list[Point], targets: Targets, unit: str = "tok/s/device") -> list[str]:
    """For each target asked: how far it may tighten before the choice changes, and the loosening that would
    pick a configuration with more tokens/s per device, with what each flips to (`unit`: the figure's, requests
    for a queue search, whose points carry requests/s in `tokens_per_s_per_device`)."""
    lines = []
    for row in TARGET_ROWS:
        target, key = getattr(targets, row.field), FIGURE[row.field]
        if target is None:
            continue
        value = getattr(best, key)
        tighter = choose([p for p in points if getattr(p, key) < value], targets)
        then = f"{tighter.label} ({tighter.tokens_per_s_per_device:,.0f} {unit})" if tighter else "nothing"
        lines.append(f"{row.label}: the choice holds down to {value * 1e3:.1f} ms; tighter, {then}")
        unbound = replace(targets, **{row.field: None})
        better = [p for p in points if meets(p, unbound) and p.tokens_per_s_per_device > best.tokens_per_s_per_device]
        if better:
            flip = min(getattr(p, key) for p in better)
            pick = choose(better, replace(targets, **{row.field: flip}))
            if pick is not None:
                lines.append(
                    f"{row.label}: loosened to {flip * 1e3:.1f} ms, {pick.label}"
                    f" ({pick.tokens_per_s_per_device:,.0f} {unit})"
                )
    return lines


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A search's configurations served, its pruned entries, and the answer read from them."""

    model: str  # the model argument a command names
    hw: str
    spec: SearchSpec
    points: tuple[Point, ...]
    pruned: tuple[Pruned, ...]
    mapped: int  # step mappings made
    wall_s: float
    queue: bool = False  # a model without a KV cache: requests served whole (search_queue), p99 the latency

    @property
    def best(self) -> Point | None:
        return choose(list(self.points), self.spec.targets)

    @property
    def frontier(self) -> list[Point]:
        return pareto(list(self.points))

    def command(self, point: Point) -> str:
        """`mapper serve` for one replica of the point at its share of the rate (a disaggregated one: both pools,
        which `mapper serve` compares with aggregated serving on as many devices)."""
        s, plan = self.spec, point.plan
        args = ["mapper", "serve", self.model, "--hw", self.hw, *option_flags(replace(plan.options, dp=1))]
        if self.queue:
            args += ["--max-batch", str(point.max_batch), "--rate", repr(point.rate_per_s)]
            return shlex.join([*args, "--requests", str(QUEUE_REQUESTS), "--seed", str(s.seed)])
        if plan.prefill is not None:
            args += ["--prefill-tp", str(plan.prefill.tp), "--prefill-replicas", str(plan.pools[0])]
            args += ["--decode-replicas", str(plan.pools[1])]
        elif plan.speculative is not None:
            args += ["--scheduler", "prefill-first", *plan.speculative.flags()]
        else:
            args += ["--scheduler", "chunked", "--chunk-tokens", str(point.chunk_tokens)]
        args += ["--max-batch", str(point.max_batch)]
        args += ["--rate", repr(point.rate_per_s), "--prompt-tokens", str(s.prompt_tokens)]
        args += [
            "--output-tokens",
            str(s.output_tokens),
            "--requests",
            str(requests_at(s, point.max_batch)),
            "--seed",
            str(s.seed),
        ]
        return shlex.join(args)

    def counts(self) -> dict:
        pruned = {reason: sum(p.reason == reason for p in self.pruned) for reason in PRUNE_REASONS}
        return {"configurations": len(self.points), "mapped_steps": self.mapped, "pruned": pruned}

    def document(self) -> dict:
        """The JSON answer: best, frontier, evaluated counts, neighbours, sensitivity, wall time."""
        best = self.best
        return {
            "model": self.model,
            "hardware": self.hw,
            "devices": self.spec.devices,
            "best": None if best is None else best.row() | {"configuration": best.label, "command": self.command(best)},
            "frontier": [p.row() for p in self.frontier],
            "evaluated": self.counts(),
            "neighbours": [] if best is None else neighbours(best, list(self.points)),
            "sensitivity": []
            if best is None
            else sensitivity(best, list(self.points), self.spec.targets, RATE_UNIT[self.queue]),
            "pruned": [{"what": p.what, "reason": p.reason, "detail": p.detail} for p in self.pruned],
            "wall_s": self.wall_s,
        }


def model_experts(model) -> tuple[int, ...]:
    """The routed-expert counts of the model's MoE layers (empty for a dense model)."""
    workload = model.bind(decoder_dims(model)(1, 0), batch=1, seq=1)
    return tuple(sorted({g.experts for g in workload.expert_gemms.values()}))


PlanTask = tuple[list[Point], list[Pruned], int, int]  # points, pruned, steps mapped, requests held whole


class SharedSteps:
    """Each plan's mapped steps, kept by its options for the run's other plans (a disaggregated pool reads the
    aggregated plan's of the same options; a speculative plan its own and the draft's). One per process: a pool
    or Dask worker keeps its own."""

    def __init__(self, model, hw: HardwareProfile, draft=None):
        self.model, self.hw, self.draft = model, hw, draft
        self._steps: dict[tuple[bool, PlanOptions], PlanSteps] = {}
        self._bound = (BoundSteps(model), None if draft is None else BoundSteps(draft))

    def of(self, options: PlanOptions, draft: bool = False) -> PlanSteps:
        key = (draft, options)
        if key not in self._steps:
            model, bound = (self.draft, self._bound[1]) if draft else (self.model, self._bound[0])
            self._steps[key] = PlanSteps(model, self.hw, options, bound)
        return self._steps[key]

    def mapped(self) -> int:
        return sum(s.mapped for s in self._steps.values())

    def server(self, plan: Plan, spec: SearchSpec) -> PlanServer:
        if plan.prefill is not None:
            return PoolServer(self.of(plan.prefill), self.of(plan.options), plan, spec)
        if plan.speculative is not None:
            return SpeculativeServer(self.of(plan.options), self.of(plan.options, True), plan, spec)
        return PlanServer(self.of(plan.options), plan, spec)


def _plan_task(shared: tuple, plan: Plan) -> PlanTask:
    """One plan pruned and served (a task of `run_tasks`: in this process, a pool's worker or a Dask worker);
    the steps it mapped are those the shared steps held no mapping for."""
    steps, spec, floor = shared
    before = steps.mapped()
    server = steps.server(plan, spec)
    server.floor_tokens_per_s_per_device = floor
    cut = plan_prune(server)
    if cut is not None:
        return [], [cut], steps.mapped() - before, 0
    points, pruned = serve_plan(server)
    return points, pruned, steps.mapped() - before, max(server.sequences(c) for c in server.chunks)


def _key(plan: Plan) -> tuple:
    return (*(getattr(plan.options, f) for f in STEPS if f != "pp"),)


def _pp_dominated(plan: Plan, held: dict, flat: list[Plan], top_cap: int) -> str:
    """Why a PP plan is left unserved ("" where it is served): a TP plan over the same devices that fits splits
    the weights and the KV cache as finely and runs its layers at once, where the stages run one after the
    other; or TP alone already holds every cap's requests whole (the stages would add devices, not batch)."""
    o = plan.options
    wide = next((p for p in flat if p.options.tp == o.tp * o.pp and _key(p)[1:] == _key(plan)[1:]), None)
    if wide is not None and held.get(_key(wide), 0) >= 1:
        return f"TP {o.tp * o.pp} on the same devices fits: the same per-device weights and KV room, layers at once"
    whole = held.get(_key(plan), 0)
    if whole >= top_cap:
        return f"TP {o.tp} alone holds {whole} whole requests, every cap's"
    return ""


def _served(shared: tuple, plans: list[Plan], executor: ExecutorSpec) -> list[PlanTask]:
    done = dict(run_tasks(_plan_task, plans, shared, executor))
    return [done[i] for i in range(len(plans))]


def run_search(
    source,
    hw: HardwareProfile,
    spec: SearchSpec,
    model_argument: str | None = None,
    executor: ExecutorSpec = ExecutorSpec(),
) -> SearchResult:
    """The search (module docstring) of `source` (a handle, or what `open_model` takes) on `spec.devices` of `hw`,
    its plans served by `executor` (in this process, a process pool or Dask: the same answer, in plan order).
    Plans without pipeline stages go first: a PP plan is pruned where its TP alone holds every cap's requests
    whole (the serving model runs one batch through the stages at a time, so the stages add devices, not batch)."""
    start = time.perf_counter()
    spec = validate_spec(spec)
    start_workers_early(executor, _plan_task)  # a LocalCluster's fork server imports while the model is opened
    model = open_model(source)
    name = model_argument or model.source or model.name
    if "past" not in model.roles.values():
        return _queue_search(model, hw, spec, name, executor, start)
    plans, pruned = structural_prune(spec, hw, model_experts(model))
    draft = None
    if spec.speculative is not None:
        draft = open_draft(spec.speculative)
        spec = replace(spec, speculative=replace(spec.speculative, draft=draft))  # opened once for every step
    steps = SharedSteps(model, hw, draft)
    flat = [p for p in plans if p.options.pp == 1]
    results = _served((steps, spec, 0.0), flat, executor)
    held = {_key(p): r[3] for p, r in zip(flat, results, strict=True)}
    staged = []
    for plan in (p for p in plans if p.options.pp > 1):
        why = _pp_dominated(plan, held, flat, max(spec.caps))
        if why:
            pruned.append(Pruned(plan.text(), "pp-dominated", why))
        else:
            staged.append(plan)
    fitting = [p for p in flat if held[_key(p)] >= 1]
    pools, cut = pool_plans(spec, hw, fitting)
    pruned += cut
    staged += pools + speculative_plans(spec, fitting)
    floor = max((p.tokens_per_s_per_device for r in results for p in r[0] if meets(p, spec.targets)), default=0.0)
    results += _served((steps, spec, floor), staged, executor)
    points = [pt for r in results for pt in r[0]]
    pruned += [pr for r in results for pr in r[1]]
    wall = time.perf_counter() - start
    return SearchResult(name, hw.name, spec, tuple(points), tuple(pruned), sum(r[2] for r in results), wall)


def _queue_task(shared: tuple, plan: Plan) -> PlanTask:
    model, hw, spec = shared
    steps = QueueSteps(model, hw, plan)
    points, pruned = serve_queue_plan(steps, spec)
    return points, pruned, steps.mapped, 0


def _queue_search(model, hw: HardwareProfile, spec: SearchSpec, name: str, executor, start: float) -> SearchResult:
    """A model without a KV cache (search_queue): each precision on replicas of one device, its caps served."""
    check_queue_spec(spec, model.name)
    plans, pruned = [], []
    for dtype in spec.dtypes:
        for weights in spec.weight_dtypes:
            options = replace(spec.base, tp=1, pp=1, ep=1, dp=1, dtype=dtype, weight_dtype=weights)
            plan = Plan(options, spec.devices)
            if dtype in (PlanDtype.AUTO, *hw.matrix_peak_flops_per_s):
                plans.append(plan)
            else:
                pruned.append(Pruned(plan.text(), "precision", f"{hw.name} has no {dtype} peak"))
    done = dict(run_tasks(_queue_task, plans, (model, hw, spec), executor))
    results = [done[i] for i in range(len(plans))]
    points = [pt for r in results for pt in r[0]]
    pruned += [pr for r in results for pr in r[1]]
    wall = time.perf_counter() - start
    return SearchResult(name, hw.name, spec, tuple(points), tuple(pruned), sum(r[2] for r in results), wall, True)
