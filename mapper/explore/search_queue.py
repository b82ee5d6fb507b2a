"""A deployment search for a model without a KV cache (an encoder, a CNN): batch, precision and replicas under a
request-latency p99 target (mapper/explore/search.py calls it where the model has no "past" dim).

Each configuration is a precision (the spec's compute dtypes) and a dynamic-batching cap (1-512 in powers of two)
on replicas of one device each, served as `mapper serve` serves a request queue (`serve.serving.simulate_serving`
on the engine's batch latency, every batch size mapped once and shared by the caps of one precision, the profile's
jitter). Its load: with a rate for the fleet, the fewest replicas that meet the target, each at its share; without
one, every replica at the highest rate whose p99 meets the target (`serve.load_curve`, the bisection `mapper serve
--load-curve --p99-target-ms` runs). Figures: requests/s per device, 1 / p99 as the per-user rate (the frontier is
throughput against p99), p99, and the energy per request (the mapped batch nearest the mean batch, per request).
Caps stop where one batch alone takes longer than the target or a doubled cap adds under 3% of the rate.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.core.errors import MapperError
from mapper.explore.search_eval import SATURATED, Point
from mapper.explore.search_space import Plan, Pruned, SearchSpec
from mapper.explore.search_steps import StepFigures
from mapper.handle import ModelHandle
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.serve.load_curve import load_curve
from mapper.serve.serving import ServingConfig, ServingResult, simulate_serving

QUEUE_REQUESTS = 2_000  # requests a configuration's run simulates: a p99 from 20 tail samples


class QueueSteps:
    """One precision's batch mappings: batch -> its figures (`StepFigures`, not the timeline), each mapped once (the
    caps share them)."""

    def __init__(self, model: ModelHandle, hw: HardwareProfile, plan: Plan):
        self.model, self.hw, self.plan = model, hw, plan
        self._fixed = model.dims_without_batch(None)
        self._mapped: dict[int, StepFigures] = {}

    @property
    def mapped(self) -> int:
        return len(self._mapped)

    def figures(self, batch: int) -> StepFigures:
        found = self._mapped.get(batch)
        if found is None:
            workload = self.model.bind(self._fixed, batch=batch)
            found = self._mapped[batch] = StepFigures.of(map_workload(workload, self.hw, self.plan.options))
        return found

    def latency_s(self, batch: int) -> float:
        return self.figures(batch).latency_s

    def energy_per_request_j(self, mean_batch: float) -> float:
        batch = max(1, round(mean_batch))
        return self.figures(batch).energy_j / batch


def queue_config(spec: SearchSpec, hw: HardwareProfile, cap: int, rate: float) -> ServingConfig:
    """The config `mapper serve --max-batch cap --rate R --requests N` builds (dynamic batching, no wait)."""
    return ServingConfig(
        "dynamic", cap, 0.0, rate, QUEUE_REQUESTS, spec.seed, hw.jitter_cv, hw.jitter_dist or None, None
    )


def _point(steps: QueueSteps, cap: int, replicas: int, result: ServingResult, failure: str) -> Point:
    plan = replace(steps.plan, replicas=replicas)
    return Point(
        plan,
        cap,
        0,
        result.offered_rate_per_s,
        result.throughput_per_s / plan.devices_per_replica,
        1.0 / result.p99_s if result.p99_s > 0 else 0.0,
        0.0,
        0.0,
        result.p99_s,
        steps.energy_per_request_j(result.mean_batch),
        0,
        result.mean_batch,
        failure,
    )


def _failure(result: ServingResult, target: float | None) -> str:
    if result.overload:
        return f"overloaded: {result.overload}"
    if target is not None and result.p99_s > target:
        return f"misses request p99: {result.p99_s * 1e3:.1f} ms (target {target * 1e3:g} ms)"
    return ""


def serve_cap(steps: QueueSteps, spec: SearchSpec, cap: int) -> Point:
    """One precision at one cap: at the fleet's rate on the fewest replicas meeting the target, else every
    replica at the highest rate meeting it (at the lightest load of the curve where none does)."""
    hw, target, top = steps.hw, spec.targets.p99_s, max(1, spec.devices // steps.plan.devices_per_replica)
    if spec.rate_per_s is not None:
        point = None
        for replicas in range(1, top + 1):
            result = simulate_serving(steps.latency_s, queue_config(spec, hw, cap, spec.rate_per_s / replicas))
            point = _point(steps, cap, replicas, result, _failure(result, target))
            if point.feasible:
                break
        assert point is not None  # top >= 1
        return point
    curve = load_curve(steps.latency_s, queue_config(spec, hw, cap, 1.0), p99_target_s=target)
    rate = curve.max_rate_meeting_target_per_s or curve.points[0].offered_rate_per_s
    result = simulate_serving(steps.latency_s, queue_config(spec, hw, cap, rate))
    failure = _failure(result, target)
    if curve.max_rate_meeting_target_per_s is None and not failure:
        failure = f"misses request p99 at every load: {curve.points[0].p99_s * 1e3:.1f} ms at the lightest"
    return _point(steps, cap, top, result, failure)


def serve_queue_plan(steps: QueueSteps, spec: SearchSpec) -> tuple[list[Point], list[Pruned]]:
    """Every cap of one precision, ascending, until one batch alone misses the target or the rate saturates."""
    points: list[Point] = []
    pruned: list[Pruned] = []
    stop: tuple[str, str] | None = None
    target, what = spec.targets.p99_s, steps.plan.text()
    for cap in sorted(spec.caps):
        name = f"{what} batch {cap}"
        if stop is not None:
            pruned.append(Pruned(name, *stop))
            continue
        alone = steps.latency_s(cap)
        if target is not None and alone > target:
            stop = ("batch-latency", f"a batch of {cap} alone takes {alone * 1e3:.1f} ms, over p99 {target * 1e3:g} ms")
            pruned.append(Pruned(name, *stop))
            continue
        point = serve_cap(steps, spec, cap)
        if points and point.tokens_per_s_per_device < SATURATED * points[-1].tokens_per_s_per_device:
            stop = ("saturated", f"batch {cap} gained under 3% requests/s per device over batch {points[-1].max_batch}")
        points.append(point)
    return points, pruned


def check_queue_spec(spec: SearchSpec, name: str) -> None:
    """A request queue has no TTFT or TPOT: a p99 target or a rate it is."""
    if spec.targets.ttft_p99_s is not None or spec.targets.tpot_p99_s is not None:
        raise MapperError(
            f"{name} has no KV cache: it serves requests whole, with no TTFT or TPOT; give --p99-target-ms (request"
            " latency) instead"
        )
