"""How long reading an Nsight Systems export takes, and the memory it holds, as the export grows.

Writes exports of N kernels in the schema `nsys export --type sqlite` writes (bench/nsys_schema_fixture.py's
tables), each kernel with its cudaLaunchKernel row and two NVTX ranges around the launch (a module scope and an
emit_nvtx op), reads each with mapper.evidence.nsys_trace.read_nsys_export and prints the wall time and (in a
second read, traced) the peak of Python allocations per size. Rows in all are 4 x N (the bound is MAX_TRACE_EVENTS).

    python bench/bench_nsys_read.py --kernels 10000 100000 250000
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.nsys_schema_fixture import PID, PUSH_POP, SCHEMA, TID


def write_export(path: Path, kernels: int) -> int:
    """An export of `kernels` kernels 10 us apart on one stream, launched from one thread; its size in bytes."""
    db = sqlite3.connect(path)
    for statement in SCHEMA:
        db.execute(statement)
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "cudaLaunchKernel"), (2, "sm90_xmma_gemm")])
    tid = (PID << 24) | TID
    starts = range(0, kernels * 10_000, 10_000)  # ns
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, 2, 2, 1, 1, 1, 128, 1, 1)",
        ((t + 5000, t + 9000, i + 1, PID << 24) for i, t in enumerate(starts)),
    )
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, 1, 0)",
        ((t + 100, t + 2000, tid, i + 1) for i, t in enumerate(starts)),
    )
    ranges = [(t, t + 3000, PUSH_POP, f"layers.{i % 32}.mlp", tid) for i, t in enumerate(starts)]
    ranges += [(t + 50, t + 2500, PUSH_POP, f"aten::linear, seq = {i}", tid) for i, t in enumerate(starts)]
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, ?, ?, ?)", ranges)
    db.commit()
    db.close()
    return path.stat().st_size


def main(argv: list[str] | None = None) -> list[tuple[int, int, float, int]]:
    from mapper.core import limits
    from mapper.evidence.nsys_trace import read_nsys_export

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args(argv)
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.kernels:
            path = Path(tmp) / f"export_{n}.sqlite"
            size = write_export(path, n)
            start = time.perf_counter()
            trace = read_nsys_export(path)
            wall = time.perf_counter() - start
            budget, limits.TRACE_SQL_SECONDS = limits.TRACE_SQL_SECONDS, 3600  # tracing allocations runs ~5x slower
            tracemalloc.start()
            read_nsys_export(path)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            limits.TRACE_SQL_SECONDS = budget
            assert len(trace.units) == n and all(u.scope for u in trace.units[:10])
            print(f"{n:>9,} kernels ({size / 1e6:7.1f} MB, {4 * n:,} rows): {wall:6.2f} s, peak {peak / 1e6:7.1f} MB")
            figures.append((n, size, wall, peak))
    return figures


if __name__ == "__main__":
    main()
