"""The command line: a second client of the public API (`mapper ...`, `python -m mapper ...`).

Bad input of any kind: exit code 2 and one line on stderr beginning `error:`.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import mapper
from mapper.errors import MapperError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other bad input
        raise MapperError(f"{message} (see `mapper {self.prog.split()[-1]} --help`)" if " " in self.prog
                          else f"{message} (see `mapper --help`)")


def _dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.strip().lstrip("-").isdigit():
        raise MapperError(f"--dim {text!r} must look like NAME=INTEGER, e.g. --dim seq=512")
    return name.strip(), int(value)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an .onnx file or a built-in name (see `mapper zoo`)")
    p.add_argument("--hw", default="h100-sxm", help="a profile name (see `mapper hw`) or a profile file")
    p.add_argument("--batch", type=int, help="binds the model's batch dim")
    p.add_argument("--seq", type=int, help="binds the model's sequence dim")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="binds a symbolic dim by name")
    p.add_argument("--dtype", default="auto", help="auto (the model's own), fp32, tf32, bf16, fp16, fp8, int8")
    p.add_argument("--weight-dtype", default="same", help="same, int8 or int4 (weight-only, decoder LLMs)")
    p.add_argument("--fusion", default="default", help="none, default or aggressive")
    p.add_argument("--attention-fusion", choices=("auto", "on", "off"), default="auto",
                   help="FlashAttention-style fusion: auto follows --fusion (on in aggressive)")
    p.add_argument("--layout", default="auto", help="auto (the profile's preferred), nchw or nhwc")
    p.add_argument("--power-cap-w", type=float, help="cap the board power below the profile's TDP")


def options_from(args) -> mapper.PlanOptions:
    return mapper.PlanOptions(dtype=args.dtype, weight_dtype=args.weight_dtype, fusion=args.fusion,
                              attention_fusion={"auto": None, "on": True, "off": False}[args.attention_fusion],
                              layout=args.layout, power_cap_w=args.power_cap_w)


def workload_from(args) -> mapper.Workload:
    dims = dict(_dim(d) for d in args.dim)
    return mapper.load_workload(args.model, dims or None, batch=args.batch, seq=args.seq)


def cmd_map(args) -> int:
    result = mapper.map_workload(workload_from(args), mapper.load_hardware(args.hw), options_from(args))
    if args.out:
        from mapper.sheet import write_sheet
        write_sheet(result, args.out)
    if args.json:
        print(json.dumps(mapper.mapping_document(result), indent=1, allow_nan=False))
    else:
        print_summary(result)
    return 0


def print_summary(result: mapper.MappingResult) -> None:
    t = result.totals
    print(f"{result.model_name} on {result.hardware_name} ({t.dtype}, {dict(result.dims)}):"
          f" latency {t.latency_s * 1e3:.3f} ms, throughput {t.throughput_per_s:,.1f}/s, MFU {t.mfu:.1%},"
          f" memory stall {t.memory_stall_fraction:.1%}, {t.avg_power_w:.0f} W, {len(result.kernels)} kernels")
    print(f"{'layer type':24s} {'time share':>10s} {'MFU':>7s} {'stall':>7s}")
    for layer in result.layers:
        print(f"{layer.layer_type:24s} {layer.share:10.1%} {layer.mfu:7.1%} {layer.stall_fraction:7.1%}")
    print("top kernels:")
    for e in sorted(result.kernels, key=lambda e: -e.time_s)[:5]:
        print(f"  {e.time_s * 1e6:9.1f} us  {e.bottleneck:30s} {e.kernel.name[:40]:40s} {e.evidence} -> {e.owner}")
    for c in result.caveats:
        print(f"caveat: {c}")
    if result.unmodeled:
        print(f"unmodeled: {len(result.unmodeled)} nodes (first: {result.unmodeled[0][1]}: {result.unmodeled[0][2]})")


def cmd_hw(args) -> int:
    rows = []
    for name in mapper.list_hardware():
        hw = mapper.load_hardware(name)
        rows.append({"name": name, "display_name": hw.display_name, "kind": hw.kind,
                     "bf16_peak_flops_per_s": hw.matrix_peak_flops_per_s.get("bf16"),
                     "dram_bandwidth_bytes_per_s": hw.dram_bandwidth_bytes_per_s, "tdp_w": hw.tdp_w})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            peak = f"{r['bf16_peak_flops_per_s'] / 1e12:7.1f} TFLOP/s bf16" if r["bf16_peak_flops_per_s"] else " " * 20
            print(f"{r['name']:14s} {r['display_name']:34s} {peak}  {r['dram_bandwidth_bytes_per_s'] / 1e9:7.0f} GB/s"
                  f"  {r['tdp_w']:5.0f} W")
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
    "hw": (cmd_hw, "list the built-in hardware profiles"),
    "zoo": (cmd_zoo, "list the built-in models"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mapper", description="Map ONNX models onto accelerators and explain what limits them.")
    parser.add_argument("--version", action="version", version=f"mapper {mapper.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (fn, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=fn)
        if name == "map":
            add_model_args(p)
            p.add_argument("--out", help="write the mapping sheet: .xlsx, .csv, .json or .html")
        p.add_argument("--json", action="store_true", help="print one JSON document")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except MapperError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
