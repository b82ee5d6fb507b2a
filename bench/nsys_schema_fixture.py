"""An Nsight Systems export's schema filled from a PyTorch CPU trace: the test fixture for the NVTX matching path.

No GPU was at hand to record `nsys profile --trace=cuda,nvtx` of a built-in; this writes a SQLite file with the
tables and columns `nsys export --type sqlite` writes (StringIds, CUPTI_ACTIVITY_KIND_KERNEL,
CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS; column names as in the Nsight Systems 2022.2 export committed under
data/evidence/nsys_saxpy) from a committed CPU `torch.profiler` trace (data/evidence/torch_cpu): each outermost CPU
op becomes one "kernel" of the op's own duration, launched by a `cudaLaunchKernel` row of the same correlation id at
the op's start on the op's thread; each module scope becomes an NVTX push/pop range named by its module path, and
each CPU op a range named as torch.autograd.profiler.emit_nvtx names one ("aten::conv2d, seq = 12"). The times are
CPU op times of that CPU run: the file exercises the reader and the matcher, it is not a GPU measurement.

    python bench/nsys_schema_fixture.py data/evidence/torch_cpu/resnet50.json.gz \
        data/evidence/nsys_fixture/resnet50.sqlite
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
from pathlib import Path

# Column lists as Nsight Systems writes them (hpcgroup/pipit's saxpy export, schema 2.9.1); only the columns the
# reader needs and a few that a real export never leaves empty.
SCHEMA = (
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
    (
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT"
        " NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,"
        " demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,"
        " gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL)"
    ),
    (
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT"
        " NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL)"
    ),
    (
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,"
        " category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER"
        " REFERENCES StringIds(id), domainId INTEGER)"
    ),
)
PID, TID = 4242, 4243  # the serialized global id of the one CPU thread: process in bits 24-47, thread in 0-23
PUSH_POP = 59  # ENUM_NSYS_EVENT_TYPE NvtxPushPopRange


def _events(path: Path) -> list[dict]:
    data = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    return [e for e in data["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]


def write_fixture(trace: Path, out: Path) -> dict[str, int]:
    """The export `out` made from the CPU trace's one thread; returns the rows written per table."""
    events = sorted(_events(trace), key=lambda e: (float(e["ts"]), -float(e["dur"])))
    out.unlink(missing_ok=True)
    db = sqlite3.connect(out)
    for statement in SCHEMA:
        db.execute(statement)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings) + 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[text], text))
        return strings[text]

    tid = (PID << 24) | TID
    counts = {"kernels": 0, "ranges": 0}
    open_until = 0.0  # the end of the outermost CPU op open now (its kernel covers its nested ops)
    for seq, e in enumerate(events):
        start, end = int(float(e["ts"]) * 1000), int((float(e["ts"]) + float(e["dur"])) * 1000)
        cat = e.get("cat", "")
        if cat == "cpu_op" or cat == "user_annotation":
            text = f"{e['name']}, seq = {seq}" if cat == "cpu_op" else e["name"]
            db.execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, 0)",
                (start, end, PUSH_POP, text, tid),
            )
            counts["ranges"] += 1
        if cat == "cpu_op" and start >= open_until:
            open_until = end
            corr = counts["kernels"] + 1
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0)",
                (start, start + 2000, tid, corr, sid("cudaLaunchKernel_v7000")),
            )
            name = sid(f"cpu_{e['name'].split('::')[-1]}")
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, 1, 1, 1, 128, 1, 1)",
                (start, end, corr, PID << 24, name, name),
            )
            counts["kernels"] += 1
    db.commit()
    db.execute("VACUUM")
    db.close()
    return counts


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a CPU torch.profiler trace (.json or .json.gz)")
    parser.add_argument("out", type=Path, help="the .sqlite file to write")
    args = parser.parse_args(argv)
    counts = write_fixture(args.trace, args.out)
    print(f"wrote {args.out}: {counts['kernels']} kernels, {counts['ranges']} NVTX ranges")
    return counts


if __name__ == "__main__":
    main()
