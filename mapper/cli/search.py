"""`mapper search MODEL --hw PROFILE --devices N`: the deployment search (mapper/explore/search.py), its flags and
its text form (the frontier table, the chosen plan, its neighbours' failures, the sensitivity, the command)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mapper
from mapper.cli import store as store_cli
from mapper.cli.args import add_load_args, speculative_from, targets_from
from mapper.core.errors import MapperError
from mapper.explore.executors import executor_spec
from mapper.explore.search import SearchResult, run_search
from mapper.explore.search_output import SHEET_FORMATS, search_record, search_sheet_bytes
from mapper.explore.search_space import BATCH_CAPS, CHUNK_CHOICES, PP_CHOICES, TP_CHOICES, SearchSpec
from mapper.report.tables import write_bytes

DEFAULT_PROMPT = 1024  # a prompt's tokens where --prompt-tokens gives none


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise MapperError(f"{text!r} must be integers separated by commas, e.g. 1,2,4") from None


def _words(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a decoder: an .onnx file, a Hugging Face config.json or a built-in name")
    p.add_argument("--hw", default="h100-sxm", help="a profile name (see `mapper hw`) or a profile file")
    p.add_argument("--devices", type=int, required=True, help="devices in the fleet")
    add_load_args(p)
    p.add_argument("--dtype", default="auto", choices=mapper.PLAN_DTYPES, help="compute precision (one)")
    p.add_argument("--dtypes", help="compute precisions to search, e.g. bf16,fp8 (replaces --dtype)")
    p.add_argument("--weight-dtypes", default="same", help="weight-only quantizations to search (default: same)")
    p.add_argument("--kv-dtypes", default="same,fp8", help="KV-cache precisions to search (default: same,fp8)")
    p.add_argument("--launches", default="auto", help="launch modes to search: auto,eager,graph (default: auto)")
    p.add_argument("--tps", default=",".join(map(str, TP_CHOICES)), help="TP degrees (default 1,2,4,8)")
    p.add_argument("--pps", default=",".join(map(str, PP_CHOICES)), help="PP degrees (default 1,2,4)")
    p.add_argument("--chunks", default=",".join(map(str, CHUNK_CHOICES)), help="chunked prefill's tokens a step")
    p.add_argument("--load", type=float, default=0.8, help="without --rate: the share of saturation served")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--multi-node", action="store_true", help="let one replica span nodes")
    p.add_argument(
        "--aggregated-only", action="store_true", help="leave disaggregated prefill/decode pools out of the space"
    )
    p.add_argument("--dask", metavar="ADDRESS", help="serve the plans on a Dask cluster (tcp://HOST:PORT)")
    p.add_argument("--workers", type=int, help="serve the plans on a local process pool of this many workers")
    p.add_argument("--top", type=int, default=12, help="frontier rows printed (default 12)")
    p.add_argument("--out", help="write the search's sheet: .xlsx (answer, configurations, frontier, pruned) or .json")


def spec_from(args, hw) -> SearchSpec:
    """The search's question from its flags; what the search does not cover is refused in one line."""
    if args.load_curve:
        raise MapperError("--load-curve: the search serves each configuration at one load; use `mapper serve`")
    caps = tuple(c for c in BATCH_CAPS if args.max_batch is None or c <= args.max_batch)
    if args.max_batch is not None and args.max_batch < 1:
        raise MapperError(f"--max-batch {args.max_batch} must be at least 1")
    return SearchSpec(
        args.devices,
        DEFAULT_PROMPT if args.prompt_tokens is None else args.prompt_tokens,
        args.output_tokens,
        args.rate,
        targets_from(args),
        args.load,
        200 if args.requests is None else args.requests,
        args.seed,
        _words(args.dtypes) if args.dtypes else (args.dtype,),
        _words(args.weight_dtypes),
        _words(args.kv_dtypes),
        _words(args.launches),
        _ints(args.chunks),
        caps,
        _ints(args.tps),
        _ints(args.pps),
        multi_node=args.multi_node,
        disaggregated=not args.aggregated_only,
        speculative=speculative_from(args),
    )


def cmd_search(args) -> int:
    hw = mapper.load_hardware(args.hw)
    spec = spec_from(args, hw)
    executor = executor_spec(None, args.workers, args.dask) if args.dask or args.workers else executor_spec()
    result = run_search(args.model, hw, spec, args.model, executor)
    write_outputs(args, result)
    if args.json:
        print(json.dumps(result.document(), indent=1, allow_nan=False))
    else:
        print_search(result, args.top)
    return 0


def write_outputs(args, result: SearchResult) -> None:
    """--out (the sheet) and --store (the chosen plan's record, with the sheet) where asked."""
    sheet = None
    if args.out:
        fmt = Path(args.out).suffix.lstrip(".")
        if fmt not in SHEET_FORMATS:
            raise MapperError(f"--out {args.out!r}: give a .xlsx or .json file name")
        write_bytes(args.out, search_sheet_bytes(result, fmt), "the search's sheet")
        sheet = (Path(args.out).read_bytes(), fmt)
    if store_cli.store_of(args):
        sheet = sheet or (search_sheet_bytes(result, "xlsx"), "xlsx")
        store_cli.record_from_args(args, search_record(result), "search", sheet=sheet)


LABEL = 62  # a decoder's configuration column: "TP 1 x EP 8 attention DP (bf16, kv fp8) x1 batch 512 chunk 2048"


def print_search(result: SearchResult, top: int) -> None:
    doc, s = result.document(), result.spec
    load = f"{s.rate_per_s:g} requests/s" if s.rate_per_s is not None else f"{s.load:.0%} of each one's saturation"
    if result.queue:
        load = f"{s.rate_per_s:g} requests/s" if s.rate_per_s is not None else "the highest rate meeting p99"
        print(f"{result.model} on {s.devices} x {result.hw}: requests served whole (dynamic batching), {load}")
        print("frontier (requests/s per device against request p99):")
        print(f"{'configuration':52s} {'req/s/dev':>9s} {'p99':>9s} {'J/req':>7s}  SLA")
        for p in result.frontier[:top]:
            print(
                f"{p.label[:52]:52s} {p.tokens_per_s_per_device:9,.0f} {p.latency_p99_s * 1e3:7.2f}ms"
                f" {p.energy_per_token_j:7.3f}  {'meets' if p.feasible else p.failure}"
            )
    else:
        print(
            f"{result.model} on {s.devices} x {result.hw}: {s.prompt_tokens} prompt / {s.output_tokens} output"
            f" tokens, {load}"
        )
        head = (
            f"{'configuration':{LABEL}s} {'tok/s/dev':>9s} {'tok/s/user':>10s} {'TTFT p99':>9s} {'TPOT p99':>9s}"
            f" {'J/tok':>6s}"
        )
        print("frontier (tokens/s per device against tokens/s per user):")
        print(head + "  SLA")
        for p in result.frontier[:top]:
            print(
                f"{p.label[:LABEL]:{LABEL}s} {p.tokens_per_s_per_device:9,.0f} {p.tokens_per_s_per_user:10.1f}"
                f" {p.ttft_p99_s * 1e3:7.0f}ms {p.tpot_p99_s * 1e3:7.1f}ms {p.energy_per_token_j:6.2f}"
                f"  {'meets' if p.feasible else p.failure}"
            )
    best = result.best
    if best is None:
        print("chosen: none of the configurations meets the SLA")
    else:
        print(f"chosen: {best.label}: {chosen_text(result, best)}")
        for line in doc["neighbours"]:
            print(f"beside it: {line}")
        for line in doc["sensitivity"]:
            print(f"sensitivity: {line}")
        print(f"reproduce: {doc['best']['command']}")
    counts = doc["evaluated"]
    pruned = ", ".join(f"{n} {k}" for k, n in counts["pruned"].items() if n)
    print(
        f"evaluated: {counts['configurations']} configurations served ({counts['mapped_steps']} steps mapped),"
        f" pruned: {pruned or 'none'}; {result.wall_s:.1f} s"
    )


def chosen_text(result: SearchResult, best) -> str:
    if result.queue:
        return (
            f"{best.tokens_per_s_per_device:,.0f} requests/s/device, p99 {best.latency_p99_s * 1e3:.2f} ms,"
            f" {best.energy_per_token_j:.3f} J/request"
        )
    return (
        f"{best.tokens_per_s_per_device:,.0f} tok/s/device, {best.tokens_per_s_per_user:.1f} tok/s/user,"
        f" TTFT p99 {best.ttft_p99_s * 1e3:.0f} ms, TPOT p99 {best.tpot_p99_s * 1e3:.1f} ms,"
        f" {best.energy_per_token_j:.2f} J/token"
    )
