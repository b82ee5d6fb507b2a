"""Deployment search speed (issue 36): wall time, configurations served and pruned, and the choice, on three cases.

    .venv/bin/python bench/bench_search.py              # the three cases, in this process
    .venv/bin/python bench/bench_search.py --case 8b    # one of them
    .venv/bin/python bench/bench_search.py --workers 2  # plans on a 2-process pool

The cases, each at TTFT p99 1000 ms and TPOT p99 30 ms, without a rate (each configuration at 80% of its own
saturation): `data/configs/llama-3-70b.json` in fp8 on 8x h200-sxm at 4000 prompt / 500 output tokens;
`data/configs/llama-3-8b.json` in bf16 on 8x h100-sxm at 1024/256; the built-in `mixtral-8x7b` in bf16 on
8x h200-sxm at 4000/500. Goal: each under 10 s on a 2-core machine. Wall time counts other people's work on
a shared machine: compare runs on an idle one.
"""

from __future__ import annotations

import argparse

import mapper
from mapper.core.targets import Targets
from mapper.explore.executors import executor_spec
from mapper.explore.search import run_search
from mapper.explore.search_space import SearchSpec

SLA = Targets(ttft_p99_s=1.0, tpot_p99_s=0.030)
CASES = {
    "70b": ("data/configs/llama-3-70b.json", "h200-sxm", "fp8", 4000, 500),
    "8b": ("data/configs/llama-3-8b.json", "h100-sxm", "bf16", 1024, 256),
    "mixtral": ("mixtral-8x7b", "h200-sxm", "bf16", 4000, 500),
}


def run_case(name: str, workers: int | None = None) -> dict:
    model, hw, dtype, prompt, output = CASES[name]
    spec = SearchSpec(8, prompt, output, targets=SLA, dtypes=(dtype,))
    executor = executor_spec("processes", workers) if workers else executor_spec()
    result = run_search(model, mapper.load_hardware(hw), spec, model, executor)
    doc = result.document()
    return {"case": name, "wall_s": result.wall_s, "evaluated": doc["evaluated"], "best": doc["best"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(CASES), action="append", help="a case (default: all three)")
    p.add_argument("--workers", type=int, help="serve the plans on a process pool of this many workers")
    args = p.parse_args(argv)
    for name in args.case or list(CASES):
        row = run_case(name, args.workers)
        counts, best = row["evaluated"], row["best"]
        pruned = sum(counts["pruned"].values())
        print(
            f"{name:8s} {row['wall_s']:6.1f} s  {counts['configurations']:4d} served  {pruned:3d} pruned"
            f"  {counts['mapped_steps']:4d} steps mapped"
        )
        if best is None:
            print("         chosen: none meets the SLA")
            continue
        print(
            f"         chosen: TP {best['tp']} PP {best['pp']} EP {best['ep']} {best['dtype']} kv {best['kv_dtype']}"
            f" x{best['replicas']} batch {best['max_batch']} chunk {best['chunk_tokens']}:"
            f" {best['tokens_per_s_per_device']:,.0f} tok/s/device, TTFT p99 {best['ttft_p99_s'] * 1e3:.0f} ms,"
            f" TPOT p99 {best['tpot_p99_s'] * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()
