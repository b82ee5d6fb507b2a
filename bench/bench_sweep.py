"""Sweep throughput: slices per second in-process, per core, and on a 2-worker Dask LocalCluster.

    .venv/bin/python bench/bench_sweep.py            # the acceptance grid, then BERT-base alone
    .venv/bin/python bench/bench_sweep.py --profile  # where one BERT-base slice's time goes
    .venv/bin/python bench/bench_sweep.py --shapes 5  # the 200-shape BERT-base sweep, 5 cold processes
    .venv/bin/python bench/bench_sweep.py --shapes 5 --workers 2  # the same on a 2-process pool (CPU: all of it)
    .venv/bin/python bench/bench_sweep.py --instructions --against ../other-checkout  # instructions a slice
    .venv/bin/python bench/bench_sweep.py --executors 3  # the 5,000-slice sweep: one process, Dask, a pool

The 200-shape sweep (issue 16's goal): BERT-base at batch 1-40 x seq 64, 128, 256, 384, 512 on h100-sxm with
one option set, each run in a fresh process; it prints the sweep's slices per CPU-second (`run_sweep` from a
cold process: the built-in built and parsed, every cache empty; also with pandas' import counted) and the
whole command's wall time (interpreter start-up and imports included), medians over the runs. Goals: at least
200 slices per CPU-second, the command under 2 s.

The acceptance grid: ResNet-50 and BERT-base x 6 batches x 5 sequence lengths x 2 dtypes x 2 fusion
policies x 2 profiles (ResNet-50 has no sequence dim: 6 shapes, BERT-base 30). CPU seconds are
reported beside wall seconds: on a shared machine wall time counts other people's work too.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from mapper.explore.executors import executor_spec
from mapper.explore.sweep import SweepSpec, run_sweep

GRID = dict(
    hardware=("h100-sxm", "a100-sxm-80gb"),
    batches=(1, 2, 4, 8, 16, 32),
    seqs=(128, 256, 512, 1024, 2048),
    dtypes=("bf16", "fp16"),
    fusions=("none", "aggressive"),
)


def timed(spec: SweepSpec, executor, label: str, bar: bool = False):
    # cold: run_sweep opens a fresh handle per model, so nothing is kept from an earlier sweep
    cpu, wall = time.process_time(), time.perf_counter()
    progress = None
    if bar:
        from rich.progress import Progress

        with Progress() as p:
            task = p.add_task(label, total=None)
            result = run_sweep(spec, executor, lambda d, t: p.update(task, completed=d, total=t))
    else:
        result = run_sweep(spec, executor, progress)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = len(result.table)
    print(
        f"{label:44s} {n:5d} slices  wall {wall:6.2f} s  {n / wall:7.1f} slices/s"
        + (f"  driver CPU {cpu:6.2f} s  {n / cpu:7.1f} slices per CPU-second" if executor.kind == "inprocess" else "")
    )
    return result


# Issue 16's grid: BERT-base at batch 1-40 x seq 64, 128, 256, 384, 512 on h100-sxm, one option set (each child's
# source, where mapper is imported)
SHAPES_SPEC = (
    'mapper.SweepSpec(models=("bert-base",), hardware=("h100-sxm",), batches=tuple(range(1, 41)),'
    " seqs=(64, 128, 256, 384, 512))"
)

SHAPES_CHILD = (
    r"""
import json, resource, sys, time
start = time.process_time()
import mapper
import mapper.explore.sweep  # the sweep's modules
import pandas  # and its table's library (which imports pyarrow), which the sweep would import on first use
imported = time.process_time()
workers = int(sys.argv[1])
spec = """
    + SHAPES_SPEC
    + r"""
executor = mapper.executor_spec("processes", workers=workers) if workers else mapper.executor_spec("inprocess")
n = len(mapper.run_sweep(spec, executor).table)
children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool's workers, once they have exited
sweep = time.process_time() - imported + children.ru_utime + children.ru_stime
print(json.dumps({"slices": n, "sweep_cpu_s": sweep, "import_cpu_s": imported - start}))
"""
)

# What importing pandas costs a process that has imported mapper (numpy, onnx): the part of the start-up that the
# sweep's table brings, shown beside the sweep's own CPU
PANDAS_CHILD = r"""
import time
import mapper
t = time.process_time()
import pandas
print(time.process_time() - t)
"""


def shapes_sweep(runs: int, workers: int = 0) -> None:
    """The 200-shape BERT-base sweep from cold processes: medians of slices/CPU-s and whole-command wall. With
    `workers`, on a process pool of that many: its workers' CPU is counted with the parent's.

    The sweep's CPU is `run_sweep`'s, in a fresh process (the built-in built and parsed, every cache empty);
    start-up (the interpreter, `import mapper` and the sweep's modules, pandas among them) is in the whole
    command's wall time. Each run also times pandas' import alone in a fresh process, and prints the rate
    with it counted as the sweep's."""
    rates, with_pandas, walls = [], [], []
    # As a user's Python runs it: with its bytecode cache (this machine's environment turns the cache off, and
    # every run then compiled the engine's modules again, ~0.07 s); one run first writes it, not counted.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import mapper"], env=env, check=True)
    for run in range(1, runs + 1):
        wall = time.perf_counter()
        command = [sys.executable, "-c", SHAPES_CHILD, str(workers)]
        out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        wall = time.perf_counter() - wall
        r = json.loads(out.stdout.strip().splitlines()[-1])
        pandas_s = float(subprocess.run([sys.executable, "-c", PANDAS_CHILD], capture_output=True, text=True,
                                        check=True, env=env).stdout)  # fmt: skip
        rates.append(r["slices"] / r["sweep_cpu_s"])
        with_pandas.append(r["slices"] / (r["sweep_cpu_s"] + pandas_s))
        walls.append(wall)
        print(
            f"run {run}: {r['slices']} slices, sweep {r['sweep_cpu_s']:.2f} CPU-s ({rates[-1]:.0f} slices per"
            f" CPU-second; {with_pandas[-1]:.0f} with pandas' import, {pandas_s:.2f} s, counted), start-up imports"
            f" {r['import_cpu_s']:.2f} CPU-s, whole command {wall:.2f} s wall"
        )
    print(
        f"median over {runs} ({f'{workers} worker processes' if workers else 'in-process'}):"
        f" {statistics.median(rates):.0f} slices per CPU-second (goal >= 200;"
        f" {statistics.median(with_pandas):.0f} with pandas' import counted),"
        f" whole command {statistics.median(walls):.2f} s (goal < 2 s); load average {os.getloadavg()[0]:.2f}"
    )


# The sweep's grid, or its first slice alone, in a fresh process: the difference of their instruction counts
# is the cost of 199 slices at a warm structure, free of the start-up both share
INSTRUCTIONS_CHILD = (
    r"""
import dataclasses, sys
import mapper, mapper.explore.sweep, pandas
full = sys.argv[1] == "full"
spec = """
    + SHAPES_SPEC
    + r"""
if not full:  # the grid's first slice alone
    spec = dataclasses.replace(spec, batches=spec.batches[:1], seqs=spec.seqs[:1])
mapper.run_sweep(spec, mapper.executor_spec("inprocess"))
"""
)


def instructions(against: list[str]) -> None:
    """Instructions a sweep slice executes (valgrind's callgrind, string hashes seeded): this machine's speed
    swings by half within minutes, a count does not (two runs agree within ~0.6%). With `against`, other
    checkouts of the engine counted the same way beside this one, and each one's ratio to this one."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind (the count needs its callgrind tool)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONHASHSEED": "0"}
    here = str(Path(__file__).resolve().parents[1])
    counts = {}
    for tree in [here, *against]:
        tree_env = env | {"PYTHONPATH": tree}
        subprocess.run([sys.executable, "-c", "import mapper"], env=tree_env, cwd=tempfile.gettempdir(), check=True)
        total = {}
        for mode in ("one", "full"):
            out = subprocess.run(
                ["valgrind", "--tool=callgrind", "--cache-sim=no", "--callgrind-out-file=/dev/null",
                 sys.executable, "-c", INSTRUCTIONS_CHILD, mode],
                env=tree_env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True,
            )  # fmt: skip
            total[mode] = int(re.search(r"Collected : (\d+)", out.stderr).group(1))
        counts[tree] = (total["full"] - total["one"]) / 199
        ratio = f"; {counts[tree] / counts[here]:.3f} of this checkout's" if tree != here else ""
        print(f"{tree}: {counts[tree] / 1e6:.2f} M instructions a BERT-base sweep slice{ratio}")


def profile_one() -> None:
    import mapper
    from mapper.explore.models import ModelShapes, model_source
    from mapper.pipeline import map_workload

    shapes = ModelShapes(model_source("bert-base"))
    hw = mapper.load_hardware("h100-sxm")
    workload = shapes.workload(8, 512)
    for _ in range(3):
        map_workload(workload, hw, mapper.PlanOptions(dtype="bf16", fusion="aggressive"))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        map_workload(workload, hw, mapper.PlanOptions(dtype="bf16", fusion="aggressive"))
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    t = time.process_time()
    for _ in range(5):
        ModelShapes(shapes.model).workload(8, 512)
    print(f"build + analyze one shape: {(time.process_time() - t) / 5 * 1e3:.1f} ms CPU")


GRID_5000 = [
    "bert-base",
    "--hw", "h100-sxm,a100-sxm-80gb,h200-sxm,b200,l4",
    "--batch", ",".join(str(b) for b in range(1, 41)),
    "--seq", "64,128,256,384,512",
    "--dtype", "bf16,fp16,fp8,int8,fp32",
    "--no-progress",
]  # fmt: skip


def executors_5000(runs: int) -> None:
    """The 5,000-slice sweep (BERT-base, 200 shapes x 5 profiles x 5 dtypes) as whole `mapper sweep` commands,
    in one process, on a 2-worker Dask LocalCluster and on a 2-process pool, taking turns; wall and CPU seconds
    (children included), medians over the runs, and each executor's speed-up over one process."""
    kinds = {
        "in-process": [],
        "dask, 2 workers": ["--executor", "dask", "--workers", "2"],
        "process pool, 2 workers": ["--executor", "processes", "--workers", "2"],
    }
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    cpus: dict[str, list[float]] = {k: [] for k in kinds}
    out = Path(tempfile.gettempdir()) / "bench-sweep-5000.parquet"
    for _ in range(runs):
        for kind, extra in kinds.items():
            before = os.times()
            wall = time.perf_counter()
            command = [sys.executable, "-m", "mapper", "sweep", *GRID_5000, "--out", str(out), *extra]
            subprocess.run(command, check=True, capture_output=True)
            walls[kind].append(time.perf_counter() - wall)
            after = os.times()
            cpus[kind].append(
                after.children_user + after.children_system - before.children_user - before.children_system
            )
    base = statistics.median(walls["in-process"])
    print(f"5,000-slice sweep, whole command, medians of {runs} (load average {os.getloadavg()[0]:.2f}):")
    for kind in kinds:
        wall, cpu = statistics.median(walls[kind]), statistics.median(cpus[kind])
        print(f"  {kind:24s} {wall:5.2f} s wall, {cpu:5.2f} CPU-s; {base / wall:.2f}x one process")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--executors", type=int, metavar="RUNS", help="the 5,000-slice sweep on each executor")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--shapes", type=int, metavar="RUNS", help="the 200-shape BERT-base sweep, RUNS cold processes")
    ap.add_argument("--workers", type=int, default=0, help="with --shapes: run it on a process pool of this many")
    ap.add_argument("--instructions", action="store_true", help="instructions a sweep slice executes (callgrind)")
    ap.add_argument("--against", nargs="*", default=[], metavar="CHECKOUT", help="with --instructions: beside these")
    args = ap.parse_args()
    if args.instructions:
        instructions(args.against)
        return 0
    if args.executors:
        executors_5000(args.executors)
        return 0
    if args.shapes:
        shapes_sweep(args.shapes, args.workers)
        return 0
    if args.profile:
        profile_one()
        return 0
    print(f"CPUs available: {len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.2f}")
    from mapper.zoo import zoo_model_bytes

    for name in ("resnet50", "bert-base"):
        zoo_model_bytes(name)  # built once per process; not part of a slice's cost
    full = SweepSpec(("resnet50", "bert-base"), **GRID)
    inproc = timed(full, executor_spec("inprocess"), "acceptance grid, in-process", bar=True)
    bert = SweepSpec(("bert-base",), **GRID)
    for run in range(1, 4):  # three cold runs: a shared machine's noise shows as their spread
        timed(bert, executor_spec("inprocess"), f"BERT-base grid, in-process (1 core), run {run}")
    if not args.skip_dask:
        dasked = timed(full, executor_spec("dask", workers=2), "acceptance grid, Dask LocalCluster 2x1")
        pd.testing.assert_frame_equal(dasked.table, inproc.table)
        print("Dask table == in-process table")
        timed(bert, executor_spec("dask", workers=2), "BERT-base grid, Dask LocalCluster 2x1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
