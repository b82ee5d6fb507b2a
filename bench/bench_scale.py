"""Time per stage of mapping graphs of 10^4 and 10^5 nodes, shape by shape (bench/scale_graphs.py).

    .venv/bin/python bench/bench_scale.py [--sizes 10000,100000] [--shapes chain,fan-out] [--max-nodes]

Stages: import (bytes -> Graph), work (per-node work and layer types), map (fusion, kernels, layout,
tiling, cost, roll-up; h100-sxm, bf16) and document (the mapping document as JSON). Every run is cold
(plan caches cleared); times are this process's CPU seconds (the machine is shared). The last column is
t(largest) / t(smallest): ~10 for 10x the nodes is linear,
~100 quadratic. `--max-nodes` adds the chain at MAX_NODES (mapper/core/limits.py).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mapper
from bench.scale_graphs import SHAPES
from mapper.core import limits
from mapper.pipeline import load_model
from mapper.report.sheet import sheet_bytes

STAGES = ("import", "work", "map", "document")


def time_stages(shape: str, n: int, hw) -> tuple[int, dict[str, float]]:
    """(nodes mapped, seconds per stage) of one cold mapping of the shape at about n nodes."""
    model, dims = SHAPES[shape](n)
    data = model.SerializeToString()
    del model
    gc.collect()
    times, t0 = {}, time.process_time()
    graph = load_model(data, dims=dims)
    times["import"], t0 = time.process_time() - t0, time.process_time()
    workload = mapper.analyze_graph(graph)
    times["work"], t0 = time.process_time() - t0, time.process_time()
    result = mapper.map_workload(workload, hw, mapper.PlanOptions(dtype="bf16"))
    times["map"], t0 = time.process_time() - t0, time.process_time()
    sheet_bytes(result, "json")
    times["document"] = time.process_time() - t0
    return len(graph.nodes), times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--max-nodes", action="store_true", help=f"also the chain at MAX_NODES={limits.MAX_NODES}")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = [(shape, sizes) for shape in args.shapes.split(",")]
    if args.max_nodes:
        runs.append(("chain", [limits.MAX_NODES - 1]))
    hw = mapper.load_hardware("h100-sxm")
    print(
        f"{'shape':16s} {'nodes':>7s} "
        + " ".join(f"{s + ' s':>10s}" for s in STAGES)
        + f" {'total s':>8s} {'us/node':>8s} {'ratio':>6s}",
        flush=True,
    )
    for shape, shape_sizes in runs:
        first = None
        for n in shape_sizes:
            nodes, times = time_stages(shape, n, hw)
            total = sum(times.values())
            ratio = "" if first is None else f"{total / first:6.1f}"
            first = total if first is None else first
            print(
                f"{shape:16s} {nodes:7d} "
                + " ".join(f"{times[s]:10.3f}" for s in STAGES)
                + f" {total:8.2f} {total / nodes * 1e6:8.1f} {ratio:>6s}",
                flush=True,
            )


if __name__ == "__main__":
    main()
