"""Plan comparison on a validation matrix: a baseline plan against a candidate, slice by slice.

A client of the pipeline (PRIMER s9): both plans are mapped on every (batch, seq) slice, each metric
gets a direction-aware verdict against its threshold, a slice that regresses anywhere keeps the
baseline (the rollback boundary), and the kernels whose bottleneck class changed are listed.
The sheet and --json writers live here too; they read only the Comparison record.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

import pandas as pd

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.result import MappingResult, PlanOptions
from mapper.core.version import __version__
from mapper.explore.sweep import ModelShapes, check_slices, model_source
from mapper.hardware.profile import HardwareProfile, load_hardware
from mapper.pipeline import map_workload, validate_options
from mapper.report.tables import write_bytes, xlsx_bytes
from mapper.serve.serving import ServingConfig, simulate_serving


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    higher_is_better: bool
    default_threshold: float  # relative change that counts (0.02 = 2 %)
    aliases: tuple[str, ...]


# Thresholds: 2 % is above the run-to-run noise the profiles' jitter_cv puts on a p99 of 20k requests;
# footprint is deterministic, so 1 % already means a real change.
METRICS = (
    Metric("p99_latency_s", False, 0.02, ("p99", "latency")),
    Metric("throughput_per_s", True, 0.02, ("throughput", "tput")),
    Metric("mfu", True, 0.02, ()),
    Metric("perf_per_watt", True, 0.02, ("ppw", "perf/w")),
    Metric("memory_footprint_bytes", False, 0.01, ("footprint", "memory")),
)
METRIC_BY_NAME = {a: m for m in METRICS for a in (m.name, *m.aliases)}
VERDICTS = ("improved", "neutral", "regressed", "error")
PLAN_FIELDS = ("model", "hw") + tuple(f.name for f in fields(PlanOptions))
DEFAULT_LOAD_FRACTION = 0.7  # offered load as a share of the baseline's capacity at that slice
DEFAULT_REQUESTS = 20_000
# A threshold is a relative change: 10 is a 1000% change, past any verdict a person means (a typo for 0.10).
MAX_THRESHOLD = 10
SHOWN_BASELINE_KERNELS = 6  # baseline kernels named in a class-change row; the rest are counted, "(+N)"


@dataclass(frozen=True, slots=True)
class PlanSpec:
    model: str | bytes  # a built-in name, a path, or uploaded bytes
    hardware: HardwareProfile
    options: PlanOptions

    def describe(self) -> str:
        changed = [
            f"{f.name}={getattr(self.options, f.name)}"
            for f in fields(PlanOptions)
            if getattr(self.options, f.name) != getattr(PlanOptions(), f.name)
        ]
        name = self.model if isinstance(self.model, str) else "uploaded model"
        return f"{name} on {self.hardware.name}" + (f" ({', '.join(changed)})" if changed else "")


@dataclass(frozen=True, slots=True)
class Comparison:
    baseline: PlanSpec
    candidate: PlanSpec
    matrix: pd.DataFrame  # slice x metric: baseline, candidate, change, threshold, verdict
    verdicts: pd.DataFrame  # per slice: verdict, improved and regressed metrics
    boundary: pd.DataFrame  # per slice: the plan kept and why
    kernel_changes: pd.DataFrame  # per slice: kernels whose bottleneck class changed
    overall: str
    summary: str
    provenance: dict


# ---- inputs ------------------------------------------------------------------------------------------


def plan_spec(text: str, model: str | bytes, hw: str | HardwareProfile, base: PlanOptions) -> PlanSpec:
    """ "fusion=aggressive,dtype=bf16" or "hw=h200-sxm" or "model=..." on top of the shared options."""
    values: dict[str, object] = {"model": model, "hw": hw}
    option_values = asdict(base)
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in PLAN_FIELDS:
            raise MapperError(
                f"plan setting {part!r} must look like KEY=VALUE with KEY one of {', '.join(PLAN_FIELDS)}"
            )
        value = value.strip()
        if key in ("model", "hw"):
            values[key] = value
        elif key in ("attention_fusion",):
            option_values[key] = {"auto": None, "on": True, "off": False}.get(value, value)
        elif key in ("power_cap_w",):
            option_values[key] = float(value) if value not in ("", "none") else None
        elif isinstance(option_values[key], int) and not isinstance(option_values[key], bool):
            option_values[key] = int(value) if value.isdigit() else value
        else:
            option_values[key] = value
    options = validate_options(PlanOptions(**option_values))
    hw_value = values["hw"]
    hardware = hw_value if isinstance(hw_value, HardwareProfile) else load_hardware(hw_value)
    return PlanSpec(values["model"], hardware, options)


def parse_thresholds(items: list[str] | dict | None) -> dict[str, float]:
    """["p99=0.05", ...] or {"p99": 0.05} -> every metric's threshold (defaults for the rest)."""
    out = {m.name: m.default_threshold for m in METRICS}
    pairs = items.items() if isinstance(items, dict) else (i.partition("=")[::2] for i in items or [])
    for key, value in pairs:
        metric = METRIC_BY_NAME.get(str(key).strip().lower())
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if metric is None or not 0 <= number < MAX_THRESHOLD:
            raise MapperError(
                f"threshold {key}={value!r}: give METRIC=FRACTION with a fraction from 0 to {MAX_THRESHOLD} and METRIC"
                f" one of {', '.join(sorted(METRIC_BY_NAME))}, e.g. --threshold p99=0.02"
            )
        out[metric.name] = number
    return out


# ---- the matrix ----------------------------------------------------------------------------------


def footprint_bytes(result: MappingResult) -> tuple[float, str]:
    """Device memory the plan needs: the engine's memory section where it has one, else weights + the
    largest kernel's live activations (its boundary tensors), a lower bound on the peak."""
    memory = result.extras.get("memory") if isinstance(result.extras, dict) else None
    if memory and "per_device_bytes" in memory:
        return float(memory["per_device_bytes"]), "the engine's memory plan (per device)"
    act = max((k.kernel.dram_bytes - k.kernel.weight_bytes for k in result.kernels), default=0.0)
    return result.totals.weight_bytes + act, "weights + the largest kernel's boundary activations"


def p99_latency(
    latency_s: float, batch: int, rate_per_s: float, hw: HardwareProfile, seed: int, requests: int
) -> tuple[float, str]:
    """p99 of requests served in static batches of `batch` at `rate_per_s` (Poisson, seeded)."""
    config = ServingConfig(
        policy="static",
        max_batch=batch,
        rate_per_s=rate_per_s,
        requests=requests,
        seed=seed,
        jitter_cv=hw.jitter_cv,
        jitter_dist=hw.jitter_dist,
    )
    return simulate_serving(latency_s, config).p99_s, "p99: serving simulation"


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


def compare_plans(
    baseline: PlanSpec,
    candidate: PlanSpec,
    batches: tuple[int, ...],
    seqs: tuple[int, ...],
    thresholds: dict[str, float] | None = None,
    load_fraction: float = DEFAULT_LOAD_FRACTION,
    seed: int = 0,
    requests: int = DEFAULT_REQUESTS,
    progress=None,
    dims: tuple[tuple[str, int], ...] = (),
) -> Comparison:
    """Map both plans on every slice, judge every metric, and draw the rollback boundary. `dims` holds
    the models' other dims (a KV-cache length) for every slice, as a sweep's do."""
    thresholds = parse_thresholds(thresholds)
    if not 0 < load_fraction < 1:
        raise MapperError(f"load fraction {load_fraction!r} must be between 0 and 1 (exclusive)")
    check_slices(len(set(batches)), "MAX_COMPARE_SLICES", "comparison")  # before a model is parsed
    shapes = {
        model: ModelShapes(model_source(model, dims=dims)) for model in dict.fromkeys((baseline.model, candidate.model))
    }
    any_seq = any(s.model.has_seq for s in shapes.values())
    count = len(set(batches)) * (len(set(seqs)) if any_seq else 1)
    check_slices(count, "MAX_COMPARE_SLICES", "comparison")
    if count * requests > limits.MAX_COMPARE_REQUESTS:  # two serving runs of `requests` per slice
        raise MapperError(
            f"{count:,} slices x {requests:,} requests is over {limits.limit_text('MAX_COMPARE_REQUESTS')};"
            " simulate fewer requests per slice or narrow the grid"
        )
    slices = [(b, s) for b in sorted(set(batches)) for s in (sorted(set(seqs)) if any_seq else [None])]
    matrix, verdicts, boundary, changes, notes = [], [], [], [], set()
    for done, (batch, seq) in enumerate(slices):
        key = {"batch": batch, "seq": seq}
        try:
            results = [map_plan(shapes[p.model], p, batch, seq) for p in (baseline, candidate)]
            error = ""
        except MapperError as exc:
            results, error = None, str(exc)
        values = [{m.name: math.nan for m in METRICS}] * 2
        if results:
            base_r, cand_r = results
            rate = load_fraction * base_r.totals.throughput_per_s  # requests/s, the same for both plans
            values = []
            for plan, r in zip((baseline, candidate), results):
                p99, how = p99_latency(r.totals.latency_s, batch, rate, plan.hardware, seed, requests)
                footprint, source = footprint_bytes(r)
                notes.update((how, f"footprint: {source}"))
                values.append(
                    {
                        "p99_latency_s": p99,
                        "throughput_per_s": r.totals.throughput_per_s,
                        "mfu": r.totals.mfu,
                        "perf_per_watt": r.totals.perf_per_watt,
                        "memory_footprint_bytes": footprint,
                    }
                )
            changes += [key | row for row in kernel_class_changes(base_r, cand_r)]
        cells = []
        for m in METRICS:
            change, verdict = verdict_of(m, values[0][m.name], values[1][m.name], thresholds[m.name])
            cells.append(verdict)
            matrix.append(
                key
                | {
                    "metric": m.name,
                    "lower_is_better": not m.higher_is_better,
                    "baseline": values[0][m.name],
                    "candidate": values[1][m.name],
                    "change": change,
                    "threshold": thresholds[m.name],
                    "verdict": verdict,
                }
            )
        slice_verdict = (
            "error"
            if "error" in cells
            else "regressed"
            if "regressed" in cells
            else "improved"
            if "improved" in cells
            else "neutral"
        )
        regressed = [m.name for m, v in zip(METRICS, cells) if v == "regressed"]
        verdicts.append(
            key
            | {
                "verdict": slice_verdict,
                "regressed": ",".join(regressed),
                "improved": ",".join(m.name for m, v in zip(METRICS, cells) if v == "improved"),
                "error": error,
            }
        )
        keep = "baseline" if slice_verdict in ("regressed", "error") else "candidate"
        why = {
            "regressed": f"candidate regresses {', '.join(regressed)}",
            "error": f"a plan failed: {error}",
            "improved": "candidate improves, nothing regresses",
            "neutral": "no metric moves past its threshold",
        }
        boundary.append(key | {"plan_kept": keep, "reason": why[slice_verdict]})
        if progress:
            progress(done + 1, len(slices))
    overall, summary = overall_verdict(verdicts, boundary)
    columns = ["batch", "seq"]
    provenance = {
        "engine_version": __version__,
        "thresholds": thresholds,
        "load_fraction": load_fraction,
        "seed": seed,
        "requests": requests,
        "assumptions": sorted(notes)
        + [
            (
                f"offered load: {load_fraction:g} x the baseline's throughput at each slice, the same rate for"
                " both plans; static batches of the slice's batch size; jitter from each plan's profile"
            )
        ],
        "baseline": plan_provenance(baseline, shapes[baseline.model]),
        "candidate": plan_provenance(candidate, shapes[candidate.model]),
    }
    kernel_cols = columns + [
        "candidate_kernel",
        "candidate_class",
        "baseline_kernels",
        "baseline_class",
        "baseline_time_s",
        "candidate_time_s",
    ]
    frame = lambda rows: _with_seq(pd.DataFrame(rows))
    return Comparison(
        baseline,
        candidate,
        frame(matrix),
        frame(verdicts),
        frame(boundary),
        _with_seq(pd.DataFrame(changes, columns=kernel_cols)),
        overall,
        summary,
        provenance,
    )


def map_plan(shapes: ModelShapes, plan: PlanSpec, batch: int, seq: int | None) -> MappingResult:
    return map_workload(shapes.workload(batch, seq if shapes.model.has_seq else None), plan.hardware, plan.options)


def _with_seq(df: pd.DataFrame) -> pd.DataFrame:
    if "seq" in df:
        df["seq"] = df["seq"].astype("Int64")
    return df


def overall_verdict(verdicts: list[dict], boundary: list[dict]) -> tuple[str, str]:
    counts = {v: sum(1 for row in verdicts if row["verdict"] == v) for v in VERDICTS}
    kept = [row for row in boundary if row["plan_kept"] == "baseline"]
    where = "; ".join(f"batch {r['batch']}" + (f" seq {r['seq']}" if r["seq"] is not None else "") for r in kept)
    if counts["regressed"] or counts["error"]:
        overall = "mixed" if counts["improved"] else "regressed"
    else:
        overall = "improved" if counts["improved"] else "neutral"
    text = {
        "improved": "adopt the candidate: it improves and regresses nowhere",
        "neutral": "no metric moves past its threshold on any slice: either plan will do",
        "mixed": f"adopt the candidate inside the rollback boundary; the baseline stays at {where}",
        "regressed": f"keep the baseline: the candidate improves nowhere and regresses at {where}",
    }[overall]
    return overall, (
        f"{overall}: {text} ({counts['improved']} improved, {counts['neutral']} neutral, "
        f"{counts['regressed']} regressed, {counts['error']} failed of {len(verdicts)} slices)"
    )


def plan_provenance(plan: PlanSpec, shapes: ModelShapes) -> dict:
    return {
        "model": shapes.model.name,
        "model_sha256": shapes.model.sha256,
        "hardware": plan.hardware.name,
        "hardware_sha256": plan.hardware.sha256,
        "options": asdict(plan.options),
        "describe": plan.describe(),
    }


# ---- output ----------------------------------------------------------------------------------------


def comparison_document(c: Comparison) -> dict:
    """What --json prints: every table as records, NaN as null."""

    def records(df: pd.DataFrame) -> list[dict]:
        return json.loads(df.to_json(orient="records"))

    return {
        "overall": c.overall,
        "summary": c.summary,
        "baseline": c.baseline.describe(),
        "candidate": c.candidate.describe(),
        "matrix": records(c.matrix),
        "verdicts": records(c.verdicts),
        "rollback_boundary": records(c.boundary),
        "kernel_class_changes": records(c.kernel_changes),
        "provenance": c.provenance,
    }


FILL = {
    "improved": "C6EFCE",
    "neutral": "EDEDED",
    "regressed": "FFC7CE",
    "error": "FFEB9C",
    "candidate": "C6EFCE",
    "baseline": "FFC7CE",
}


def write_comparison(c: Comparison, path: str) -> str:
    """.xlsx (Matrix, Verdicts, Rollback boundary, Kernel class changes, Provenance) or .json."""
    if path.endswith(".json"):
        with open(path, "w") as f:
            json.dump(comparison_document(c), f, indent=1)
        return path
    if not path.endswith(".xlsx"):
        raise MapperError(f"--out {path!r}: give a .xlsx or .json file name")
    provenance = pd.DataFrame(provenance_rows(c), columns=["field", "baseline", "candidate"])
    sheets = {
        "Matrix": c.matrix,
        "Verdicts": c.verdicts,
        "Rollback boundary": c.boundary,
        "Kernel class changes": c.kernel_changes,
        "Provenance": provenance,
    }
    write_bytes(path, xlsx_bytes(sheets, _color_verdicts), "the comparison")  # no formula from a name
    return path


def provenance_rows(c: Comparison) -> list[tuple]:
    b, k = c.provenance["baseline"], c.provenance["candidate"]
    rows = [(key, str(b[key]), str(k[key])) for key in ("model", "model_sha256", "hardware", "hardware_sha256")]
    rows += [(f"option.{key}", str(b["options"][key]), str(k["options"][key])) for key in b["options"]]
    rows += [("engine_version", __version__, __version__), ("overall", c.overall, c.summary)]
    rows += [(f"threshold.{m}", str(t), str(t)) for m, t in c.provenance["thresholds"].items()]
    rows += [(key, str(c.provenance[key]), str(c.provenance[key])) for key in ("load_fraction", "seed", "requests")]
    rows += [("assumption", line, line) for line in c.provenance["assumptions"]]
    return rows


def _color_verdicts(sheet, df: pd.DataFrame) -> None:
    from openpyxl.styles import PatternFill

    for col_name in ("verdict", "plan_kept"):
        if col_name not in df:
            continue
        col = df.columns.get_loc(col_name) + 1
        for row, value in enumerate(df[col_name], start=2):
            if value in FILL:
                sheet.cell(row=row, column=col).fill = PatternFill("solid", fgColor=FILL[value])
