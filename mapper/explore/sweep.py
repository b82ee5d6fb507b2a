"""Sweeps: map every (model, profile, batch, seq, dtype, fusion) slice and keep one row of totals each.

A client of the pipeline (import -> analyze -> map_workload), not a stage of it. Each model is parsed
once per task and each (batch, seq) shape is built and analyzed once, then mapped for every profile,
dtype and fusion policy; tasks are chunks of shapes, run by mapper.explore.executors (in-process, process
pool or Dask) and sorted by slice id, so the table is the same whichever executor ran it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.extras import require
from mapper.core.options import PlanOptions
from mapper.core.result import MappingResult
from mapper.core.timeline import KernelEstimates
from mapper.core.version import __version__
from mapper.core.vocab import ExecutorKind, FusionPolicy, PlanDtype
from mapper.explore.executors import ExecutorSpec, default_workers, run_tasks, start_workers_early
from mapper.explore.models import ModelShapes, ModelSource, model_source
from mapper.hardware.load import load_hardware
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.report.tables import csv_bytes, write_bytes, xlsx_bytes

if TYPE_CHECKING:
    import pandas as pd

MAX_SLICES = limits.MAX_SLICES
NO_SEQ_NOTE = "model has no sequence dim: --seq values ignored (one slice per batch)"
PLAN_KEYS = ("fusion", "plan_dtype", "tile")  # what a best plan flips on
Progress = Callable[[int, int], None]  # (slices done, slices in all)


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """The grid: every combination of these is one slice (per model, seq only where it has one)."""

    models: tuple[str | bytes, ...]  # built-in names, paths, or uploaded bytes
    hardware: tuple[str | HardwareProfile, ...]  # profile names/files, or profiles already loaded
    batches: tuple[int, ...] = (1,)
    seqs: tuple[int, ...] = (128,)
    dtypes: tuple[str, ...] = ("auto",)
    fusions: tuple[str, ...] = ("default",)
    chunk_slices: int | None = None  # slices per task; None: sized to the executor (`task_slices`)
    # the model's other dims, held for every slice: a KV-cache length, a merged decoder's
    # use_cache_branch ((name, value) pairs; each model takes those it has, built-ins default the rest)
    dims: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SweepShared:
    """What every task of a sweep reads, shipped to each worker once (`executors.run_tasks`): the models,
    parsed there once (their handles' caches then serve every task the worker runs), and the profiles."""

    models: tuple[ModelSource, ...]
    hardware: tuple[HardwareProfile, ...]


@dataclass(frozen=True, slots=True)
class SweepTask:
    """One unit of work: a model (its index in `SweepShared.models`), a chunk of shapes, every profile and
    option pair."""

    model: int
    shapes: tuple[tuple[int, int | None, int], ...]  # (batch, seq or None, first slice id)
    options: tuple[tuple[str, str], ...]  # (dtype, fusion)


@dataclass(frozen=True, slots=True)
class SweepResult:
    table: pd.DataFrame  # one row per slice, sorted by slice_id
    best: pd.DataFrame  # the fastest plan per (model, hardware, batch, seq)
    flips: pd.DataFrame  # where the best plan changes as batch or seq grows
    provenance: dict


# ---- one slice -> one row --------------------------------------------------------------------------


def slice_row(result: MappingResult) -> dict:
    """The totals of one mapping, its dominant class and the plan that was chosen."""
    t = result.totals
    timeline = KernelEstimates.of(result.kernels)
    kernels, assessed = timeline.kernels.sources, timeline.assessments  # the columns: no estimate is written
    by_class: dict[str, float] = {}
    for a in assessed:
        by_class[a.bottleneck] = by_class.get(a.bottleneck, 0.0) + a.time_s
    dominant = max(sorted(by_class), key=by_class.__getitem__) if by_class else ""
    tiled = [i for i, (k, a) in enumerate(zip(kernels, assessed)) if a.tiling.chosen is not None and k.matrix_flops > 0]
    largest = max(tiled, key=lambda i: kernels[i].matrix_flops, default=None)
    tile = assessed[largest].tiling.chosen if largest is not None else None
    return {
        "status": "ok",
        "error": "",
        "plan_dtype": t.dtype,
        "latency_s": t.latency_s,
        "throughput_per_s": t.throughput_per_s,
        "mfu": t.mfu,
        "memory_stall_fraction": t.memory_stall_fraction,
        "perf_per_watt": t.perf_per_watt,
        "energy_per_inference_j": t.energy_per_inference_j,
        "avg_power_w": t.avg_power_w,
        "flops": t.flops,
        "weight_bytes": t.weight_bytes,
        "dram_bytes": t.dram_bytes,
        "dominant_bottleneck": dominant,
        "dominant_share": by_class[dominant] / t.latency_s if dominant and t.latency_s else 0.0,
        "kernel_count": len(result.kernels),
        "largest_matrix_kernel": timeline.kernels.names[largest] if largest is not None else "",
        "tile": f"{tile.tile_m}x{tile.tile_n}x{tile.tile_k}" if tile else "",
        "tile_split_k": tile.split_k if tile else 0,
        "tile_stages": tile.stages if tile else 0,
        "unmodeled_nodes": len(result.unmodeled),
    }


ERROR_ROW = {
    "status": "error",
    "plan_dtype": "",
    "latency_s": math.nan,
    "throughput_per_s": math.nan,
    "mfu": math.nan,
    "memory_stall_fraction": math.nan,
    "perf_per_watt": math.nan,
    "energy_per_inference_j": math.nan,
    "avg_power_w": math.nan,
    "flops": math.nan,
    "weight_bytes": math.nan,
    "dram_bytes": math.nan,
    "dominant_bottleneck": "",
    "dominant_share": math.nan,
    "kernel_count": 0,
    "largest_matrix_kernel": "",
    "tile": "",
    "tile_split_k": 0,
    "tile_stages": 0,
    "unmodeled_nodes": 0,
}


def run_task(shared: SweepShared, task: SweepTask) -> list[dict]:
    """Map every slice of one task (runs on a worker, whose copy of `shared` every task of it reads)."""
    model = shared.models[task.model]
    shapes = ModelShapes(model)
    rows = []
    for batch, seq, first_id in task.shapes:
        try:
            workload, shape_error = shapes.workload(batch, seq), ""
        except MapperError as exc:
            workload, shape_error = None, str(exc)
        slice_id = first_id
        for hw in shared.hardware:
            for dtype, fusion in task.options:
                row = {
                    "slice_id": slice_id,
                    "model": model.name,
                    "model_sha256": model.sha256,
                    "hardware": hw.name,
                    "hardware_sha256": hw.sha256,
                    "batch": batch,
                    "seq": seq,
                    "dtype": dtype,
                    "fusion": fusion,
                    "note": "" if model.has_seq else NO_SEQ_NOTE,
                }
                slice_id += 1
                if workload is None:
                    rows.append(row | ERROR_ROW | {"error": shape_error})
                    continue
                try:
                    rows.append(row | slice_row(map_workload(workload, hw, PlanOptions(dtype=dtype, fusion=fusion))))
                except MapperError as exc:  # e.g. a dtype this profile lacks: the slice says why, the sweep goes on
                    rows.append(row | ERROR_ROW | {"error": str(exc)})
    return rows


# ---- the grid -> tasks -> table ----------------------------------------------------------------------


def task_slices(spec: SweepSpec, slices: int, workers: int | None) -> int:
    """Slices a task: the spec's, else SWEEP_CHUNK_SLICES in this process (`workers` None), else about
    SWEEP_TASKS_PER_WORKER tasks a worker (each worker's copy of the models stays warm across its tasks)."""
    if spec.chunk_slices is not None:
        return spec.chunk_slices
    if workers is None:
        return limits.SWEEP_CHUNK_SLICES
    return max(limits.SWEEP_CHUNK_SLICES, math.ceil(slices / (limits.SWEEP_TASKS_PER_WORKER * workers)))


def plan_tasks(spec: SweepSpec, workers: int | None = None) -> tuple[SweepShared, list[SweepTask], int]:
    """What every task reads, tasks of whole shapes (`task_slices` each, about) and the slice count; `workers`:
    how many run them (None: this process)."""
    if not spec.models or not spec.hardware:
        raise MapperError("a sweep needs at least one model and one hardware profile")
    for name, values in (("batch", spec.batches), ("seq", spec.seqs)):
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise MapperError(f"--{name} values must be positive integers, e.g. --{name} 1,8,64")
    if not spec.dtypes or not spec.fusions:
        raise MapperError("a sweep needs at least one dtype and one fusion policy")
    for dtype, fusion in itertools.zip_longest(spec.dtypes, spec.fusions, fillvalue=None):
        PlanOptions(dtype=dtype or PlanDtype.AUTO, fusion=fusion or FusionPolicy.DEFAULT)  # validated as built
    batches, seqs = sorted(set(spec.batches)), sorted(set(spec.seqs))
    options = tuple(itertools.product(dict.fromkeys(spec.dtypes), dict.fromkeys(spec.fusions)))
    per_shape = len(dict.fromkeys(spec.hardware)) * len(options)
    # the product of the axes first (a model without a seq dim takes one seq): nothing is built or loaded
    # for a grid over the limit (a 20k x 20k grid was built before it was counted)
    check_slices(len(dict.fromkeys(spec.models)) * len(batches) * per_shape)
    hardware = tuple(h if isinstance(h, HardwareProfile) else load_hardware(h) for h in dict.fromkeys(spec.hardware))
    sources = [model_source(model, dims=spec.dims) for model in dict.fromkeys(spec.models)]
    slices = sum(len(batches) * (len(seqs) if s.has_seq else 1) for s in sources) * per_shape
    check_slices(slices)  # with each model's seqs
    chunk = max(1, task_slices(spec, slices, workers) // per_shape)
    tasks, next_id = [], 0
    for m, source in enumerate(sources):
        shapes = [(b, s) for b in batches for s in (seqs if source.has_seq else [None])]
        for start in range(0, len(shapes), chunk):
            part = tuple(
                (b, s, next_id + (start + i) * per_shape) for i, (b, s) in enumerate(shapes[start : start + chunk])
            )
            tasks.append(SweepTask(m, part, options))
        next_id += len(shapes) * per_shape
    return SweepShared(tuple(sources), hardware), tasks, next_id


def check_slices(count: int, limit: str = "MAX_SLICES", what: str = "sweep") -> None:
    if count > getattr(limits, limit):
        raise MapperError(f"the {what} has {count:,} slices, over {limits.limit_text(limit)}; narrow the grid")


def run_sweep(
    spec: SweepSpec, executor: ExecutorSpec = ExecutorSpec(), progress: Progress | None = None
) -> SweepResult:
    """Map every slice of the grid; the table is sorted by slice id (identical on every executor)."""
    start_workers_early(executor, run_task)  # a LocalCluster's fork server imports while this process plans
    pd = require("pandas", "run_sweep")  # lazy (the `report` extra): `import mapper` starts without pandas

    workers = None if executor.kind == ExecutorKind.INPROCESS else executor.workers or default_workers()
    shared, tasks, total = plan_tasks(spec, workers)
    started = datetime.now(UTC)
    rows: list[dict] = []
    done = 0
    if progress:
        progress(0, total)
    for _, task_rows in run_tasks(run_task, tasks, shared, executor):
        rows.extend(task_rows)
        done += len(task_rows)
        if progress:
            progress(done, total)
    table = pd.DataFrame(rows).sort_values("slice_id", kind="stable").reset_index(drop=True)
    table["seq"] = table["seq"].astype("Int64")
    best = best_plans(table)
    provenance = {
        "engine_version": __version__,
        "executor": executor.describe(),
        "slices": total,
        "tasks": len(tasks),
        "created_utc": started.isoformat(timespec="seconds"),
        "grid": {
            "models": [m.name for m in shared.models],
            "hardware": [h.name for h in shared.hardware],
            "batches": list(spec.batches),
            "seqs": list(spec.seqs),
            "dtypes": list(spec.dtypes),
            "fusions": list(spec.fusions),
        },
        "models": {m.name: m.sha256 for m in shared.models},
        "hardware": {h.name: h.sha256 for h in shared.hardware},
    }
    return SweepResult(table, best, plan_flips(best), provenance)


# ---- best plans and where they flip ------------------------------------------------------------------

SLICE_KEYS = ["model", "hardware", "batch", "seq"]


def best_plans(table: pd.DataFrame) -> pd.DataFrame:
    """The lowest-latency plan per (model, hardware, batch, seq); ties go to the lower slice id."""
    ok = table[table["status"] == "ok"]
    if ok.empty:
        return ok.copy()
    order = ok.sort_values(["latency_s", "slice_id"], kind="stable")
    best = order.drop_duplicates(SLICE_KEYS, keep="first")
    return best.sort_values("slice_id", kind="stable").reset_index(drop=True)


FLIP_COLUMNS = ["model", "hardware", "axis", "at", "from", "to", "changed", "from_plan", "to_plan"]


def plan_flips(best: pd.DataFrame) -> pd.DataFrame:
    """Each step along batch (at a fixed seq) or seq (at a fixed batch) where the best plan changes. Read as
    columns of plain values: a (model, profile) in the order first met, each line of a fixed value in
    ascending order (a model without a seq dim last, as "seq=-"), its steps ascending (a pandas groupby of
    every line cost 0.04 s of a 200-shape sweep)."""
    import pandas as pd  # lazy: `import mapper` and the CLI's --help start without pandas

    if best.empty:
        return pd.DataFrame(columns=FLIP_COLUMNS)

    def missing_last(value) -> tuple[bool, object]:  # a model without a seq dim has NA there: after every number
        return (True, None) if pd.isna(value) else (False, value)

    column = {k: best[k].tolist() for k in ("model", "hardware", "batch", "seq", *PLAN_KEYS)}
    plans = [dict(zip(PLAN_KEYS, values)) for values in zip(*(column[k] for k in PLAN_KEYS))]
    pairs: dict[tuple, list[int]] = {}
    for i, pair in enumerate(zip(column["model"], column["hardware"])):
        pairs.setdefault(pair, []).append(i)
    flips = []
    for (model, hw), rows in pairs.items():
        for axis, fixed in (("batch", "seq"), ("seq", "batch")):
            lines: dict = {}
            for i in rows:
                lines.setdefault(missing_last(column[fixed][i]), []).append(i)
            for (_, at), line in sorted(lines.items(), key=lambda kv: kv[0]):
                previous = None
                for i in sorted(line, key=lambda i: missing_last(column[axis][i])):
                    step, plan = column[axis][i], plans[i]
                    if previous is not None and plan != previous[1]:
                        flips.append(
                            {
                                "model": model,
                                "hardware": hw,
                                "axis": axis,
                                "at": f"{fixed}={'-' if at is None else int(at)}",
                                "from": int(previous[0]),
                                "to": int(step),
                                "changed": ",".join(k for k in PLAN_KEYS if plan[k] != previous[1][k]),
                                "from_plan": plan_text(previous[1]),
                                "to_plan": plan_text(plan),
                            }
                        )
                    previous = (step, plan)
    return pd.DataFrame(flips, columns=FLIP_COLUMNS)


def plan_text(plan: dict) -> str:
    return f"fusion {plan['fusion']}, {plan['plan_dtype']}, tile {plan['tile'] or '-'}"


def write_table(result: SweepResult, path: str) -> str:
    """Write the slice table as .parquet (provenance in the file's metadata), .csv or .xlsx; the text
    ones through mapper.report.tables, so a model or file name cannot become a formula."""
    table = result.table.copy()
    if path.endswith(".parquet"):
        table.attrs = {"provenance": result.provenance}
        table.to_parquet(path, index=False)
    elif path.endswith((".csv", ".xlsx")):
        data = csv_bytes(table) if path.endswith(".csv") else xlsx_bytes({"Slices": table})
        write_bytes(path, data, "the sweep table")
    else:
        raise MapperError(f"--out {path!r}: give a .parquet, .csv or .xlsx file name")
    return path


def parse_int_list(text: str | Sequence[int], what: str) -> tuple[int, ...]:
    """ "1,8,64" -> (1, 8, 64), with a message a person can act on."""
    if not isinstance(text, str):
        return tuple(int(v) for v in text)
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise MapperError(f"--{what} {text!r} must be a comma-separated list of integers, e.g. 1,8,64") from None
    if not values or any(v < 1 for v in values):
        raise MapperError(f"--{what} {text!r} must list positive integers, e.g. 1,8,64")
    return values
