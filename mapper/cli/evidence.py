"""`mapper probe`, `mapper measure`, `mapper calibrate`: the evidence commands (registered by mapper/cli/main.py).

Each command is a thin client of mapper.evidence; bad input raises MapperError (one line, exit 2, in cli.py).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import mapper
from mapper.cli import store as store_cli
from mapper.cli.args import add_plan_args, add_store_args, options_from, parse_dim
from mapper.core.errors import MapperError
from mapper.core.settings import setting_text
from mapper.core.units import format_rate
from mapper.core.vocab import Runtime
from mapper.report.json_text import write_json

HOLDOUT_EVERY = 4  # with --trace, a quarter of the measured kernel groups are held back from the fit by default
MIN_SCORED_SHARE = 0.5  # a trace matched below this share gets no whole-model error (it would compare other work)


def _dims(args, model=None) -> dict[str, int] | None:
    """--dim bindings; with a model, --batch/--seq are resolved onto its own dim names (batch_size,
    sequence_length...) as `mapper map` does, so the run and the prediction bind the same dims."""
    dims = dict(parse_dim(d) for d in args.dim)
    if model is None:
        return dims or None
    return model.shortcut_dims(dims, getattr(args, "batch", None), getattr(args, "seq", None))


def add_arguments(subparsers) -> None:
    """Register probe, measure and calibrate on the main parser's subparsers."""
    p = subparsers.add_parser("probe", help="measure this machine (1 thread) and write a hardware profile TOML")
    p.add_argument("--out", required=True, help="the .toml file to write")
    p.add_argument("--quick", action="store_true", help="a fast, rougher probe (~1 s)")
    p.add_argument("--name", default="probed-cpu", help="meta.name of the profile (the file's stem should match)")
    p.set_defaults(func=cmd_probe)
    m = subparsers.add_parser(
        "measure",
        help="run a model on ONNX Runtime CPU and compare with the prediction",
        description="The model runs in a child process under MAPPER_MEASURE_MEMORY_BYTES, MAPPER_MEASURE_CPU_SECONDS "
        "and MAPPER_MEASURE_WALL_SECONDS (environment; defaults in mapper/core/limits.py); at most "
        "MAPPER_MEASURE_CONCURRENT run at once on the machine, the rest wait their turn (place shown on stderr) for "
        "up to MAPPER_MEASURE_QUEUE_SECONDS, then are refused.",
    )
    m.add_argument("model", help="an .onnx file or a built-in name")
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--runs", type=int, default=10)
    m.add_argument("--batch", type=int)
    m.add_argument("--seq", type=int)
    m.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE")
    m.add_argument("--hw", default=None, help="profile to predict with (default: probe this machine quickly)")
    add_plan_args(m)  # the plan the run ran: an ONNX Runtime run or profile is mapped with --runtime onnxruntime
    m.add_argument(
        "--profile",
        default=None,
        help="score a run made elsewhere instead: an ORT profile JSON, a PyTorch profiler trace (.json, .json.gz) "
        "or an Nsight Systems export (nsys export --type sqlite: .sqlite)",
    )
    m.add_argument(
        "--out", default=None, help="write the mapping sheet with a Measured section (.xlsx .csv .json .html)"
    )
    m.add_argument("--json", action="store_true")
    add_store_args(m)
    m.set_defaults(func=cmd_measure)
    c = subparsers.add_parser("calibrate", help="fit a profile's efficiency curves to measured models")
    c.add_argument("--hw", required=True, help="the profile to start from")
    c.add_argument("--on", nargs="*", default=[], metavar="MODEL", help="models to measure here and fit on")
    c.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="MODEL=TRACE",
        help="fit on a run made elsewhere: a model and its PyTorch trace, Nsight export or ORT profile",
    )
    c.add_argument(
        "--holdout-every",
        type=int,
        default=None,
        metavar="K",
        help="hold back every K-th measured kernel group from the fit and score it (default: 4 with --trace, else 0)",
    )
    c.add_argument("--holdout", nargs="*", default=[], metavar="MODEL", help="models to score, not fit")
    c.add_argument("--out", required=True, help="the calibrated .toml to write")
    c.add_argument("--runs", type=int, default=7)
    c.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="bindings for every model")
    c.add_argument("--statistic", default="min", choices=("min", "p50"), help="measured latency: best-of or median")
    c.set_defaults(func=cmd_calibrate)


def cmd_probe(args) -> int:
    from mapper.evidence.probe import probe_machine  # the evidence harness: loaded by the command that runs it

    profile = probe_machine(args.out, quick=args.quick, name=args.name)
    peak = profile["compute"]["matrix_peak_flops_per_s"]["fp32"]["value"]
    bw = profile["memory"]["dram_bandwidth_bytes_per_s"]["value"]
    launch = profile["overhead"]["kernel_launch_s"]["value"]
    print(
        f"wrote {args.out}: fp32 GEMM {peak / 1e9:.1f} GFLOP/s, DRAM {bw / 1e9:.1f} GB/s, "
        f"ORT dispatch {launch * 1e6:.2f} us per node (1 thread)"
    )
    return 0


def _hardware(spec):
    from mapper.evidence.probe import probe_machine  # the evidence harness: loaded by the command that runs it

    if spec:
        return mapper.load_hardware(spec)
    return mapper.load_hardware(probe_machine(None, quick=True))


def _plan(args, measurement) -> mapper.PlanOptions:
    """The plan the run ran: the plan flags (as `mapper map` takes them); a run on ONNX Runtime, here or in an
    imported ORT profile, is the exported graph as ORT runs it (ORT_PLAN's runtime) unless --runtime says otherwise."""
    from mapper.evidence.measure import ORT_PLAN  # the evidence harness: loaded by the command that runs it

    options = options_from(args)
    if not measurement.trace and options.runtime == Runtime.AUTO:
        return dataclasses.replace(options, runtime=ORT_PLAN.runtime)
    return options


def _waiting(place: int) -> None:
    """A measurement waiting for its turn (evidence/measure_slots.py) says its place on stderr as it changes."""
    from mapper.evidence.measure_slots import ordinal  # the evidence harness: loaded by the command that runs it

    print(
        f"measure: waiting for a turn to run, {ordinal(place)} in line ({setting_text('MEASURE_CONCURRENT')} at "
        f"once; refused after {setting_text('MEASURE_QUEUE_SECONDS')})",
        file=sys.stderr,
        flush=True,
    )


def cmd_measure(args) -> int:
    from mapper.evidence.compare import compare_measured  # the evidence harness: loaded by the command that runs it
    from mapper.evidence.measure import measure_model, measurement_from_profile

    model = mapper.open_model(args.model)  # parsed once for the run, the mapping and the node matching
    dims = _dims(args, model)
    if args.profile:
        measurement = measurement_from_profile(args.profile, model)
    else:
        measurement = measure_model(model, dims, threads=args.threads, runs=args.runs, on_wait=_waiting)
    result = mapper.map_workload(model.bind(dims), _hardware(args.hw), _plan(args, measurement))
    comparison = compare_measured(result, measurement)
    if args.out:  # the mapping sheet with its Measured section (pandas: loaded where a sheet is written)
        from mapper.report.sheet import write_sheet

        write_sheet(dataclasses.replace(result, measured=comparison), args.out)
    if store_cli.store_of(args):
        measured = dataclasses.replace(result, measured=comparison)
        sheet = None if args.out else (mapper.sheet_bytes(measured, "xlsx"), "xlsx")
        store_cli.record_from_args(args, mapper.mapping_document(measured), "measure", args.out, sheet)
    if args.json:
        doc = {**{k: v for k, v in measurement.to_dict().items() if k != "latencies_s"}, "comparison": comparison}
        write_json(doc, sys.stdout)
        return 0
    print_comparison(comparison, measurement.trace, measurement, result.hardware_name)
    return 0


WHOLE_PERCENT_FROM = 0.1  # shares from 10% up read in whole percent; smaller ones keep a decimal (4.3%)


def print_comparison(comparison: dict, trace: dict, measurement, hardware_name: str) -> None:
    """`mapper measure`'s text: the model line, the measured MFU and stall, the per-layer table, the largest
    mispredictions, and what a trace says beside them."""
    row = comparison["model"]
    runtime = trace["runtime"] if trace else f"ONNX Runtime ({measurement.provider}, {measurement.threads} thread(s))"
    print(
        f"{row['model']} on {runtime}: measured p50 "
        f"{row['measured_p50_s'] * 1e3:.2f} ms, p95 {row['measured_p95_s'] * 1e3:.2f}, "
        f"p99 {row['measured_p99_s'] * 1e3:.2f}; "
        f"predicted ({hardware_name}) {row['predicted_s'] * 1e3:.2f} ms, {_model_error(row, trace)}"
    )
    if not (trace and trace["matched_share"] < MIN_SCORED_SHARE):  # else it would describe other work
        print(
            f"measured MFU {_share(row['measured_mfu'])} (predicted {_share(row['predicted_mfu'])}); memory stall"
            f" {_share(row['measured_memory_stall_fraction'])} of measured kernel time (predicted"
            f" {_share(row['predicted_memory_stall_fraction'])} of latency); measured class = predicted for"
            f" {_share(row['class_agreement'])} of it"
        )
    print(
        f"{'layer type':20s} {'predicted ms':>12s} {'measured ms':>11s} {'idle ms':>7s} {'launch ms':>9s}"
        f" {'error':>6s} {'FLOP/s':>12s}"
        f" {'DRAM B/s':>10s}"
        f" {'roofline':>8s} {'MFU':>6s}  predicted class -> measured class (agreeing share of its time)"
    )
    for layer in comparison["layers"]:
        print(
            f"{layer['layer_type'][:20]:20s} {layer['predicted_s'] * 1e3:12.3f} {layer['measured_s'] * 1e3:11.3f}"
            f" {layer['idle_before_s'] * 1e3:7.3f} {layer['launch_s'] * 1e3:9.3f}"
            f" {_signed(layer['error']):>6s} {format_rate(layer['achieved_flops_per_s'], 'FLOP/s'):>12s}"
            f" {format_rate(layer['achieved_bytes_per_s'], 'B/s'):>10s} {_share(layer['roofline_efficiency']):>8s}"
            f" {_share(layer['measured_mfu']):>6s}  {layer['predicted_class']} -> {layer['measured_class']}"
            f" ({_share(layer['class_agreement'])})"
        )
    print("largest mispredictions (kernel group: predicted, measured, achieved, roofline share, class):")
    for g in comparison["kernels"][:5]:
        print(
            f"  {g['kernels'][0][:40]:40s} {g['predicted_s'] * 1e3:8.3f} ms, {g['measured_s'] * 1e3:8.3f} ms,"
            f" {format_rate(g['achieved_flops_per_s'], 'FLOP/s')}, {format_rate(g['achieved_bytes_per_s'], 'B/s')},"
            f" {_share(g['roofline_efficiency'])}, {g['predicted_class']} -> {g['measured_class']}"
        )
    if trace:
        _print_trace(trace)
    elif comparison["unmatched"]:
        print(f"unmatched measured time: {row['unmatched_s'] * 1e3:.3f} ms in {len(comparison['unmatched'])} nodes")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}" if value >= WHOLE_PERCENT_FROM else f"{value:.1%}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _model_error(row: dict, trace: dict) -> str:
    """The whole-model error, unless too little of a trace matched the mapping for it to mean anything."""
    if trace and trace["matched_share"] < MIN_SCORED_SHARE:
        return f"error not scored (only {trace['matched_share']:.0%} of the traced time matched a mapped kernel)"
    return f"error {row['error']:+.1%}" if row["error"] is not None else "error -"


def _print_trace(trace: dict) -> None:
    """What a PyTorch trace says beside per-kernel times: the matched share, idle gaps, launches, what is unmatched."""
    print(
        f"traced: {trace['traced_s'] * 1e3:.3f} ms per run in {trace['unit']}s ({trace['units']} over "
        f"{trace['runs']} run(s)); matched to mapped kernels {trace['matched_share']:.1%}; idle between them "
        f"{trace['idle_s'] * 1e3:.3f} ms per run"
        + (
            f"; {trace['launches_per_run']:.0f} launches per run, {trace['launch_s'] * 1e3:.3f} ms of CPU"
            f" ({trace['launch_s'] / trace['launches_per_run'] * 1e6:.1f} us each)"
            if trace["launches_per_run"]
            else ""
        )
    )
    for why, time_s in list(trace["unmatched_by_reason"].items())[:5]:
        print(f"  unmatched {time_s * 1e3:8.3f} ms: {why}")
    if trace.get("outside_runs_units"):
        print(
            f"  outside the runs: {trace['outside_runs_s'] * 1e3:.3f} ms in {trace['outside_runs_units']} unit(s)"
            " before the first pass over the graph or after the last (weight copies, inputs), not in any run's time"
        )


def _traces(specs: list[str]) -> list:
    """--trace MODEL=TRACE: each run made elsewhere, matched to its model."""
    from mapper.evidence.measure import (
        measurement_from_profile,
    )  # the evidence harness: loaded by the command that runs it

    out = []
    for spec in specs:
        model, sep, path = spec.partition("=")
        if not sep or not model or not path:
            raise MapperError(f"--trace {spec!r}: give MODEL=TRACE (resnet50=run.json.gz)")
        out.append(measurement_from_profile(path, model, model))
    return out


def cmd_calibrate(args) -> int:
    from mapper.evidence.calibrate import (
        calibrate,
        held_out_kernels,
        holdout_report,
    )  # the evidence harness: loaded by the command that runs it
    from mapper.evidence.measure import measure_model
    from mapper.evidence.profile_toml import write_toml

    dims = _dims(args)

    def measure(models):
        out = []
        for model in models:
            out.append(measure_model(model, dims, threads=1, runs=args.runs, on_wait=_waiting))
            print(f"measured {model}: min {min(out[-1].latencies_s) * 1e3:.2f} ms", file=sys.stderr)
        return out

    traces = _traces(args.trace)
    if not args.on and not traces:
        raise MapperError("calibrate: give models to measure here (--on) or runs made elsewhere (--trace MODEL=TRACE)")
    every = args.holdout_every if args.holdout_every is not None else (HOLDOUT_EVERY if traces else 0)
    train = measure(args.on) + traces
    name = Path(args.out).stem
    tree = calibrate(args.hw, train, statistic=args.statistic, name=name, holdout_every=every)
    held = held_out_kernels(args.hw, tree, train, every) if every else None
    report = tree.pop("calibration")
    Path(args.out).write_text(
        f"# calibrated by `mapper calibrate` on {', '.join(report['models'])} ({report['date']})\n"
        f"# Format: data/hardware/README.md\n\n" + write_toml(tree)
    )
    print(
        f"wrote {args.out}: fit on {len(train)} models, median |error| {report['median_abs_error_before']:.1%} -> "
        f"{report['median_abs_error_after']:.1%}"
    )
    if held is not None:
        print(
            f"  held back ({held['split']}): {held['kernel_groups']} kernel groups, {held['measured_s'] * 1e3:.2f} ms"
            f" measured; median |error| {held['median_abs_error_before']:.1%} -> {held['median_abs_error_after']:.1%},"
            f" their summed time {held['total_error_before']:+.1%} -> {held['total_error_after']:+.1%}"
        )
    if args.holdout:
        for row in holdout_report(args.hw, tree, measure(args.holdout), args.statistic):
            print(f"  held out {row['model']}: error {row['error_before']:+.1%} -> {row['error_after']:+.1%}")
    return 0
