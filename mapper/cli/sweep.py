"""`mapper sweep` and `mapper compare`: the command-line side of mapper.explore.sweep and mapper.explore.compare.

Registered by mapper.cli.main through add_arguments(subparsers); bad input raises MapperError, which
the CLI turns into one `error:` line and exit code 2. The progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from mapper.cli import store as store_cli
from mapper.cli.args import parse_dim
from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.core.vocab import ExecutorKind, values
from mapper.pipeline import FUSION_POLICIES, PLAN_DTYPES

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from mapper.explore.sweep import SweepResult


def _names(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))


def add_arguments(subparsers) -> None:
    """Add the `sweep` and `compare` sub-commands to mapper's sub-parser set."""
    text = "map every (model, profile, batch, seq, dtype, fusion) slice into one table"
    p = subparsers.add_parser("sweep", help=text, description=text)
    p.add_argument("models", nargs="+", metavar="MODEL", help="built-in names or .onnx files")
    p.add_argument("--hw", default="h100-sxm", help="profiles, comma-separated: h100-sxm,a100-sxm-80gb")
    p.add_argument("--batch", default="1", help="batch sizes, comma-separated: 1,8,64")
    p.add_argument("--seq", default="128", help="sequence lengths (ignored by models without one): 128,512,2048")
    p.add_argument("--dtype", default="auto", help="plan dtypes, comma-separated: bf16,fp8")
    p.add_argument("--fusion", default="default", help="fusion policies, comma-separated: none,aggressive")
    p.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="holds another dim for every slice, e.g. past_sequence_length=2048 (a model takes those it has)",
    )
    p.add_argument("--out", help="write the table: .parquet, .csv or .xlsx")
    _add_executor_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print best plans and flips as JSON")
    p.set_defaults(func=cmd_sweep)
    _add_compare(subparsers)


def _add_executor_arguments(p) -> None:
    """Where a sweep's slices run and how they are cut into tasks."""
    p.add_argument(
        "--executor",
        choices=values(ExecutorKind),
        help="where slices run (default in-process; dask when --scheduler or --workers is given)",
    )
    p.add_argument("--workers", type=int, help="local workers (process pool or a Dask LocalCluster)")
    p.add_argument("--scheduler", help="a running Dask scheduler, tcp://HOST:PORT")
    p.add_argument(
        "--chunk",
        type=int,
        default=None,
        help=f"slices per task (default: {limits.SWEEP_CHUNK_SLICES} in-process, else about"
        f" {limits.SWEEP_TASKS_PER_WORKER} tasks a worker)",
    )


def _add_compare(subparsers) -> None:
    text = "compare a baseline plan with a candidate over a validation matrix; draw the rollback boundary"
    p = subparsers.add_parser("compare", help=text, description=text)
    p.add_argument("model", help="a built-in name or an .onnx file (override per plan with model=...)")
    p.add_argument("--hw", default="h100-sxm", help="the profile both plans share unless hw=... overrides")
    p.add_argument("--batch", default="1", help="batch sizes of the matrix, comma-separated")
    p.add_argument("--seq", default="128", help="sequence lengths of the matrix, comma-separated")
    p.add_argument("--dtype", default="auto", choices=PLAN_DTYPES, help="the shared plan dtype")
    p.add_argument("--fusion", default="default", choices=FUSION_POLICIES, help="the shared fusion policy")
    p.add_argument("--baseline", default="", help="KEY=VALUE[,KEY=VALUE]: fusion=none, hw=h100-sxm, dtype=bf16 ...")
    p.add_argument("--candidate", default="", help="KEY=VALUE[,KEY=VALUE]: fusion=aggressive, hw=h200-sxm ...")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=FRACTION",
        help="per-metric threshold, e.g. p99=0.02 throughput=0.02 mfu=0.02 ppw=0.02 footprint=0.01",
    )
    p.add_argument("--load-fraction", type=float, default=0.7, help="offered load for p99, x the baseline's capacity")
    p.add_argument("--seed", type=int, default=0, help="seed of the p99 simulation")
    p.add_argument("--requests", type=int, default=20_000, help="requests simulated per slice and plan")
    p.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="holds another dim for every slice, e.g. past_sequence_length=2048",
    )
    p.add_argument("--out", help="write the comparison: .xlsx or .json")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON document")
    p.set_defaults(func=cmd_compare)


class _Bar:
    """A rich progress bar on stderr, driven by the engine's (done, total) callback."""

    def __init__(self, label: str, enabled: bool):
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("slices"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )

    def __enter__(self):
        if self.progress:
            self.progress.start()
        return self

    def __call__(self, done: int, total: int) -> None:
        if self.progress is None:
            return
        if self.task is None:
            self.task = self.progress.add_task("", total=total)
        self.progress.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.progress:
            self.progress.stop()


def cmd_sweep(args: argparse.Namespace) -> int:
    from mapper.explore.executors import executor_spec  # pandas and Dask: loaded by the commands that use them
    from mapper.explore.sweep import SweepSpec, parse_int_list, run_sweep, write_table

    spec = SweepSpec(
        tuple(args.models),
        _names(args.hw),
        parse_int_list(args.batch, "batch"),
        parse_int_list(args.seq, "seq"),
        _names(args.dtype),
        _names(args.fusion),
        args.chunk,
        tuple(parse_dim(d) for d in args.dim),
    )
    if spec.chunk_slices is not None and not 1 <= spec.chunk_slices <= limits.MAX_CHUNK_SLICES:
        raise MapperError(f"--chunk {args.chunk} must be from 1 to {limits.limit_text('MAX_CHUNK_SLICES')} slices")
    executor = executor_spec(args.executor, args.workers, args.scheduler)
    start = time.perf_counter()
    with _Bar("sweep", not args.no_progress and not args.json) as bar:
        result = run_sweep(spec, executor, bar)
    elapsed = time.perf_counter() - start
    if args.out:
        write_table(result, args.out)
    if args.json:
        _print_sweep_json(result, elapsed)
    else:
        _print_sweep(result, elapsed, executor.describe(), args.out)
    return 0


def _print_sweep_json(result: SweepResult, elapsed: float) -> None:
    table = result.table
    doc = {
        "slices": len(table),
        "failed": len(table[table["status"] != "ok"]),
        "elapsed_s": elapsed,
        "provenance": result.provenance,
        "best": json.loads(result.best.to_json(orient="records")),
        "flips": json.loads(result.flips.to_json(orient="records")),
    }
    print(json.dumps(doc, indent=1))


def _print_sweep(result: SweepResult, elapsed: float, executor: str, out: str | None) -> None:
    table = result.table
    failed = table[table["status"] != "ok"]
    print(
        f"{len(table)} slices in {elapsed:.2f} s ({len(table) / elapsed:,.0f} slices/s, {executor})"
        + (f"; {len(failed)} failed (see the error column)" if len(failed) else "")
    )
    for model, note in table.groupby("model", sort=False)["note"].first().items():
        if note:
            print(f"{model}: {note}")
    cols = [
        "model",
        "hardware",
        "batch",
        "seq",
        "fusion",
        "plan_dtype",
        "tile",
        "latency_s",
        "mfu",
        "dominant_bottleneck",
    ]
    print("\nbest plan per slice (lowest latency):")
    print(result.best[cols].to_string(index=False))
    if len(result.flips):
        print("\nwhere the best plan flips:")
        print(result.flips.to_string(index=False))
    if out:
        print(f"\nwrote {out}")


def cmd_compare(args: argparse.Namespace) -> int:
    from mapper.explore.compare import CompareSettings, compare_plans
    from mapper.explore.compare_inputs import plan_spec
    from mapper.explore.compare_output import comparison_document, write_comparison
    from mapper.explore.sweep import parse_int_list

    base = PlanOptions(dtype=args.dtype, fusion=args.fusion)
    baseline = plan_spec(args.baseline, args.model, args.hw, base)
    candidate = plan_spec(args.candidate, args.model, args.hw, base)
    with _Bar("compare", not args.json) as bar:
        c = compare_plans(
            baseline,
            candidate,
            parse_int_list(args.batch, "batch"),
            parse_int_list(args.seq, "seq"),
            CompareSettings(args.threshold, args.load_fraction, args.seed, args.requests),
            bar,
            tuple(parse_dim(d) for d in args.dim),
        )
    if args.out:
        write_comparison(c, args.out)
    if store_cli.store_of(args):
        doc = comparison_document(c)
        store_cli.record_from_args(args, store_cli.comparison_record(args, doc), "compare", args.out)
    if args.json:
        print(json.dumps(comparison_document(c), indent=1))
        return 0
    print(f"baseline:  {baseline.describe()}\ncandidate: {candidate.describe()}\n")
    wide = c.matrix.pivot_table(
        index=["batch", "seq"], columns="metric", values="change", aggfunc="first", dropna=False, sort=False
    )
    verdict = c.matrix.pivot_table(
        index=["batch", "seq"], columns="metric", values="verdict", aggfunc="first", dropna=False, sort=False
    )
    print("relative change, candidate vs baseline (verdict):")
    print((wide.map(lambda v: f"{v:+.1%}") + " " + verdict).to_string())
    print("\nrollback boundary:")
    print(c.boundary.to_string(index=False))
    if len(c.kernel_changes):
        print(f"\n{len(c.kernel_changes)} kernels changed class (first 10):")
        print(
            c.kernel_changes[["batch", "seq", "candidate_kernel", "baseline_class", "candidate_class"]]
            .head(10)
            .to_string(index=False)
        )
    print(f"\n{c.summary}")
    for line in c.provenance["assumptions"]:
        print(f"assumption: {line}", file=sys.stdout)
    if args.out:
        print(f"wrote {args.out}")
    return 0
