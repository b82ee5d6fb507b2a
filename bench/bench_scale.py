"""Time per stage of mapping graphs of 10^4 and 10^5 nodes, shape by shape (bench/scale_graphs.py).

    .venv/bin/python bench/bench_scale.py [--sizes 10000,100000] [--shapes chain,fan-out] [--max-nodes]
    .venv/bin/python bench/bench_scale.py --memory [--shapes chain,transformer,fan-out] [--sizes 100000]

Stages: import (bytes -> Graph), work (per-node work and layer types), map (fusion, kernels, layout,
tiling, cost, roll-up; h100-sxm, bf16) and document (the mapping document as JSON). Every run is cold
(plan caches cleared); times are this process's CPU seconds (the machine is shared). The last column is
t(largest) / t(smallest): ~10 for 10x the nodes is linear,
~100 quadratic. `--max-nodes` adds the chain at MAX_NODES (mapper/core/limits.py).

`--memory`: memory per node instead of time. Each shape is mapped in a fresh child process; its resident set is
read after each stage and its peak at the end, each over the resident set before the import (the model's bytes
already built), over the node count. The JSON document is written twice, in separate children, side by side: as
the sheet writes it (`report.json_text`, the rows streamed from the result) and as one `json.dumps(indent=1)` of
the whole document (the writer before it).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import resource
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


WRITERS = {
    "streamed": lambda result: sheet_bytes(result, "json"),
    "whole dump": lambda result: json.dumps(mapper.mapping_document(result), indent=1, allow_nan=False).encode(),
}


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _memory_child(shape: str, n: int, writer: str, out) -> None:
    """In a fresh process: bytes per node held after each stage and at the peak, over the resident set before the
    import (ru_maxrss is the process's peak, so the child starts with the model built and nothing else)."""
    hw = mapper.load_hardware("h100-sxm")
    model, dims = SHAPES[shape](n)
    data = model.SerializeToString()
    del model
    gc.collect()
    base = _resident_bytes()
    held = {}
    graph = load_model(data, dims=dims)
    nodes = len(graph.nodes)
    held["import"] = _resident_bytes() - base
    workload = mapper.analyze_graph(graph)
    held["work"] = _resident_bytes() - base
    result = mapper.map_workload(workload, hw, mapper.PlanOptions(dtype="bf16"))
    held["map"] = _resident_bytes() - base
    text = WRITERS[writer](result)
    held["document"] = _resident_bytes() - base
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    out.send((nodes, {k: v / nodes for k, v in held.items()}, peak / nodes, len(text) / nodes))


def memory_per_node(shape: str, n: int, writer: str) -> tuple[int, dict[str, float], float, float]:
    """(nodes, bytes per node held after each stage, peak bytes per node, document bytes per node)."""
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("spawn").Process(target=_memory_child, args=(shape, n, writer, send))
    child.start()
    answer = receive.recv()
    child.join()
    return answer


def print_memory(shapes: list[str], sizes: list[int]) -> None:
    print(f"{'shape':16s} {'nodes':>7s} {'writer':>10s} " + " ".join(f"{s + ' KB':>11s}" for s in STAGES)
          + f" {'peak KB':>8s} {'JSON B':>7s}  (per node, over the resident set before the import)")  # fmt: skip
    for shape in shapes:
        for n in sizes:
            peaks = {}
            for writer in WRITERS:
                nodes, held, peaks[writer], text = memory_per_node(shape, n, writer)
                print(f"{shape:16s} {nodes:7d} {writer:>10s} " + " ".join(f"{held[s] / 1e3:11.2f}" for s in STAGES)
                      + f" {peaks[writer] / 1e3:8.2f} {text:7.0f}", flush=True)  # fmt: skip
            print(f"{shape:16s} peak, streamed / whole dump: {peaks['streamed'] / peaks['whole dump']:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--max-nodes", action="store_true", help=f"also the chain at MAX_NODES={limits.MAX_NODES}")
    parser.add_argument("--memory", action="store_true", help="memory per node at each size instead of time")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.memory:
        print_memory(args.shapes.split(","), sizes)
        return
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
