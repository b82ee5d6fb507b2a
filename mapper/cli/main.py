"""The command line: a second client of the public API (`mapper ...`, `python -m mapper ...`).

Bad input of any kind, or a feature whose extra is not installed: exit code 2 and one line on stderr beginning `error:`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mapper
from mapper.cli import review as review_cli
from mapper.cli import store as store_cli
from mapper.cli import sweep as sweep_cli
from mapper.cli.args import (
    Parser,
    add_load_args,
    add_model_args,
    add_store_args,
    options_from,
    question_from,
    slice_from,
)
from mapper.cli.evidence import add_arguments as add_evidence_commands
from mapper.cli.text import print_answer
from mapper.core.errors import MapperError, error_line, path_text, printable
from mapper.core.extras import missing_extra
from mapper.core.units import field_label, format_bytes, format_duration, format_field, format_number
from mapper.model.onnx_import import read_model_structure
from mapper.model.wire import STRIPPED_LOCATION
from mapper.report.reproduce import reproduce_command
from mapper.serve.serving import ServingConfig
from mapper.serve.trace import load_trace


def cmd_map(args) -> int:
    hw = mapper.load_hardware(args.hw)
    model, dims = slice_from(args)
    assessment = mapper.assess_slice(model, dims, hw, options_from(args), question_from(args))
    result = assessment.result
    if args.out:
        mapper.write_sheet(result, args.out)  # pandas: loaded only where a sheet is written
    doc = json_document(result, args)
    if store_cli.store_of(args):  # the sheet written, else the XLSX one
        sheet = None if args.out else (mapper.sheet_bytes(result, "xlsx"), "xlsx")
        store_cli.record_from_args(args, doc, "map", args.out, sheet)
    if args.json:
        print(json.dumps(doc, indent=1, allow_nan=False))
    else:
        print_summary(doc)
    return 0


def json_document(result: mapper.MappingResult, args) -> dict:
    """The mapping document, its reproduce line naming the files this command read (a built-in by its name)."""
    doc = mapper.mapping_document(result)
    model = None if args.model in mapper.ZOO_NAMES else args.model
    hw = None if args.hw in mapper.list_hardware() else args.hw
    doc["reproduce"] = reproduce_command(doc, model=model, hw=hw)
    return doc


def print_summary(doc: dict) -> None:
    """`mapper map`'s text: the slice and its KPIs, the assessment's rows, layer types, top kernels, memory."""
    t, memory, parallel = doc["totals"], doc["memory"], doc["parallel"]
    dims = ", ".join(f"{k} {v}" for k, v in doc["model"]["dims"].items()) or "static shapes"
    decode = (doc.get("assessment") or {}).get("decode_step")  # a decode step: its latency a TPOT, a token each
    latency, per = ("TPOT (decode step)", "tok/s") if decode else ("batch latency", "/s")
    print(
        f"{doc['model']['name']} on {doc['hardware']['name']} ({mapper.precision_text(doc)}; {dims}):"
        f" {latency} {format_duration(t['latency_s'])}, throughput {format_number(t['throughput_per_s'], per)}, MFU"
        f" {t['mfu']:.1%}, memory stall {t['memory_stall_fraction']:.1%}, {format_number(t['avg_power_w'], 'W')},"
        f" {t['kernels']} kernels"
    )
    print_answer(doc)
    print(f"{'layer type':24s} {'time share':>10s} {'MFU':>7s} {'stall':>7s}")
    for layer in doc["layer_types"]:
        print(f"{layer['layer_type']:24s} {layer['share']:10.1%} {layer['mfu']:7.1%} {layer['stall_fraction']:7.1%}")
    print("top kernels:")
    for k in sorted(doc["kernels"], key=lambda k: -k["time_s"])[:5]:
        print(f"  {format_duration(k['time_s']):>9s}  {k['bottleneck']:30s} {k['name'][:48]:48s} -> {k['owner']}")
    fit = "fits" if memory["fits"] else f"does not fit: short by {format_bytes(memory['shortfall_bytes'])}"
    print(
        f"memory per device {format_bytes(memory['per_device_bytes'])} of {format_bytes(memory['capacity_bytes'])}:"
        f" {fit}"
    )
    if parallel["devices"] > 1:
        print(
            f"parallel: TP {parallel['tp']} x PP {parallel['pp']} x DP {parallel['dp']} over {parallel['topology']},"
            f" {len(parallel['collectives'])} collectives, interconnect {parallel['interconnect_share']:.1%} of the"
            " time"
        )
    for c in doc["caveats"]:
        print(f"caveat: {c}")
    if doc["unmodeled"]:
        first = doc["unmodeled"][0]
        print(f"unmodeled: {len(doc['unmodeled'])} nodes (first: {first['op_type']}: {first['reason']})")


def cmd_hw(args) -> int:
    rows: list[dict[str, Any]] = []
    for name in mapper.list_hardware():
        hw = mapper.load_hardware(name)
        rows.append(
            {
                "name": name,
                "display_name": hw.display_name,
                "kind": hw.kind,
                "bf16_peak_flops_per_s": hw.matrix_peak_flops_per_s.get("bf16"),
                "dram_bandwidth_bytes_per_s": hw.dram_bandwidth_bytes_per_s,
                "tdp_w": hw.tdp_w,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            peak = f"{r['bf16_peak_flops_per_s'] / 1e12:7.1f} TFLOP/s bf16" if r["bf16_peak_flops_per_s"] else " " * 20
            print(
                f"{r['name']:14s} {r['display_name']:34s} {peak}  {r['dram_bandwidth_bytes_per_s'] / 1e9:7.0f} GB/s"
                f"  {r['tdp_w']:5.0f} W"
            )
    return 0


def cmd_zoo(args) -> int:
    entries = mapper.list_zoo()
    if args.json:
        print(json.dumps(entries, indent=1))
    else:
        for e in entries:
            print(f"{e['name']:12s} dims: {', '.join(e['dims']) or '-':18s} {e['description']}")
    return 0


def add_serve_args(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    add_load_args(p)
    p.add_argument(
        "--batch-policy",
        choices=("static", "dynamic"),
        default="dynamic",
        help="static: full batches only; dynamic: full or the oldest has waited --max-wait-ms",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", help="CSV of arrivals: arrival_s[, prompt_tokens, output_tokens] (replaces --rate)")
    p.add_argument("--jitter-cv", type=float, help="run-to-run coefficient of variation (default: the profile's)")
    p.add_argument("--jitter-dist", choices=("none", "lognormal", "exponential"), help="default: the profile's")
    p.add_argument("--service-time-s", type=float, help="a fixed batch time instead of the engine's (what-if)")
    p.add_argument(
        "--llm", action="store_true", help="prefill/decode serving (default for a model with a KV-cache input)"
    )
    p.add_argument(
        "--scheduler",
        choices=mapper.SCHEDULERS,
        default="prefill-first",
        help="LLM: which work each step runs (chunked: decodes plus a prompt chunk, Sarathi-Serve/vLLM)",
    )
    p.add_argument(
        "--chunk-tokens", type=int, default=512, help="LLM, chunked: prompt tokens prefilled per step (default 512)"
    )
    p.add_argument(
        "--compare-schedulers", action="store_true", help="LLM: also serve the same requests by every scheduler"
    )


def cmd_serve(args) -> int:
    if args.batch is not None:
        raise MapperError("serve forms its own batches: use --max-batch (and --batch-policy), not --batch")
    hw, options = mapper.load_hardware(args.hw), options_from(args)
    model, dims = slice_from(args, served=True)  # parsed once: every batch size and step binds this handle
    trace = load_trace(args.trace) if args.trace else None
    config = ServingConfig(
        args.batch_policy,
        seed=args.seed,
        jitter_cv=args.jitter_cv,
        jitter_dist=args.jitter_dist,
        trace=trace,
    )  # jitter None: the profile's
    question = question_from(
        args,
        config,
        decoder=True if args.llm else None,
        service_time_s=args.service_time_s,
        scheduler=args.scheduler,
        chunk_tokens=args.chunk_tokens,
        compare_schedulers=args.compare_schedulers,
    )
    assessment = mapper.assess_slice(model, dims, hw, options, question)
    if assessment.load.source == mapper.LoadSource.REFUSED:
        raise MapperError(assessment.load.refusal)
    doc = assessment.document()
    section = doc["serving"] | {"assessment": doc["assessment"]}
    store_cli.record_from_args(args, store_cli.serving_document(model, hw, options, dims, doc["serving"]), "serve")
    if args.json:
        print(json.dumps(section, indent=1, allow_nan=False))
    else:
        print_answer(doc)
        print_serving(doc["serving"])
    return 0


def print_serving(section: dict) -> None:
    """`mapper serve`'s text form: each field in people's units, the load curve and its knee, the assumptions."""
    for key, value in section.items():
        if key not in ("assumptions", "load_curve", "schedulers", "load", "speculative"):
            print(f"{field_label(key):28s} {format_field(key, value)}")
    print_speculative(section.get("speculative"))
    for point in section.get("load_curve", {}).get("points", []):
        print(
            f"load {point['load']:5.2f}  {format_number(point['offered_rate_per_s'], '/s'):>12s}"
            f"  p50 {format_duration(point['p50_s']):>9s}  p99 {format_duration(point['p99_s']):>9s}"
            f"  utilization {point['utilization']:.1%}"
        )
    if "load_curve" in section:
        curve = section["load_curve"]
        knee = curve["knee_index"]
        at_knee = None if knee is None else curve["points"][knee]["offered_rate_per_s"]
        print(
            f"knee: {'none' if at_knee is None else format_number(at_knee, '/s')}"
            f" (saturation {format_number(curve['saturation_rate_per_s'], '/s')})"
        )
        if curve["p99_target_s"] is not None:
            print(
                f"highest rate meeting p99 {format_duration(curve['p99_target_s'])}:"
                f" {format_number(curve['max_rate_meeting_target_per_s'] or 0, '/s')}"
            )
    print_schedulers(section.get("schedulers", ()))
    for line in section["assumptions"]:
        print(f"assumption: {line}")


def print_speculative(row: dict | None) -> None:
    """`mapper serve --speculative-draft`: the round at the operating point against the plain decode step."""
    if not row:
        return
    print(
        f"speculative round at batch {row['batch']}, context {row['context_tokens']:,.0f}: {row['draft_tokens']}"
        f" draft step{'s' if row['draft_tokens'] > 1 else ''} {format_duration(row['draft_steps_s'])} + verification"
        f" {format_duration(row['verify_s'])} ="
        f" {format_duration(row['round_s'])} for {row['tokens_per_round']:.2f} tokens ->"
        f" {format_duration(row['per_token_s'])} per token against a decode step of"
        f" {format_duration(row['decode_step_s'])} ({row['speedup']:.2f}x)"
    )


def print_schedulers(rows) -> None:
    """`mapper serve --compare-schedulers`: one line per scheduler, milliseconds."""
    if rows:
        print(f"{'scheduler':14s} {'TTFT p50/p90/p99 ms':>24s} {'TPOT p50/p90/p99 ms':>24s} {'e2e p50/p90/p99 s':>22s}")
    for row in rows:
        ttft, tpot, e2e = (
            "/".join(f"{row[f'{m}_{p}_s'] * k:.{d}f}" for p in ("p50", "p90", "p99"))
            for m, k, d in (("ttft", 1e3, 1), ("tpot", 1e3, 1), ("latency", 1, 2))
        )
        print(
            f"{row['scheduler']:14s} {ttft:>24s} {tpot:>24s} {e2e:>22s}"
            f"  {row['throughput_tokens_per_s']:,.0f} tok/s  {row['preemptions']} preemptions"
        )


COMMANDS: dict[str, tuple[Callable, str]] = {
    "map": (cmd_map, "map a model onto a device: kernels, timing, bottlenecks"),
    "hw": (cmd_hw, "list the built-in hardware profiles"),
    "zoo": (cmd_zoo, "list the built-in models"),
    "serve": (cmd_serve, "simulate serving requests: latency percentiles, throughput, utilization"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mapper", description="Map ONNX models onto accelerators and explain what limits them.")
    parser.add_argument("--version", action="version", version=f"mapper {mapper.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (fn, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=fn)
        if name == "map":
            add_model_args(p)
            add_load_args(p)
            p.add_argument("--out", help="write the mapping sheet: .xlsx, .csv, .json or .html")
        elif name == "serve":
            add_serve_args(p)
        if name in ("map", "serve"):
            add_store_args(p)
        p.add_argument("--json", action="store_true", help="print one JSON document")
    register_extra_commands(sub)
    return parser


def cmd_strip(args) -> int:
    structure, _ = read_model_structure(args.model)
    Path(args.out).write_bytes(structure.data)
    print(
        f"{path_text(args.out)}: {format_bytes(len(structure.data))}, {structure.stripped} weight tensors stripped"
        f" (shape-only external references to {STRIPPED_LOCATION!r}); map or upload it in place of the model"
    )
    return 0


def add_strip_command(sub) -> None:
    help_text = "write a model's graph without its weights (shape-only references), small enough to upload"
    p = sub.add_parser("strip", help=help_text, description=help_text)
    p.add_argument("model", help="an .onnx file (weights inside or external; external data is never read)")
    p.add_argument("-o", "--out", required=True, help="the graph-only .onnx to write (byte-identical on reruns)")
    p.set_defaults(func=cmd_strip)


def register_extra_commands(sub) -> None:
    """Commands that live in their own modules (each adds its parsers to `sub`)."""
    add_strip_command(sub)
    sweep_cli.add_arguments(sub)
    add_store_args(sub.choices["compare"])  # a comparison is recorded like a mapping
    add_evidence_commands(sub)  # probe, measure, calibrate
    review_cli.add_arguments(sub)
    store_cli.add_arguments(sub)  # trend


class _PrintableStream:
    """stdout with control characters from names written out (mapper.core.errors.printable): a node named
    with an ANSI escape or a CR cannot recolour, rewrite or beep the user's terminal."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    stdout, sys.stdout = sys.stdout, _PrintableStream(sys.stdout)
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except MapperError as exc:
        print(f"error: {error_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the system refuses (too long, a folder, no permission): bad input too
        if isinstance(exc, BrokenPipeError):
            return 0
        where = f" {path_text(exc.filename)}" if exc.filename is not None else ""
        print(f"error: {error_line(f'cannot use{where}: {exc.strerror or exc}')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout = stdout


def _run(args: argparse.Namespace) -> int:
    """The command; a package of an extra it needs and lacks: the MapperError naming the extra (exit 2)."""
    try:
        return args.func(args)
    except ImportError as exc:
        error = missing_extra(exc, f"`mapper {args.command}`" if getattr(args, "command", None) else "this command")
        if error is None:
            raise
        raise error from exc


if __name__ == "__main__":
    sys.exit(main())
