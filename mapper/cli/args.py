"""What every command shares: the one-line parser error, --dim parsing, the model and plan options.

Bad input of any kind: a MapperError (printed as one line beginning `error:`, exit code 2).
"""

from __future__ import annotations

import argparse
import dataclasses

import mapper
from mapper.core.errors import MapperError


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other bad input
        raise MapperError(
            f"{message} (see `mapper {self.prog.split()[-1]} --help`)"
            if " " in self.prog
            else f"{message} (see `mapper --help`)"
        )


def parse_dim(text: str) -> tuple[str, int]:
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
    p.add_argument(
        "--dtype",
        default="auto",
        choices=mapper.PLAN_DTYPES,
        help="the plan's precision; auto: the model's released precision",
    )
    p.add_argument(
        "--weight-dtype", default="same", choices=mapper.WEIGHT_DTYPES, help="weight-only quantization (decoder LLMs)"
    )
    p.add_argument("--fusion", default="default", choices=mapper.FUSION_POLICIES, help="the fusion policy")
    p.add_argument(
        "--attention-fusion",
        choices=("auto", "on", "off"),
        default="auto",
        help="FlashAttention-style fusion: auto follows --fusion (on in aggressive)",
    )
    p.add_argument(
        "--layout", default="auto", choices=mapper.LAYOUTS, help="conv layout; auto: the profile's preferred"
    )
    p.add_argument("--power-cap-w", type=float, help="cap the board power below the profile's TDP")
    p.add_argument("--devices", type=int, help="devices in all (= tp x pp x dp; the rest of tp x pp becomes dp)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (Megatron column/row GEMMs)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages, balanced by time")
    p.add_argument("--dp", type=int, help="data-parallel replicas")
    p.add_argument("--overlap-collectives", action="store_true", help="hide collectives behind the next compute")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel degree (mixture-of-experts layers)")
    p.add_argument(
        "--expert-imbalance", type=float, default=1.0, help="MoE load imbalance: busiest expert's tokens / mean"
    )
    p.add_argument(
        "--runtime", default="auto", choices=mapper.RUNTIMES, help="runtime preset (sets --kv-cache and --launch)"
    )
    p.add_argument("--kv-cache", default="auto", choices=mapper.KV_CACHE_MODES, help="decoder KV-cache update")
    p.add_argument("--launch", default="auto", choices=mapper.LAUNCHES, help="eager launches or graph replay")
    p.add_argument("--sparsity", default="dense", choices=mapper.SPARSITIES, help="structured sparsity of weights")


def parallel_degrees(devices: int | None, tp: int, pp: int, dp: int | None) -> tuple[int, int, int]:
    """--devices with --tp/--pp/--dp: the devices left over by tp x pp become data-parallel replicas."""
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("devices", devices)):
        if value is not None and value < 1:
            raise MapperError(f"--{name} {value} must be at least 1")
    if devices is None:
        return tp, pp, dp or 1
    if devices % (tp * pp):
        raise MapperError(f"--devices {devices} is not a multiple of tp x pp = {tp * pp}")
    if dp is not None and dp * tp * pp != devices:
        raise MapperError(f"--devices {devices} != tp x pp x dp = {tp * pp * dp}; drop one of them")
    return tp, pp, devices // (tp * pp)


def options_from(args) -> mapper.PlanOptions:
    """Every plan option from its flag (each PlanOptions field's flag writes the field's name: tests/test_reproduce.py
    checks the table), with --devices resolved into TP x PP x DP and --attention-fusion's auto/on/off."""
    tp, pp, dp = parallel_degrees(args.devices, args.tp, args.pp, args.dp)
    chosen = {f.name: getattr(args, f.name) for f in dataclasses.fields(mapper.PlanOptions)}
    attention = {"auto": None, "on": True, "off": False}[args.attention_fusion]
    return mapper.PlanOptions(**chosen | {"tp": tp, "pp": pp, "dp": dp, "attention_fusion": attention})


def workload_from(args) -> mapper.Workload:
    dims = dict(parse_dim(d) for d in args.dim)
    return mapper.load_workload(args.model, dims or None, batch=args.batch, seq=args.seq)


def add_store_args(p: argparse.ArgumentParser) -> None:
    """--store/--revision: record the command's result in the run store (mapper/cli/store.py records it)."""
    p.add_argument(
        "--store",
        nargs="?",
        const="default",
        default=None,
        metavar="URL",
        help="record the run: a database URL (sqlite:///runs.sqlite, postgresql://...), a file, or none for the"
        " default store in the user's data directory; default: $MAPPER_STORE when set",
    )
    p.add_argument(
        "--revision", help="the revision label of what was mapped (default: the git commit of the current directory)"
    )
