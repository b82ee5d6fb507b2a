"""Benchmark: the engine's error against measured truth over AIConfigurator's tables (and the project's H200 and
Vidur's A100 rows), with the rows mapped per second.

    .venv/bin/python bench/bench_validate.py [--sample N | --full] [--device D] [--kind K] [--json OUT]

The same table as `mapper validate` (mapper/evidence/validate.py): error = predicted / measured - 1 by source,
device, op kind, dtype and size band, fit and held-back rows apart (aiconfigurator.SPLIT_RULE), nothing fitted.
By default 1000 rows a table (the same rows on every run, ~1 minute on 2 cores); --full maps every row of every
covered table (2.2 million rows on the four profiled systems, roughly an hour: the slices are cached by shape
across frameworks and versions). Needs the `validate` extra (aiconfigurator-core).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mapper.cli.validate import HEADLINE, KINDS, print_table
from mapper.evidence import aiconfigurator as aic
from mapper.evidence.validate import run, summarize


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=1000, help="rows a table (default 1000)")
    parser.add_argument("--full", action="store_true", help="every row of every covered table")
    parser.add_argument("--device")
    parser.add_argument("--kind", choices=KINDS)
    parser.add_argument("--json", type=Path, help="also write every scored row and the summaries here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    scored, tables = run(args.device, args.kind, None if args.full else args.sample)
    elapsed = time.perf_counter() - start
    read = sum(t["rows"] for t in tables)
    print(
        f"{len(scored):,} rows mapped in {elapsed:.1f} s = {len(scored) / elapsed:,.0f} rows/s "
        f"({len(tables)} AIConfigurator tables of {read:,} rows; "
        f"{'every row' if args.full else f'up to {args.sample} a table'})"
    )
    print(f"split: {aic.SPLIT_RULE}")
    print(f"no profile (not compared): {', '.join(f'{k} ({v} tables)' for k, v in aic.unprofiled_systems().items())}")
    headline, bands = summarize(scored, HEADLINE), summarize(scored)
    print_table(headline, HEADLINE)
    print()
    print_table(bands, (*HEADLINE, "band"))
    if args.json:
        doc = {"tables": tables, "summary": headline, "bands": bands, "rows": [s.to_dict() for s in scored]}
        args.json.write_text(json.dumps(doc, allow_nan=False))


if __name__ == "__main__":
    main()
