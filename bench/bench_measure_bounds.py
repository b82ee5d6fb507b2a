"""Time and peak memory of `mapper measure` on issue 31's item 3 inputs: what each costs before its limit stops it.

    .venv/bin/python bench/bench_measure_bounds.py [--rows 131072] [--runs 10] [--profile-mb 256] [--cases ...]

Cases (each a fresh `python -m mapper measure` process; its peak is the largest resident set of it and its
measure child, from wait4):
  computed-rows  a row count computed from the input (x * 131072), ConstantOfShape [rows, 2048], a 2048 x 2048
                 MatMul: the gate sees no shape for it; under the limits in force (the defaults, or MAPPER_MEASURE_*
                 set in the environment) it is stopped with one line
  profile-*      a --profile file of --profile-mb that is refused: `1,` over and over (no event), the same behind
                 one ORT node event (decoded until MAX_TRACE_EVENTS), ORT node events cut short, ORT events none
                 of which is a node's kernel time; and for scale, a valid ORT profile of that size (accepted)
  queue          two measurements of a small model started together, MAPPER_MEASURE_CONCURRENT=1: the second
                 waits its turn (its place on stderr)
Times are wall seconds on whatever machine runs it; nothing here asserts them (docs/threat-model.md
quotes them). The test suite runs this on a tiny setting (tests/security/test_measure_bounds.py).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 2048  # the MatMul's K and N: a 16 MiB weight, 2 * rows * 2048^2 FLOPs a run


def computed_rows_model(rows: int) -> bytes:
    """x: int64 [1] (measure feeds ones); rows = x * `rows`; ConstantOfShape([rows, WIDTH]) @ W[WIDTH, WIDTH].
    Nothing before the run knows the row count: the importer leaves those tensors without a shape."""
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["rows"], name="rows"),
        helper.make_node("Concat", ["rows", "width"], ["shape"], axis=0, name="shape"),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["a"], value=numpy_helper.from_array(np.ones(1, np.float32)), name="fill"
        ),
        helper.make_node("MatMul", ["a", "w"], ["b"], name="matmul"),
        helper.make_node("ReduceSum", ["b"], ["y"], keepdims=0, name="sum"),
    ]
    inits = [
        numpy_helper.from_array(np.array([rows], np.int64), "scale"),
        numpy_helper.from_array(np.array([WIDTH], np.int64), "width"),
        numpy_helper.from_array(np.full((WIDTH, WIDTH), 1e-3, np.float32), "w"),
    ]
    graph = helper.make_graph(
        nodes,
        "computed_rows",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def tiny_model() -> bytes:
    """One Relu on [4]: what a --profile is matched against, and a measurement that takes a second."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def ort_event(name: str, ts: int) -> bytes:
    """One ORT profile node event as ORT writes it (~190 bytes)."""
    event = {
        "cat": "Node",
        "pid": 1,
        "tid": 1,
        "dur": 5,
        "ts": ts,
        "ph": "X",
        "name": name,
        "args": {"op_name": "Relu", "provider": "CPUExecutionProvider"},
    }
    return json.dumps(event).encode()


# name -> (head, unit, tail, what its one line names): the file is head + unit repeated + tail, of about the size
# asked. Each is refused; "valid" loads.
_NODE = ort_event("relu_kernel_time", 0)
PROFILES = {
    "ones": (b"[", b"1,", b"1]", "no complete"),
    "ones-behind-an-event": (b"[" + _NODE + b",", b"1,", b"1]", "MAX_TRACE_EVENTS"),
    "cut-short": (b"[", _NODE + b",", b"", "cut short"),
    "no-kernel-events": (
        b"[",
        ort_event("relu_fence_before", 0) + b",",
        ort_event("relu_fence_after", 0) + b"]",
        "_kernel_time",
    ),
    "valid": (b"[", _NODE + b",", ort_event("relu_kernel_time", 1) + b"]", ""),
}


def _repeats(name: str, size: int) -> int:
    head, unit, tail, _ = PROFILES[name]
    return max(0, (size - len(head) - len(tail)) // len(unit))


def profile_bytes(name: str, size: int) -> bytes:
    head, unit, tail, _ = PROFILES[name]
    return head + unit * _repeats(name, size) + tail


def write_profile(path: Path, name: str, size: int) -> None:
    """The file written a block at a time: this process stays small, so the peaks wait4 reports for the
    commands it starts are theirs (a child's peak counts what its parent held when it started)."""
    head, unit, tail, _ = PROFILES[name]
    block, count = unit * max(1, (1 << 20) // len(unit)), _repeats(name, size)
    per_block = len(block) // len(unit)
    with open(path, "wb") as f:
        f.write(head)
        for _ in range(count // per_block):
            f.write(block)
        f.write(unit * (count % per_block) + tail)


@dataclass(frozen=True)
class Outcome:
    case: str
    wall_s: float
    peak_bytes: int  # largest resident set of the process and its waited-for children
    returncode: int
    last_line: str


def run_measure(case: str, args: list[str], env: dict | None = None) -> Outcome:
    """`python -m mapper measure ARGS` in a fresh process: wall time, peak resident set (wait4), last stderr line."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "mapper", "measure", *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
    return Outcome(case, wall, usage.ru_maxrss * 1024, proc.returncode, lines[-1] if lines else "")


def bench_computed_rows(folder: Path, rows: int, runs: int) -> list[Outcome]:
    path = folder / "computed_rows.onnx"
    path.write_bytes(computed_rows_model(rows))
    return [run_measure(f"computed-rows {rows}", [str(path), "--runs", str(runs), "--hw", "cpu-x86"])]


def bench_profiles(folder: Path, size: int) -> list[Outcome]:
    model = folder / "tiny.onnx"
    model.write_bytes(tiny_model())
    out = []
    for name in PROFILES:
        path = folder / f"{name}.json"
        write_profile(path, name, size)
        out.append(run_measure(f"profile {name}", [str(model), "--profile", str(path), "--hw", "cpu-x86"]))
        path.unlink()
    return out


def _held(slot: Path) -> bool:
    """Whether someone holds the slot (a try at its lock that, if it gets it, lets go at once)."""
    if not slot.exists():
        return False
    with open(slot, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def bench_queue(folder: Path, rows: int, runs: int) -> list[Outcome]:
    """Two measurements at once, one slot: the second, started once the first holds the slot, waits its turn."""
    path = folder / "queued.onnx"
    path.write_bytes(computed_rows_model(rows))
    env = {"MAPPER_MEASURE_CONCURRENT": "1", "MAPPER_MEASURE_SLOTS": str(folder / "slots")}
    args = [str(path), "--runs", str(runs), "--hw", "cpu-x86"]
    t0 = time.perf_counter()
    first = subprocess.Popen(
        [sys.executable, "-m", "mapper", "measure", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not _held(folder / "slots" / "slot-0") and first.poll() is None:
        time.sleep(0.05)
    second = run_measure("queue: second of two", args, env)
    _, status, usage = os.wait4(first.pid, 0)
    first.returncode = os.waitstatus_to_exitcode(status)
    return [
        Outcome("queue: first of two", time.perf_counter() - t0, usage.ru_maxrss * 1024, first.returncode, ""),
        second,
    ]


CASES = ("computed-rows", "profiles", "queue")


def main(argv: list[str] | None = None) -> list[Outcome]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1 << 17, help="the computed row count (1 GiB of fp32 a tensor)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs, as `mapper measure` (plus 7 more)")
    parser.add_argument("--profile-mb", type=float, default=256, help="size of each --profile file")
    parser.add_argument("--queue-rows", type=int, default=4096, help="rows of the queued measurements' model")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    print(f"{'case':36s} {'wall s':>8s} {'peak MB':>8s} {'exit':>4s}  last line", flush=True)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="bench-measure-") as tmp:
        folder = Path(tmp)
        for case in args.cases.split(","):
            if case == "computed-rows":
                found = bench_computed_rows(folder, args.rows, args.runs)
            elif case == "profiles":
                found = bench_profiles(folder, int(args.profile_mb * (1 << 20)))
            elif case == "queue":
                found = bench_queue(folder, args.queue_rows, args.runs)
            else:
                parser.error(f"unknown case {case!r}; cases: {', '.join(CASES)}")
            for o in found:
                print(
                    f"{o.case:36s} {o.wall_s:8.1f} {o.peak_bytes / 1e6:8.0f} {o.returncode:4d}  {o.last_line[:160]}",
                    flush=True,
                )
            outcomes += found
    return outcomes


if __name__ == "__main__":
    main()
