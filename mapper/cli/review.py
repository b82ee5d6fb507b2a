"""`mapper review`: the meeting's five steps on one slice, written as a root-cause packet (zip).

Registered by mapper.cli.main through add_arguments(subparsers). Exit code 1 with --require-no-regression
when the chosen fix regresses a slice of the validation matrix (CI gates on it); bad input: exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys

import mapper
from mapper.cli import store as store_cli
from mapper.cli.args import add_load_args, add_model_args, add_store_args, options_from, question_from, slice_from
from mapper.cli.text import print_answer
from mapper.core.classes import OWNERS
from mapper.core.errors import MapperError
from mapper.report.json_text import write_json
from mapper.report.tables import write_bytes
from mapper.review.first_slice import parse_target


def add_arguments(subparsers) -> None:
    text = "review one slice in five steps (KPI, first failure, artifact, fix with owner, validation) -> packet.zip"
    p = subparsers.add_parser("review", help=text, description=text)
    add_model_args(p)
    add_load_args(p)
    p.add_argument("--fix", action="append", default=[], metavar="OPTION=VALUE", help="your fix (default: the best)")
    p.add_argument("--owner", default="", choices=("", *OWNERS), help="who owns the fix (default: the fix's owner)")
    p.add_argument("--note", default="", help="a note for the packet")
    p.add_argument("--target", help="first failing slice of: p99=MS, mfu=FRACTION or fit (default: p99 target/fit)")
    p.add_argument("--max-length", type=int, default=0, help="first failing slice: longest length searched")
    p.add_argument("--matrix-batch", help="validation matrix batches, comma-separated (default: half/same/double)")
    p.add_argument("--matrix-length", help="validation matrix lengths (seq, or a decoder's context), comma-separated")
    p.add_argument(
        "--trace",
        default="",
        help="a run of the slice (PyTorch profiler trace, Nsight Systems .sqlite export or ORT profile): step 3's "
        "measured evidence; the packet carries its sha256 and expects it beside reproduce.sh",
    )
    p.add_argument("--created-utc", default="", help="pin the packet's timestamp (reproduce.sh does)")
    p.add_argument("--require-no-regression", action="store_true", help="exit 1 if the fix regresses any slice")
    p.add_argument("--out", help="write the packet: a .zip file")
    p.add_argument("--json", action="store_true", help="print review.json")
    add_store_args(p)  # the baseline's mapping is recorded with the packet as its sheet
    p.set_defaults(func=cmd_review)


def _numbers(text: str | None, what: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise MapperError(f"--{what} {text!r} must be positive integers, comma-separated")
    return values


def _max_length(value: object) -> int:
    """--max-length's first number; 0 when it is not given."""
    numbers = _numbers(str(value), "max-length") if value else None
    return numbers[0] if numbers else 0


def request_from(args: argparse.Namespace):
    """The ReviewRequest of the flags (the review's modules, which load pandas, imported here: `mapper map`
    without a sheet loads none)."""
    from mapper.review.matrix import Grid, default_grid
    from mapper.review.review import ReviewRequest

    if args.out and not args.out.endswith(".zip"):
        raise MapperError(f"--out {args.out!r}: a review packet is a .zip file")
    model, dims = slice_from(args)
    grid = None
    batches, lengths = _numbers(args.matrix_batch, "matrix-batch"), _numbers(args.matrix_length, "matrix-length")
    if batches or lengths:
        default = default_grid(dims, model.roles)
        grid = Grid(batches or default.batches, lengths or default.lengths if default.axis else (None,), default.axis)
    return ReviewRequest(
        model=args.model,
        dims=dims,
        hardware=mapper.load_hardware(args.hw),
        options=options_from(args),
        question=question_from(args),
        fix=",".join(args.fix),
        owner=args.owner,
        note=args.note,
        grid=grid,
        target=parse_target(args.target) if args.target else None,
        max_length=_max_length(args.max_length),
        created_utc=args.created_utc,
        trace=args.trace,
    )


def cmd_review(args: argparse.Namespace) -> int:
    from mapper.review.packet import packet_bytes, review_document
    from mapper.review.review import run_review

    review = run_review(request_from(args))
    doc = review_document(review)
    if args.out:
        write_bytes(args.out, packet_bytes(review), "the review packet")
    store_cli.record_from_args(args, mapper.mapping_document(review.baseline), "review", args.out)
    if args.json:
        write_json(doc, sys.stdout)
    else:
        print_answer(mapper.mapping_document(review.baseline))
        print(f"mechanism: {review.mechanism}")
        for c in review.candidates:
            cost = f" ({c.cost})" if c.cost else ""
            state = f"rejected: {c.rejected}" if c.rejected else c.owner
            print(f"  candidate {c.label:36s} {c.option_text():28s} {c.gain_text()}{cost}  {state}")
        if review.request.fix and review.chosen:
            print(f"your fix: {review.chosen.label} ({review.chosen.option_text()}); {review.chosen_reason}")
        if review.validation:
            print(f"validation: {review.validation.summary}")
        print(f"first failing slice: {review.first_slice['sentence']}")
        if args.out:
            print(f"packet: {args.out}")
    regressed = review.validation.regressed_slices() if review.validation else []
    if args.require_no_regression and regressed:
        print(f"regression: the fix regresses {len(regressed)} slice(s): {json.dumps(regressed)}")
        return 1
    return 0
