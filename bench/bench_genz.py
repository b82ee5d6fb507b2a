"""A Llama-2-70B decode step, TP 8 on H100, bf16, batch 8 over 2,048 cached tokens: this engine beside GenZ.

GenZ (`genz-llm` on PyPI, Apache-2.0, the analytical LLM model of "Demystifying Platform Requirements for
Diverse LLM Inference Use Cases", Bambhaniya et al. 2024) reads a per-layer table of the model; this engine
builds, imports and walks the 4,970-node graph, maps 2,483 kernels and tiles and costs each distinct one. Both
run in child processes, taking turns, CPU seconds of the call alone (imports outside it):

- GenZ, first call in a fresh process (`decode_moddeling`, its model table loaded by the call) and a repeat;
- this engine cold (a fresh handle: the built-in built, bound and mapped) and warm (the same handle, a rebind
  and a map: what a sweep or the dashboard pays per slice).

GenZ is installed in a throwaway venv, never in the project's (its pins differ):

    python3 -m venv /tmp/genz-venv && /tmp/genz-venv/bin/pip install genz-llm==0.0.16
    .venv/bin/python bench/bench_genz.py --runs 5 [--genz-python /tmp/genz-venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

GENZ_CHILD = r"""
import json, time
from GenZ import decode_moddeling
def call():
    t = time.process_time()
    out = decode_moddeling(model="meta-llama/Llama-2-70B", batch_size=8, input_tokens=2048, output_tokens=1,
                           system_name="H100_GPU", bits="bf16", tensor_parallel=8)
    return time.process_time() - t, out["Latency"]
(cold, latency), (warm, _) = call(), call()
print(json.dumps({"cold": cold, "warm": warm, "latency_ms": latency}))
"""

ENGINE_CHILD = r"""
import json, time
import mapper
hw, options = mapper.load_hardware("h100-sxm"), mapper.PlanOptions(dtype="bf16", tp=8)
dims = {"batch": 8, "seq": 1, "past": 2048}
mapper.map_workload(mapper.open_model("gpt2-small").bind({"batch": 1, "seq": 1, "past": 8}), hw, options)  # imports
t = time.process_time()
handle = mapper.open_model("llama2-70b")
result = mapper.map_workload(handle.bind(dims), hw, options)
cold = time.process_time() - t
t = time.process_time()
mapper.map_workload(handle.bind(dims | {"past": 2047}), hw, options)
warm = time.process_time() - t
print(json.dumps({"cold": cold, "warm": warm, "latency_ms": result.totals.latency_s * 1e3}))
"""


def _child(python: str, code: str) -> dict:
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--genz-python", default="/tmp/genz-venv/bin/python")
    args = ap.parse_args(argv)
    if not Path(args.genz_python).exists():
        print(f"no GenZ interpreter at {args.genz_python}: see this file's docstring to install it")
        return 2
    runs: dict[str, list[dict]] = {"GenZ 0.0.16": [], "this engine": []}
    for _ in range(args.runs):
        runs["GenZ 0.0.16"].append(_child(args.genz_python, GENZ_CHILD))
        runs["this engine"].append(_child(sys.executable, ENGINE_CHILD))
    print(f"Llama-2-70B decode step, TP 8, H100, bf16, batch 8, past 2048; CPU s, medians of {args.runs} processes")
    genz = statistics.median(r["cold"] for r in runs["GenZ 0.0.16"])
    for name, rows in runs.items():
        cold, warm = statistics.median(r["cold"] for r in rows), statistics.median(r["warm"] for r in rows)
        latency = statistics.median(r["latency_ms"] for r in rows)
        print(
            f"  {name:12s} first call {cold:.3f} s ({cold / genz:.2f}x GenZ's), repeat {warm:.3f} s;"
            f" its step: {latency:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
