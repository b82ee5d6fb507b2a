"""`mapper validate`: the engine's error against measured truth (registered by mapper/cli/main.py).

A thin client of mapper.evidence.validate: AIConfigurator's measured tables (the `validate` extra), this project's
H200 kernels and Vidur's A100 ops, each row mapped as a one-op slice; error by source, device, op kind, dtype and
size band, the fit and held-back splits apart. Nothing is fitted.
"""

from __future__ import annotations

import json
import sys

from mapper.core.vocab import RowKind

KINDS = tuple(k.value for k in RowKind)
SOURCES = ("aiconfigurator", "project", "vidur")
DEFAULT_SAMPLE = 100
HEADLINE = ("source", "device", "kind", "dtype")


def add_arguments(subparsers) -> None:
    help_text = "the engine's error against measured kernels (AIConfigurator's tables, this project's, Vidur's)"
    p = subparsers.add_parser(
        "validate",
        help=help_text,
        description=help_text + ": each row mapped as a one-op slice on its device's profile; error = predicted / "
        "measured - 1, fit and held-back rows (whole shapes, a declared hash rule) apart. Nothing is fitted.",
    )
    p.add_argument("--device", help="one profile (h100-sxm, h200-sxm, b200, a100-sxm-80gb)")
    p.add_argument("--kind", choices=KINDS, help="one op kind")
    p.add_argument("--source", action="append", choices=SOURCES, help="a source to read (repeat; default: all)")
    p.add_argument(
        "--sample",
        type=int,
        default=DEFAULT_SAMPLE,
        metavar="N",
        help=f"rows a table, the same on every run (default {DEFAULT_SAMPLE}; 0: every row, a long run)",
    )
    p.add_argument("--seed", default="", help="another deterministic sample (a string mixed into the row hash)")
    p.add_argument("--no-bands", action="store_true", help="the headline table only (no size bands)")
    p.add_argument("--json", action="store_true", help="print one JSON document: every row and the summaries")
    p.set_defaults(func=cmd_validate)


def _sources(args) -> tuple[str, ...]:
    """The sources asked for; AIConfigurator's dropped with a note on stderr when its extra is absent and it
    was not asked for by name."""
    import importlib.util

    chosen = tuple(args.source or SOURCES)
    if args.source is None and importlib.util.find_spec("aiconfigurator_core") is None:
        from mapper.core.extras import install_hint

        print(f"validate: aiconfigurator-core is not installed ({install_hint('validate')}); its tables are skipped",
              file=sys.stderr)  # fmt: skip
        chosen = tuple(s for s in chosen if s != "aiconfigurator")
    return chosen


def cmd_validate(args) -> int:
    from mapper.core.errors import MapperError
    from mapper.evidence import aiconfigurator as aic
    from mapper.evidence.validate import run, summarize

    if args.sample < 0:
        raise MapperError(f"--sample {args.sample}: give a row count a table, or 0 for every row")
    per_table = args.sample or None
    scored, tables = run(args.device, args.kind, per_table, _sources(args), args.seed)
    if not scored:
        raise MapperError("no measured rows match --device/--kind/--source")
    headline = summarize(scored, HEADLINE)
    bands = [] if args.no_bands else summarize(scored)
    if args.json:
        doc = {"split_rule": aic.SPLIT_RULE, "tables": tables, "summary": headline, "bands": bands}
        doc["rows"] = [s.to_dict() for s in scored]
        print(json.dumps(doc, indent=1, allow_nan=False))
        return 0
    read = sum(t["rows"] for t in tables)
    print(
        f"{len(scored)} measured rows mapped ({len(tables)} AIConfigurator tables of {read} rows, "
        f"{'every row' if per_table is None else f'up to {per_table} a table'}); error = predicted / measured - 1"
    )
    print(f"split: {aic.SPLIT_RULE}")
    print_table(headline, HEADLINE)
    if bands:
        print()
        print_table(bands, (*HEADLINE, "band"))
    return 0


def _cells(stats: dict) -> str:
    if not stats.get("n"):
        return f"{0:>5d} {'-':>6s} {'-':>6s} {'-':>7s} {'-':>7s}"
    return (
        f"{stats['n']:5d} {stats['median_abs']:6.1%} {stats['p90_abs']:6.1%} {stats['worst']:+7.0%} "
        f"{stats['bias']:+7.1%}"
    )


def print_table(groups: list[dict], by: tuple[str, ...]) -> None:
    """One line a group: its key, then n, median |error|, p90 |error|, worst and bias for fit and held-back."""
    widths = {"source": 14, "device": 13, "kind": 17, "dtype": 24, "band": 13}
    key = " ".join(f"{name:{widths[name]}s}" for name in by)
    stats = f"{'n':>5s} {'median':>6s} {'p90':>6s} {'worst':>7s} {'bias':>7s}"
    print(f"{'':{len(key)}s}  {'fit':^35s} | {'held back':^35s}")
    print(f"{key}  {stats} | {stats}")
    for g in groups:
        cells = " ".join(f"{str(g[name])[: widths[name]]:{widths[name]}s}" for name in by)
        print(f"{cells}  {_cells(g['fit'])} | {_cells(g['held-back'])}")
