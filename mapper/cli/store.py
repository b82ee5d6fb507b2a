"""`mapper trend` and the recording glue every command calls (`record_from_args`) for --store/--revision.

The store is --store URL, else $MAPPER_STORE; with neither, nothing is recorded. The recorded run's id
goes to stderr, so --json output stays one document.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import mapper
from mapper.cli.args import add_store_args, parse_dim
from mapper.core.errors import MapperError
from mapper.core.units import format_field
from mapper.report.json_text import write_json
from mapper.store.kpis import KPIS, STORE_ENV, store_url_from_env

# The store's modules (and SQLAlchemy under them) load only when a command records or reads a store: every
# `mapper` command imports this module, and most record nothing.

REGRESSION_EXIT = 1  # `mapper trend --fail-on-regression`: a regression (bad input stays 2)


def store_of(args) -> str | None:
    return getattr(args, "store", None) or store_url_from_env()


def shown(url: str) -> str:
    """The store's URL without its password (what stdout and CI logs may show)."""
    import sqlalchemy as sa

    from mapper.store.schema import normalize_url

    return sa.make_url(normalize_url(url)).render_as_string(hide_password=True)


def record_from_args(args, document: dict, command: str, sheet_path: str | None = None, sheet=None) -> int | None:
    """Record `document` when a store is configured; the sheet is `sheet` (bytes, format) or the file written."""
    store = store_of(args)
    if store is None:
        return None
    if sheet is None and sheet_path:
        sheet = (Path(sheet_path).read_bytes(), Path(sheet_path).suffix.lstrip(".") or "bin")
    source = getattr(args, "model", None)
    name = Path(source).stem if source and source.endswith(".onnx") else source  # the file, not its graph's name
    from mapper.store.record import record

    run_id = record(store, document, command=command, revision=args.revision, sheet=sheet, model_name=name)
    print(f"recorded run {run_id} in {shown(store)}", file=sys.stderr)
    return run_id


def serving_document(model, hw, options, dims: dict | None, section: dict) -> dict:
    """`mapper serve`'s slice and its Serving section, in the mapping document's key names."""
    return {
        "model": {"name": model.name, "sha256": model.sha256, "dims": dict(dims or {})},
        "hardware": {"name": hw.name, "sha256": hw.sha256},
        "options": dataclasses.asdict(options),
        "engine_version": mapper.__version__,
        "serving": section,
    }


def comparison_record(args, doc: dict) -> dict:
    """`mapper compare`'s slice (the matrix's axes, both plans) with its document and the verdict as the failure."""
    return {
        "model": {"name": args.model, "sha256": "", "dims": {"batch": args.batch, "seq": args.seq}},
        "hardware": {"name": args.hw, "sha256": ""},
        "options": {"baseline": doc["baseline"], "candidate": doc["candidate"]},
        "engine_version": mapper.__version__,
        "comparison": doc,
    }


def add_arguments(subparsers) -> None:
    text = "a slice's KPIs across recorded revisions; flag (and fail on) a regression"
    p = subparsers.add_parser("trend", help=text, description=text)
    add_store_args(p)
    p.add_argument("--model", help="only this model (its name as recorded)")
    p.add_argument("--hw", help="only this hardware profile (its name as recorded)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="only slices with this binding")
    p.add_argument("--metric", choices=tuple(KPIS), help="the KPI to show (default: each slice's primary)")
    p.add_argument(
        "--fail-on-regression",
        nargs="+",
        action="extend",
        default=[],
        metavar="KPI=FRACTION",
        help=f"exit {REGRESSION_EXIT} when the latest revision is worse than the previous by more, e.g. p99=0.05",
    )
    p.add_argument("--json", action="store_true", help="print the trends as one JSON document")
    p.set_defaults(func=cmd_trend)


def cmd_trend(args) -> int:
    from mapper.store.trend import parse_thresholds, read_trends, trend_document

    store = store_of(args)
    if store is None:
        raise MapperError(f"trend needs --store URL (or ${STORE_ENV})")
    thresholds = parse_thresholds(args.fail_on_regression)
    dims = dict(parse_dim(d) for d in args.dim)
    trends = read_trends(store, args.model, args.hw, dims)  # every run: whoever has the URL has the database
    if trends.skipped_runs:
        print(
            f"warning: skipped {trends.skipped_runs} recorded run(s) whose stored fields do not read back"
            " (dims or options not JSON, or a KPI not a number): the store was written by hand or is damaged",
            file=sys.stderr,
        )
    doc = trend_document(list(trends.slices), thresholds, trends.skipped_runs)
    if args.json:
        write_json(doc, sys.stdout)
    else:
        print_trends(doc, args.metric)
    return REGRESSION_EXIT if thresholds and doc["regressed"] else 0


def print_trends(doc: dict, metric: str | None) -> None:
    if not doc["slices"]:
        print("no recorded runs match")
    for s in doc["slices"]:
        key, name = s["slice"], metric or s["primary_metric"] or "latency"
        column = KPIS[name][0]
        print(f"{key['title']}: {name} by revision")
        for p in s["points"]:
            value = p["kpis"][column]
            shown_value = "-" if value is None else format_field(column, value)
            print(f"  run {p['run_id']:6d}  {p['revision'][:24]:24s} {p['recorded_utc'][:19]}  {shown_value}")
        for r in s["regressions"]:
            was, now = (format_field(KPIS[r["kpi"]][0], r[k]) for k in ("previous", "latest"))
            print(
                f"  REGRESSION {r['kpi']}: {r['change']:+.1%} worse ({r['previous_revision']} -> "
                f"{r['latest_revision']}: {was} -> {now}), threshold {r['threshold']:.1%}"
            )
