"""Serving under rising load and the JSON-ready Serving section: percentiles against offered load,
the knee, the highest rate meeting a p99 target, and the section the sheet and `mapper serve --json` show."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.serve.serving import (
    BatchTimes,
    ServiceTime,
    ServingConfig,
    ServingResult,
    simulate_serving,
    validate_config,
)

KNEE_P99_RATIO = 2.0  # the knee: first load whose p99 is this many times the lightest load's p99
DEFAULT_LOADS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98)
TARGET_SEARCH_STEPS = 8  # bisection steps for the highest rate meeting a p99 target
# The result's figures the section carries: its fields from the percentiles through the mean batch, in order.
_FIELDS = ServingResult.__slots__
SECTION_FIGURES = _FIELDS[: _FIELDS.index("mean_batch") + 1]
MAX_LOAD = 10.0  # a load is a fraction of the saturation rate; ten times saturation is already a runaway queue


@dataclass(frozen=True, slots=True)
class LoadPoint:
    load: float  # offered rate over the saturation rate
    offered_rate_per_s: float
    p50_s: float
    p95_s: float
    p99_s: float
    mean_s: float
    throughput_per_s: float
    utilization: float


@dataclass(frozen=True, slots=True)
class LoadCurve:
    points: tuple[LoadPoint, ...]
    saturation_rate_per_s: float
    knee_index: int | None  # first point whose p99 >= KNEE_P99_RATIO x the lightest point's p99
    p99_target_s: float | None
    max_rate_meeting_target_per_s: float | None
    assumptions: tuple[str, ...]


def load_curve(
    service_time: ServiceTime,
    config: ServingConfig,
    loads: tuple[float, ...] = DEFAULT_LOADS,
    p99_target_s: float | None = None,
) -> LoadCurve:
    """Percentiles against offered load (fractions of the saturation rate), the knee, and the highest
    rate whose p99 meets the target (bisection between the simulated loads; same seed throughout)."""
    config = validate_config(replace(config, trace=None))
    if not 1 <= len(loads) <= limits.MAX_LOAD_POINTS:  # each load is one whole simulation
        raise MapperError(f"a load curve takes 1 to {limits.limit_text('MAX_LOAD_POINTS')} loads (got {len(loads)})")
    if any(not (0 < x < MAX_LOAD) for x in loads):
        raise MapperError("loads must be fractions of the saturation rate, each > 0 (and < 10)")
    times = BatchTimes(service_time, config.max_batch)
    saturation = times.saturation_rate(config.max_batch, config.policy)
    cached = times if callable(service_time) else service_time

    def run(rate: float):
        return simulate_serving(cached, replace(config, rate_per_s=rate))

    points, results = [], []
    for load in sorted(loads):
        r = run(load * saturation)
        results.append(r)
        points.append(
            LoadPoint(load, load * saturation, r.p50_s, r.p95_s, r.p99_s, r.mean_s, r.throughput_per_s, r.utilization)
        )
    knee = next((i for i, p in enumerate(points) if p.p99_s >= KNEE_P99_RATIO * points[0].p99_s), None)
    best = None
    if p99_target_s is not None:
        passing = [p for p in points if p.p99_s <= p99_target_s]
        if passing:
            lo = passing[-1].offered_rate_per_s
            above = [p for p in points if p.offered_rate_per_s > lo]
            hi = above[0].offered_rate_per_s if above else None
            if hi is not None:
                for _ in range(TARGET_SEARCH_STEPS):
                    mid = (lo + hi) / 2
                    lo, hi = (mid, hi) if run(mid).p99_s <= p99_target_s else (lo, mid)
            best = lo
    knee_rule = (
        f"knee: first load with p99 >= {KNEE_P99_RATIO:g} x p99 at the lightest load ({min(loads):g} of saturation)"
    )
    return LoadCurve(tuple(points), saturation, knee, p99_target_s, best, results[0].assumptions[1:] + (knee_rule,))


def serving_section(result: ServingResult, config: ServingConfig, curve: LoadCurve | None = None) -> dict:
    """The sheet's Serving section (JSON-ready): policy, load, percentiles, assumptions [, load curve]."""
    config = validate_config(config)
    section = {
        "policy": config.policy if config.max_batch > 1 else "batch-1",
        "max_batch": config.max_batch,
        "max_wait_s": config.max_wait_s,
        "offered_rate_per_s": result.offered_rate_per_s,
        "requests": result.requests,
        "seed": config.seed,
        "jitter_cv": config.jitter_cv,
        "jitter_dist": config.jitter_dist,
        **{k: getattr(result, k) for k in SECTION_FIGURES},
        "capacity_per_s": result.capacity_per_s,
        "overload": result.overload,
        "assumptions": list(result.assumptions),
    }
    if curve is not None:
        section["load_curve"] = {
            "saturation_rate_per_s": curve.saturation_rate_per_s,
            "knee_index": curve.knee_index,
            "p99_target_s": curve.p99_target_s,
            "max_rate_meeting_target_per_s": curve.max_rate_meeting_target_per_s,
            "points": [{k: getattr(p, k) for k in LoadPoint.__slots__} for p in curve.points],
        }
    return section
