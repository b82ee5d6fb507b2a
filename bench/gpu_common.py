"""What the GPU scripts share (bench/gpu_kernels.py, bench/gpu_decode.py): their common arguments, CUDA-event
timing, CUDA-graph capture and replay, and board power under a held load. Needs torch only where a GPU does.

A held load is a function captured in one CUDA graph (~10 ms of calls) and replayed back to back for some
seconds, so the GPU never waits on Python. Power is NVML's board power (`torch.cuda.power_draw`), the SM clock
NVML's (`torch.cuda.clock_rate`); both are read once a replay over the last two thirds of the hold (NVML's power
reading trails the load by about a second). The achieved rate is the work done over those replays' wall time.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import time

GRAPH_S = 10e-3  # one replay of a held load runs about this long
WARMUP_CALLS = 3  # before a capture, on a side stream (what torch.cuda.graph needs)


def parser(doc: str) -> argparse.ArgumentParser:
    """The arguments every GPU script takes: where the CSV goes, the device, and a quick run."""
    parse = argparse.ArgumentParser(description=doc.splitlines()[0])
    parse.add_argument("--out", required=True)
    parse.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parse.add_argument("--quick", action="store_true")
    return parse


def write_rows(path: str, rows: list[dict]) -> list[dict]:
    """The rows as a CSV at `path` (their keys the header); the rows, for printing."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows


def event_times(torch, fn, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `fn`, CUDA events around each."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def capture(torch, fn, calls: int):
    """`calls` calls of `fn` captured in one CUDA graph, after warm-up calls on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def graph_of(torch, fn, per_call_s: float):
    """(graph, calls): enough calls of `fn` (at `per_call_s` each) for one replay of about GRAPH_S."""
    calls = max(1, min(2000, math.ceil(GRAPH_S / max(per_call_s, 1e-7))))
    return capture(torch, fn, calls), calls


def replay_s(torch, graph) -> float:
    """Wall seconds of one replay, after one that warms it."""
    graph.replay()
    torch.cuda.synchronize()
    started = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def hold(torch, fn, work: float, seconds: float = 3.0) -> dict:
    """{mean_w, rate (work per second), sm_mhz} while `fn` runs back to back for `seconds`. A call's time is
    read from a one-call graph first (an eager call of a launch-bound step is the host's time, not the GPU's)."""
    one = capture(torch, fn, 1)
    per_call = replay_s(torch, one)
    del one
    graph, calls = graph_of(torch, fn, per_call)
    graph.replay()
    torch.cuda.synchronize()
    watts, clocks, replays = [], [], 0
    started = time.perf_counter()
    steady = None
    while (now := time.perf_counter()) - started < seconds:
        graph.replay()
        torch.cuda.synchronize()
        if now - started > seconds / 3:
            if steady is None:
                steady = time.perf_counter()
            else:
                replays += 1
            watts.append(torch.cuda.power_draw() / 1e3)  # NVML reports milliwatts
            clocks.append(torch.cuda.clock_rate())
    elapsed = time.perf_counter() - steady if steady else float("nan")
    del graph
    return {
        "mean_w": statistics.mean(watts) if watts else float("nan"),
        "rate": replays * calls * work / elapsed if replays else float("nan"),
        "sm_mhz": statistics.mean(clocks) if clocks else float("nan"),
    }


def at_rest(torch, seconds: float = 3.0) -> dict:
    """Board power with the context open and nothing running."""
    torch.cuda.synchronize()
    watts, clocks = [], []
    started = time.perf_counter()
    while (now := time.perf_counter()) - started < seconds:
        time.sleep(0.05)
        if now - started > seconds / 3:
            watts.append(torch.cuda.power_draw() / 1e3)
            clocks.append(torch.cuda.clock_rate())
    return {"mean_w": statistics.mean(watts), "rate": 0.0, "sm_mhz": statistics.mean(clocks)}
