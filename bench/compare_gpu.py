"""Set a `bench/gpu_kernels.py` CSV against the engine's predictions for the matching profile.

.venv/bin/python bench/compare_gpu.py data/evidence/h200/kernels.csv --hw h200-sxm [--timing eager] [--out errors.csv]

`--timing graph` (the default) sets each row's CUDA-graph time against the profile's graph launch cost;
`--timing eager`, its eagerly launched median against the profile's kernel launch cost.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys

import mapper
from mapper.evidence.microbench import compare_kernel_csv


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--hw", required=True)
    parser.add_argument("--timing", default="graph", choices=("graph", "eager"))
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    try:
        rows = compare_kernel_csv(args.csv, mapper.load_hardware(args.hw), args.timing)
    except mapper.MapperError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{'kind':18s} {'shape':18s} {'dtype':9s} {'measured':>10s} {'predicted':>10s} {'error':>7s}  class")
    for r in rows:
        print(
            f"{r['kind']:18s} {r['shape']:18s} {r['dtype']:9s} "
            f"{r['measured_s'] * 1e6:9.1f}u {r['predicted_s'] * 1e6:9.1f}u"
            f" {r['error']:+7.0%}  {r['predicted_class']}"
        )
    for kind in sorted({r["kind"] for r in rows}):
        errors = [abs(r["error"]) for r in rows if r["kind"] == kind and r["error"] is not None]
        print(f"median |error| {kind}: {statistics.median(errors):.0%} over {len(errors)} shapes")
    if args.out:
        with open(args.out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
