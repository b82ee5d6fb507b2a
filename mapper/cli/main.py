"""The command line: a second client of the public API (`mapper ...`, `python -m mapper ...`).

Bad input of any kind, or a feature whose extra is not installed: exit code 2 and one line on stderr beginning `error:`.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mapper
from mapper.cli import review as review_cli
from mapper.cli import search as search_cli
from mapper.cli import serve as serve_cli
from mapper.cli import store as store_cli
from mapper.cli import sweep as sweep_cli
from mapper.cli import train as train_cli
from mapper.cli import validate as validate_cli
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
from mapper.core.units import format_bytes, format_duration, format_number
from mapper.model.onnx_import import read_model_structure
from mapper.model.wire import STRIPPED_LOCATION
from mapper.report.json_text import write_json
from mapper.report.reproduce import reproduce_command


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
        write_json(doc, sys.stdout)
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


HW_TEXT_WIDTH = 110  # `mapper hw NAME` wraps the evidence note to a terminal's width


def cmd_hw_one(spec: str, as_json: bool) -> int:
    """One profile (a built-in name or a file): its headline figures and how they were obtained and checked."""
    hw = mapper.load_hardware(spec)
    evidence = hw.evidence
    said = "not stated in the profile"
    if as_json:  # the profile as its file has it (the evidence note under meta) and the hash a document records
        print(json.dumps({"sha256": hw.sha256, **hw.to_dict()}))
        return 0
    bf16 = hw.matrix_peak_flops_per_s.get("bf16")
    print(f"{hw.name}: {hw.display_name} ({hw.vendor}, {hw.kind}), profile sha {hw.sha256[:12]}")
    peak = f"{bf16 / 1e12:.1f} TFLOP/s bf16 dense, " if bf16 else ""
    print(
        f"  {peak}{hw.dram_bandwidth_bytes_per_s / 1e9:.0f} GB/s DRAM, {hw.tdp_w:.0f} W,"
        f" {hw.interconnect.link_bandwidth_bytes_per_s / 1e9:.0f} GB/s per device over {hw.interconnect.topology}"
    )
    for label, text in (
        ("obtained", evidence.obtained if evidence else said),
        ("checked", evidence.checked if evidence else said),
    ):
        lines = textwrap.wrap(text, width=HW_TEXT_WIDTH - 12, break_on_hyphens=False, break_long_words=False)
        print(f"  {label + ':':10s}" + ("\n" + " " * 12).join(lines))
    return 0


def cmd_hw(args) -> int:
    if args.name is not None:
        return cmd_hw_one(args.name, args.json)
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


COMMANDS: dict[str, tuple[Callable, str]] = {
    "map": (cmd_map, "map a model onto a device: kernels, timing, bottlenecks"),
    "hw": (cmd_hw, "list the built-in hardware profiles, or show one and how its figures were obtained"),
    "zoo": (cmd_zoo, "list the built-in models"),
    "serve": (serve_cli.cmd_serve, "simulate serving requests: latency percentiles, throughput, utilization"),
    "search": (search_cli.cmd_search, "search deployments of a decoder under a latency target: frontier and choice"),
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
            serve_cli.add_serve_args(p)
        elif name == "search":
            search_cli.add_search_args(p)
        elif name == "hw":
            p.add_argument(
                "name", nargs="?", help="one profile (a built-in name or a .toml file): its figures' evidence"
            )
        if name in ("map", "serve", "search"):
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
    validate_cli.add_arguments(sub)  # validate: the engine against measured kernels
    review_cli.add_arguments(sub)
    train_cli.add_arguments(sub)  # train: a training step
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
