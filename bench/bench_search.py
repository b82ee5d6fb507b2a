"""Deployment search speed (issue 36): wall time, configurations served and pruned, and the choice, on three cases;
with --aiconfigurator, NVIDIA's AIConfigurator on the same cases in the same run, side by side.

    .venv/bin/python -m bench.bench_search              # the three cases, in this process
    .venv/bin/python -m bench.bench_search --case 8b    # one of them
    .venv/bin/python -m bench.bench_search --workers 2  # plans on a 2-process pool
    .venv/bin/python -m bench.bench_search --aiconfigurator /tmp/aic/bin/aiconfigurator  # and AIConfigurator's

The cases, each at TTFT p99 1000 ms and TPOT p99 30 ms, without a rate (each configuration at 80% of its own
saturation): `data/configs/llama-3-70b.json` in fp8 on 8x h200-sxm at 4000 prompt / 500 output tokens;
`data/configs/llama-3-8b.json` in bf16 on 8x h100-sxm at 1024/256; the built-in `mixtral-8x7b` in bf16 on
8x h200-sxm at 4000/500. Goal: each under 10 s on a 2-core machine. Wall time counts other people's work on
a shared machine: compare runs on an idle one, or the two tools' columns of one run.

AIConfigurator (`pip install aiconfigurator==0.12.*` in a throwaway venv, Apache-2.0) runs as its CLI does,
`aiconfigurator cli default --backend trtllm --total-gpus 8 --system h200_sxm|h100_sxm --isl --osl --ttft 1000
--tpot 30`, on the same config.json (fp8 for the 70B: `quantization_config` {quant_method fp8, dynamic
activations}, as an FP8 checkpoint declares it; Mixtral: `data/configs/mixtral-8x7b.json`, the built-in's
source). Its wall time is the whole process (imports and its perf database included), its configurations the
aggregated and disaggregated results its log counts, its choice the first row of the chosen experiment's
best_config_topn.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

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


AIC_SYSTEM = {"h200-sxm": "h200_sxm", "h100-sxm": "h100_sxm"}
FP8_DYNAMIC = {"quant_method": "fp8", "activation_scheme": "dynamic"}  # an FP8 checkpoint's config.json
AIC_CONFIG = {  # each case's config.json for AIConfigurator, and what an FP8 checkpoint adds to it
    "70b": ("data/configs/llama-3-70b.json", {"quantization_config": FP8_DYNAMIC}),
    "8b": ("data/configs/llama-3-8b.json", {}),
    "mixtral": ("data/configs/mixtral-8x7b.json", {}),
}
AIC_TIMEOUT_S = 1800


def run_aiconfigurator(name: str, executable: str) -> dict:
    """AIConfigurator's CLI on one case: wall time, results per experiment, the chosen experiment's first row."""
    _, hw, _, prompt, output = CASES[name]
    path, extra = AIC_CONFIG[name]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / name
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(json.loads(Path(path).read_text()) | extra))
        cmd = [executable, "cli", "default", "--model", str(model_dir), "--backend", "trtllm", "--total-gpus", "8"]
        cmd += ["--system", AIC_SYSTEM[hw], "--isl", str(prompt), "--osl", str(output), "--ttft", "1000"]
        cmd += ["--tpot", "30", "--save-dir", str(Path(tmp) / "out")]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=AIC_TIMEOUT_S, check=False)
        wall = time.perf_counter() - start
        log = done.stdout + done.stderr
        if done.returncode != 0:
            return {"case": name, "error": log.strip().splitlines()[-1] if log.strip() else f"exit {done.returncode}"}
        results = {m[0]: int(m[1]) for m in re.findall(r"Experiment (\w+) completed with (\d+) results", log)}
        chosen = re.search(r"Best Experiment Chosen: (\w+)", log)
        experiment = chosen.group(1) if chosen else max(results, key=results.get)
        found = sorted((Path(tmp) / "out").rglob(f"{experiment}/best_config_topn.csv"))
        row = next(csv.DictReader(found[0].open())) if found else {}
    return {"case": name, "wall_s": wall, "results": results, "experiment": experiment, "best": row}


def aic_choice(row: dict, experiment: str) -> str:
    """AIConfigurator's chosen configuration in the words mapper prints."""
    if experiment == "disagg":
        return (
            f"prefill {row['(p)parallel']} x{row['(p)workers']} (bs {row['(p)bs']}) + decode {row['(d)parallel']}"
            f" x{row['(d)workers']} (bs {row['(d)bs']})"
        )
    return f"{row['parallel']} x{8 // int(row['num_total_gpus'])} bs {row['bs']}"  # its num_total_gpus: a replica's


def print_aiconfigurator(row: dict) -> None:
    if "error" in row:
        print(f"         AIConfigurator: failed: {row['error'][:300]}")
        return
    best, n = row["best"], sum(row["results"].values())
    counts = ", ".join(f"{v} {k}" for k, v in row["results"].items())
    print(f"         AIConfigurator {row['wall_s']:6.1f} s  {n:4d} evaluated ({counts})")
    if not best:
        print("         AIConfigurator chosen: none")
        return
    print(
        f"         AIConfigurator chosen ({row['experiment']}): {aic_choice(best, row['experiment'])}:"
        f" {float(best['tokens/s/gpu']):,.0f} tok/s/device, TTFT {float(best['ttft']):.0f} ms,"
        f" TPOT {float(best['tpot']):.1f} ms"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(CASES), action="append", help="a case (default: all three)")
    p.add_argument("--workers", type=int, help="serve the plans on a process pool of this many workers")
    p.add_argument("--aiconfigurator", metavar="EXECUTABLE", help="also run AIConfigurator's CLI on each case")
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
        else:
            print(
                f"         chosen ({best['deployment']}): {best['configuration']}:"
                f" {best['tokens_per_s_per_device']:,.0f} tok/s/device, TTFT p99 {best['ttft_p99_s'] * 1e3:.0f} ms,"
                f" TPOT p99 {best['tpot_p99_s'] * 1e3:.1f} ms"
            )
        if args.aiconfigurator:
            print_aiconfigurator(run_aiconfigurator(name, args.aiconfigurator))


if __name__ == "__main__":
    main()
