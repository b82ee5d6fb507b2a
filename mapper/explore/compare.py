"""Plan comparison on a validation matrix: a baseline plan against a candidate, slice by slice.

A client of the pipeline: both plans are mapped on every (batch, seq) slice, each metric
gets a direction-aware verdict against its threshold, a slice that regresses anywhere keeps the
baseline (the rollback boundary), and the kernels whose bottleneck class changed are listed.
The plans and thresholds are read in compare_inputs.py; the sheet and --json writers are in compare_output.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.result import MappingResult
from mapper.core.version import __version__
from mapper.explore.compare_inputs import METRICS, Metric, PlanServing, PlanSpec, parse_thresholds
from mapper.explore.compare_verdict import overall_verdict, slice_verdict
from mapper.explore.models import ModelShapes, model_source
from mapper.explore.sweep import check_slices
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.serve.serving import ServingConfig, simulate_serving

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_LOAD_FRACTION = 0.7  # offered load as a share of the baseline's capacity at that slice
DEFAULT_REQUESTS = 20_000
SHOWN_BASELINE_KERNELS = 6  # baseline kernels named in a class-change row; the rest are counted, "(+N)"


@dataclass(frozen=True, slots=True)
class Comparison:
    baseline: PlanSpec
    candidate: PlanSpec
    matrix: pd.DataFrame  # slice x metric: baseline, candidate, change, threshold, verdict
    verdicts: pd.DataFrame  # per slice: verdict, improved and regressed metrics
    boundary: pd.DataFrame  # per slice: the plan kept and why
    kernel_changes: pd.DataFrame  # per slice: kernels whose bottleneck class changed
    overall: str
    summary: str  # the verdict, which metrics decided it, and the slice counts
    provenance: dict
    caveats: tuple[str, ...] = ()  # a precision candidate's quality caveats (empty for other changes)
    fallback: str = ""  # what runs where the candidate's quality check fails ("" for other changes)


# ---- the matrix ----------------------------------------------------------------------------------


def footprint_bytes(result: MappingResult) -> tuple[float, str]:
    """Device memory the plan needs: the engine's memory plan (weights, KV cache, live activations)."""
    return float(result.memory.per_device_bytes), "the engine's memory plan (per device)"


def plan_p99(service_time, config: ServingConfig, hw: HardwareProfile, seed: int, requests: int) -> tuple[float, str]:
    """p99 of the plan's serving `config` (Poisson, seeded, the profile's jitter); `service_time` in seconds, or
    batch size -> seconds for dynamic batching."""
    config = replace(config, requests=requests, seed=seed, jitter_cv=hw.jitter_cv, jitter_dist=hw.jitter_dist)
    how = "static batches" if config.policy == "static" else "dynamic batching"
    return simulate_serving(service_time, config).p99_s, f"p99: serving simulation ({how})"


def serving_config(serving: PlanServing, batch: int, shared_rate: float) -> ServingConfig:
    """A plan's serving: its own rate (else the shared one); static batches of the slice's batch, or dynamic
    batching up to its max batch with its max wait."""
    rate = serving.rate if serving.rate is not None else shared_rate
    if serving.max_batch is None:
        return ServingConfig(policy="static", max_batch=batch, rate_per_s=rate)
    return ServingConfig(max_batch=serving.max_batch, max_wait_s=serving.max_wait_ms / 1e3, rate_per_s=rate)


def shared_peak(plans: tuple[PlanSpec, PlanSpec], results: list[MappingResult]) -> tuple[float, str]:
    """The one peak both plans' MFU is measured against: the higher of the two plans' own matrix peaks (each at
    its dtype, x devices), so a plan at a lower precision is not judged against a yardstick it moved and no MFU
    can exceed 100% (an fp8 plan against an fp16 baseline's peak read 191%)."""
    at = max(range(len(results)), key=lambda i: results[i].totals.peak_flops_per_s)
    peak, which = results[at].totals.peak_flops_per_s, ("the baseline's", "the candidate's")[at]
    dtype, hw = results[at].totals.dtype, plans[at].hardware.name
    return peak, f"the higher of the two plans' peaks, {which} {dtype} peak on {hw} ({peak / 1e12:,.0f} TFLOP/s)"


def verdict_of(metric: Metric, base: float, cand: float, threshold: float) -> tuple[float, str]:
    """Relative change and its verdict; the change's sign is the metric's own (direction applied after)."""
    if not (math.isfinite(base) and math.isfinite(cand)):
        return math.nan, "error"
    change = (cand - base) / abs(base) if base else (0.0 if cand == base else math.copysign(math.inf, cand - base))
    better = change if metric.higher_is_better else -change
    return change, "improved" if better > threshold else "regressed" if better < -threshold else "neutral"


def kernel_class_changes(base: MappingResult, cand: MappingResult) -> list[dict]:
    """Candidate kernels whose class differs from the class of the baseline kernel(s) holding their nodes."""
    owner = {n: k for k in base.kernels for n in k.kernel.nodes}
    rows = []
    for k in cand.kernels:
        before = list(dict.fromkeys(owner[n] for n in k.kernel.nodes if n in owner))
        classes = sorted({b.bottleneck for b in before})
        if before and classes != [k.bottleneck]:
            rows.append(
                {
                    "candidate_kernel": k.kernel.name,
                    "candidate_class": k.bottleneck,
                    "baseline_kernels": " + ".join(b.kernel.name for b in before[:SHOWN_BASELINE_KERNELS])
                    + (f" (+{len(before) - SHOWN_BASELINE_KERNELS})" if len(before) > SHOWN_BASELINE_KERNELS else ""),
                    "baseline_class": ",".join(classes),
                    "baseline_time_s": sum(b.time_s for b in before),
                    "candidate_time_s": k.time_s,
                }
            )
    return rows


@dataclass(frozen=True, slots=True)
class CompareSettings:
    """How the two plans are judged: per-metric thresholds and the serving load each slice is measured under."""

    thresholds: dict[str, float] | list[str] | None = None  # parse_thresholds' input; defaults for the rest
    load_fraction: float = DEFAULT_LOAD_FRACTION
    seed: int = 0
    requests: int = DEFAULT_REQUESTS


KERNEL_CHANGE_COLUMNS = [
    "batch",
    "seq",
    "candidate_kernel",
    "candidate_class",
    "baseline_kernels",
    "baseline_class",
    "baseline_time_s",
    "candidate_time_s",
]


def compare_plans(
    baseline: PlanSpec,
    candidate: PlanSpec,
    batches: tuple[int, ...],
    seqs: tuple[int, ...],
    settings: CompareSettings = CompareSettings(),
    progress=None,
    dims: tuple[tuple[str, int], ...] = (),
) -> Comparison:
    """Map both plans on every slice, judge every metric, and draw the rollback boundary. `dims` holds
    the models' other dims (a KV-cache length) for every slice, as a sweep's do."""
    thresholds = parse_thresholds(settings.thresholds)
    if not 0 < settings.load_fraction < 1:
        raise MapperError(f"load fraction {settings.load_fraction!r} must be between 0 and 1 (exclusive)")
    check_slices(len(set(batches)), "MAX_COMPARE_SLICES", "comparison")  # before a model is parsed
    shapes = {
        model: ModelShapes(model_source(model, dims=dims)) for model in dict.fromkeys((baseline.model, candidate.model))
    }
    slices = _slices(batches, seqs, any(s.model.has_seq for s in shapes.values()), settings.requests)
    matrix, verdicts, boundary, changes = [], [], [], []
    notes: set[str] = set()
    caveats, fallback = precision_caveats(baseline, candidate), precision_fallback(baseline, candidate)
    for done, (batch, seq) in enumerate(slices):
        key = {"batch": batch, "seq": seq}
        try:
            results = [map_plan(shapes[p.model], p, batch, seq) for p in (baseline, candidate)]
            error = ""
        except MapperError as exc:
            results, error = None, str(exc)
        values = [{m.name: math.nan for m in METRICS}] * 2
        if results:
            services = [service_time(shapes[p.model], p, r, seq) for p, r in zip((baseline, candidate), results)]
            values = _metric_values((baseline, candidate), results, batch, settings, notes, services)
            changes += [key | row for row in kernel_class_changes(*results)]
            caveats = tuple(dict.fromkeys(caveats + (results[1].caveats if caveats else ())))
        cells = []
        for m in METRICS:
            row = _matrix_row(m, values[0][m.name], values[1][m.name], thresholds[m.name])
            cells.append(row["verdict"])
            matrix.append(key | row | {"quality_caveat": "; ".join(caveats), "fallback": fallback})
        verdict, boundary_row = slice_verdict(METRICS, cells, error, tuple(r.memory.fits for r in results or ()))
        verdicts.append(key | verdict)
        boundary.append(key | boundary_row)
        if progress:
            progress(done + 1, len(slices))
    overall, summary = overall_verdict(verdicts, boundary)
    provenance = _provenance(baseline, candidate, shapes, thresholds, settings, notes)
    return Comparison(
        baseline,
        candidate,
        _frame(matrix),
        _frame(verdicts),
        _frame(boundary),
        _frame(changes, KERNEL_CHANGE_COLUMNS),
        overall,
        summary,
        provenance,
        caveats,
        fallback,
    )


# A precision change moves accuracy, which no roofline predicts (a low-precision win carries its
# quality caveat and its fallback on the sheet).
PRECISION_OPTIONS = ("dtype", "weight_dtype", "sparsity")


def precision_fallback(baseline: PlanSpec, candidate: PlanSpec) -> str:
    """What runs where a precision candidate fails its quality check ("" for other changes)."""
    if not precision_caveats(baseline, candidate):
        return ""
    return f"the baseline plan ({baseline.describe()}) wherever the candidate fails its quality check"


def precision_caveats(baseline: PlanSpec, candidate: PlanSpec) -> tuple[str, ...]:
    """The quality caveat of a candidate that changes precision (dtype, weights, sparsity); () otherwise."""
    moved = [
        f"{name} {getattr(baseline.options, name)} -> {getattr(candidate.options, name)}"
        for name in PRECISION_OPTIONS
        if getattr(baseline.options, name) != getattr(candidate.options, name)
    ]
    if not moved:
        return ()
    caveat = (
        f"precision change ({', '.join(moved)}): the engine predicts speed and memory, not accuracy; check the"
        " candidate's quality on the task's own metric against the baseline before adopting it"
    )
    return (caveat,)


def _slices(batches: tuple[int, ...], seqs: tuple[int, ...], any_seq: bool, requests: int) -> list[tuple]:
    """The (batch, seq) grid, checked against the comparison limits (seq None for models without one)."""
    count = len(set(batches)) * (len(set(seqs)) if any_seq else 1)
    check_slices(count, "MAX_COMPARE_SLICES", "comparison")
    if count * requests > limits.MAX_COMPARE_REQUESTS:  # two serving runs of `requests` per slice
        raise MapperError(
            f"{count:,} slices x {requests:,} requests is over {limits.limit_text('MAX_COMPARE_REQUESTS')};"
            " simulate fewer requests per slice or narrow the grid"
        )
    return [(b, s) for b in sorted(set(batches)) for s in (sorted(set(seqs)) if any_seq else [None])]


def service_time(shapes: ModelShapes, plan: PlanSpec, result: MappingResult, seq: int | None):
    """The plan's batch time: its mapped batch's latency (static batches of the slice's batch), or batch size ->
    the latency mapped at that size (dynamic batching up to the plan's max batch)."""
    if plan.serving.max_batch is None:
        return result.totals.latency_s
    return lambda size: map_plan(shapes, plan, size, seq).totals.latency_s


def _metric_values(
    plans: tuple[PlanSpec, PlanSpec],
    results: list[MappingResult],
    batch: int,
    settings: CompareSettings,
    notes: set,
    services: list,
) -> list[dict]:
    """Each plan's metrics at one slice, served at the same offered load; how each was found goes to `notes`."""
    rate = settings.load_fraction * results[0].totals.throughput_per_s  # requests/s, shared unless a plan sets its own
    peak, peak_text = shared_peak(plans, results)
    notes.add(
        f"mfu: both plans' model FLOP/s against one peak, {peak_text}, so a precision change is not judged"
        " against a yardstick it moved"
    )
    values = []
    for plan, r, service in zip(plans, results, services):
        config = serving_config(plan.serving, batch, rate)
        p99, how = plan_p99(service, config, plan.hardware, settings.seed, settings.requests)
        footprint, source = footprint_bytes(r)
        notes.update((how, f"footprint: {source}"))
        values.append(
            {
                "p99_latency_s": p99,
                "throughput_per_s": r.totals.throughput_per_s,
                "mfu": r.totals.mfu * r.totals.peak_flops_per_s / peak if peak > 0 else math.nan,
                "perf_per_watt": r.totals.perf_per_watt,
                "memory_footprint_bytes": footprint,
            }
        )
    return values


def _matrix_row(m: Metric, base: float, cand: float, threshold: float) -> dict:
    change, verdict = verdict_of(m, base, cand, threshold)
    return {
        "metric": m.name,
        "lower_is_better": not m.higher_is_better,
        "baseline": base,
        "candidate": cand,
        "change": change,
        "threshold": threshold,
        "verdict": verdict,
    }


def _provenance(
    baseline: PlanSpec, candidate: PlanSpec, shapes: dict, thresholds: dict, settings: CompareSettings, notes: set
) -> dict:
    return {
        "engine_version": __version__,
        "thresholds": thresholds,
        "load_fraction": settings.load_fraction,
        "seed": settings.seed,
        "requests": settings.requests,
        "assumptions": sorted(notes)
        + [
            (
                f"offered load: {settings.load_fraction:g} x the baseline's throughput at each slice, the same rate"
                " for both plans, and static batches of the slice's batch size, unless a plan sets its own rate or"
                " max batch (then dynamic batching; in its description); jitter from each plan's profile"
            )
        ],
        "baseline": plan_provenance(baseline, shapes[baseline.model]),
        "candidate": plan_provenance(candidate, shapes[candidate.model]),
    }


def map_plan(shapes: ModelShapes, plan: PlanSpec, batch: int, seq: int | None) -> MappingResult:
    return map_workload(shapes.workload(batch, seq if shapes.model.has_seq else None), plan.hardware, plan.options)


def _frame(rows: list[dict], columns: tuple[str, ...] | list[str] | None = None) -> pd.DataFrame:
    import pandas as pd  # lazy: `import mapper` and the CLI's --help start without pandas

    return _with_seq(pd.DataFrame(rows, columns=columns))


def _with_seq(df: pd.DataFrame) -> pd.DataFrame:
    if "seq" in df:
        df["seq"] = df["seq"].astype("Int64")
    return df


def plan_provenance(plan: PlanSpec, shapes: ModelShapes) -> dict:
    return {
        "model": shapes.model.name,
        "model_sha256": shapes.model.sha256,
        "hardware": plan.hardware.name,
        "hardware_sha256": plan.hardware.sha256,
        "options": asdict(plan.options),
        "serving": asdict(plan.serving),
        "describe": plan.describe(),
    }
