"""Full mapping of every built-in model: import -> plan -> cost -> sheet; time and peak memory each.

    .venv/bin/python bench/bench_mapping.py [--format json|xlsx|csv|html]
    .venv/bin/python bench/bench_mapping.py --decode 5   # Llama-2-70B decode step at TP 8, 5 cold processes

--decode: Llama-2-70B, one decode step (seq 1, past 2048), bf16, TP 8 on h100-sxm, mapped in-process from a
cold model handle (open + bind + map, CPU seconds), then again on the warm handle; medians over the runs.
Goal (issue 16): under 0.3 s cold.

Each model runs in its own child process (so ru_maxrss is that model's peak); best of 3 runs.
Goals (issue 3): the 80-layer decoder under 1 s, ResNet-50 under 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import mapper

CHILD = r"""
import json, resource, sys, time
import mapper
from mapper.report.sheet import sheet_bytes
name, fmt = sys.argv[1], sys.argv[2]
hw = mapper.load_hardware("h100-sxm")
mapper.load_workload("resnet50")  # warm the imports
best = None
for _ in range(3):
    t0 = time.perf_counter()
    w = mapper.load_workload(name)  # a fresh model handle: a cold mapping each time
    t1 = time.perf_counter()
    r = mapper.map_workload(w, hw, mapper.PlanOptions(dtype="bf16"))
    t2 = time.perf_counter()
    size = len(sheet_bytes(r, fmt))
    t3 = time.perf_counter()
    run = (t3 - t0, t1 - t0, t2 - t1, t3 - t2)
    best = run if best is None or run[0] < best[0] else best
print(json.dumps({"total_s": best[0], "import_s": best[1], "map_s": best[2], "sheet_s": best[3],
                  "kernels": len(r.kernels), "nodes": len(w.nodes), "sheet_bytes": size,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


DECODE_CHILD = r"""
import json, time
import mapper
hw = mapper.load_hardware("h100-sxm")
mapper.map_workload(mapper.load_workload("resnet50"), hw)  # warm the imports
opts = mapper.PlanOptions(dtype="bf16", tp=8)
dims = {"batch": 1, "seq": 1, "past": 2048}
t0 = time.process_time()
model = mapper.open_model("llama2-70b")
t1 = time.process_time()
w = model.bind(dims)
t2 = time.process_time()
mapper.map_workload(w, hw, opts)
t3 = time.process_time()
mapper.map_workload(model.bind({"batch": 1, "seq": 1, "past": 2047}), hw, opts)  # warm handle, new binding
t4 = time.process_time()
print(json.dumps({"open_s": t1 - t0, "bind_s": t2 - t1, "map_s": t3 - t2, "warm_s": t4 - t3}))
"""


def decode_step(runs: int) -> None:
    rows = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", DECODE_CHILD], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        cold = r["open_s"] + r["bind_s"] + r["map_s"]
        print(
            f"open {r['open_s']:.3f} + bind {r['bind_s']:.3f} + map {r['map_s']:.3f} = {cold:.3f} s CPU cold;"
            f" warm handle {r['warm_s']:.3f} s"
        )
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    cold = statistics.median(r["open_s"] + r["bind_s"] + r["map_s"] for r in rows)
    print(
        f"median over {runs}: open {med['open_s']:.3f}, bind {med['bind_s']:.3f}, map {med['map_s']:.3f},"
        f" cold {cold:.3f} s CPU (goal < 0.3 s); warm {med['warm_s']:.3f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", default="json", choices=("json", "xlsx", "csv", "html"))
    parser.add_argument("--decode", type=int, metavar="RUNS", help="the Llama-2-70B TP-8 decode step, RUNS processes")
    args = parser.parse_args()
    if args.decode:
        decode_step(args.decode)
        return
    fmt = args.format
    print(f"sheet format: {fmt}; profile h100-sxm, bf16, built-in default dims (batch 1, seq 128, past 0)")
    print(
        f"{'model':12s} {'nodes':>6s} {'kernels':>7s} {'import s':>9s} {'map s':>7s} {'sheet s':>8s}"
        f" {'total s':>8s} {'peak MB':>8s}"
    )
    for name in mapper.ZOO_NAMES:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, name, fmt], capture_output=True, text=True, timeout=900, check=False
        )
        if out.returncode:
            print(f"{name:12s} failed: {out.stderr.strip().splitlines()[-1][:100]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{name:12s} {r['nodes']:6d} {r['kernels']:7d} {r['import_s']:9.3f} {r['map_s']:7.3f} {r['sheet_s']:8.3f}"
            f" {r['total_s']:8.3f} {r['peak_rss_mb']:8.0f}"
        )


if __name__ == "__main__":
    main()
