"""Fuzz the untrusted-input boundary: N cases (models, hardware profiles, CSV traces) through the public API.

    .venv/bin/python bench/fuzz.py --cases 100000 --workers 2          # the full run (resumable)
    .venv/bin/python bench/fuzz.py --summarize bench/out/fuzz.jsonl    # figures from a (partial) run

Each case comes from tests/fuzz_cases.make_case(seed), so any line of the log replays with
`run_case(make_case(seed))`. Workers run cases under a per-case SIGALRM bound and an address-space
cap; the parent kills a worker that goes silent (a hang in C code) and restarts it after that seed.
Prints counts of mapped / rejected / unhandled exceptions / hangs / blow-ups and the slowest cases.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import selectors
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASE_TIMEOUT_S = 10.0  # SIGALRM bound per case inside the worker
SILENCE_KILL_S = 60.0  # a worker silent this long is stuck in C code: killed, the case is a hang
ADDRESS_SPACE_BYTES = 6 << 30  # per worker: a blow-up becomes MemoryError instead of taking the machine


def worker(seeds: list[int], timeout_s: float) -> None:
    """Run the seeds, one JSON line each on stdout."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    from tests.fuzz_cases import CaseTimeout, make_case, run_case, time_bound

    for seed in seeds:
        start = time.perf_counter()
        record = {"seed": seed}
        try:
            case = make_case(seed)
            record["label"] = case.label[:160]
            with time_bound(timeout_s):
                record["outcome"] = run_case(case)
        except CaseTimeout:
            record["outcome"] = "hang"
        except MemoryError:
            record["outcome"] = "blowup"
        except Exception as exc:  # noqa: BLE001 - the fuzzer's job is to record every crash
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            record["outcome"] = "unhandled"
            record["error"] = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno}: {str(exc)[:160]}"
        record["s"] = round(time.perf_counter() - start, 4)
        record["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(json.dumps(record), flush=True)


def run(cases: int, first: int, workers: int, out: Path, timeout_s: float) -> None:
    """Split seeds over workers, restart any that dies or hangs, append every record to `out`."""
    done = set()
    if out.exists():  # resume: seeds already in the log are not rerun
        done = {json.loads(line)["seed"] for line in out.read_text().splitlines() if line.strip()}
    todo = [s for s in range(first, first + cases) if s not in done]
    chunks = [todo[k::workers] for k in range(workers)]
    log = out.open("a")
    procs: dict[int, tuple[subprocess.Popen, list[int], float]] = {}
    sel = selectors.DefaultSelector()

    def spawn(k: int, seeds: list[int]) -> None:
        if not seeds:
            return
        # contiguous runs only: a chunk is todo[k::workers], so pass the explicit list via a file
        path = out.with_suffix(f".seeds{k}")
        path.write_text(" ".join(map(str, seeds)))
        p = subprocess.Popen(
            [sys.executable, __file__, "--worker-seeds", str(path), "--timeout", str(timeout_s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        procs[k] = (p, seeds, time.monotonic())
        sel.register(p.stdout, selectors.EVENT_READ, k)

    for k, seeds in enumerate(chunks):
        spawn(k, seeds)
    count, t0 = len(done), time.monotonic()
    buffers: dict[int, bytes] = {}
    while procs:
        for key, _ in sel.select(timeout=1.0):
            k = key.data
            p, seeds, _ = procs[k]
            chunk = os.read(p.stdout.fileno(), 1 << 16)  # all that is ready: a line-at-a-time read would stall
            if not chunk:  # worker ended (finished or died)
                sel.unregister(p.stdout)
                p.wait()
                del procs[k]
                buffers.pop(k, None)
                if seeds:  # died mid-chunk: the case it was on is a crash of the process
                    log.write(
                        json.dumps(
                            {
                                "seed": seeds[0],
                                "outcome": "unhandled",
                                "s": 0,
                                "error": f"worker exited with {p.returncode}",
                            }
                        )
                        + "\n"
                    )
                    spawn(k, seeds[1:])
                continue
            *lines, buffers[k] = (buffers.get(k, b"") + chunk).split(b"\n")
            for line in lines:
                log.write(line.decode() + "\n")
                seeds = seeds[1:]
                count += 1
                if count % 2000 == 0:
                    log.flush()
                    rate = (count - len(done)) / (time.monotonic() - t0)
                    print(f"{count} cases, {rate:.1f}/s", flush=True)
            procs[k] = (p, seeds, time.monotonic() if lines else procs[k][2])
        for k, (p, seeds, last) in list(procs.items()):
            if time.monotonic() - last > SILENCE_KILL_S:  # stuck where SIGALRM cannot reach
                sel.unregister(p.stdout)
                p.kill()
                p.wait()
                del procs[k]
                log.write(
                    json.dumps(
                        {"seed": seeds[0], "outcome": "hang", "s": SILENCE_KILL_S, "error": "worker silent, killed"}
                    )
                    + "\n"
                )
                spawn(k, seeds[1:])
    log.close()
    for k in range(workers):
        out.with_suffix(f".seeds{k}").unlink(missing_ok=True)
    summarize(out)


def summarize(out: Path) -> None:
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    counts = collections.Counter(r["outcome"] for r in records)
    kinds = collections.Counter((r.get("label") or "?").split(":")[0] for r in records)
    print(
        f"cases: {len(records)}  "
        + "  ".join(f"{k}: {counts.get(k, 0)}" for k in ("mapped", "rejected", "unhandled", "hang", "blowup"))
    )
    print("by generator:", dict(kinds.most_common()))
    times = sorted(r["s"] for r in records)
    if times:
        print(
            f"per case: median {times[len(times) // 2] * 1e3:.1f} ms, p99 {times[int(len(times) * 0.99)] * 1e3:.0f} ms,"
            f" max {times[-1]:.2f} s; peak worker RSS {max(r.get('rss_mb', 0) for r in records)} MB"
        )
    print("slowest cases (seed, s, label):")
    for r in sorted(records, key=lambda r: -r["s"])[:8]:
        print(f"  {r['seed']:>7} {r['s']:7.2f}  {r.get('label', '')[:100]}")
    bad = [r for r in records if r["outcome"] in ("unhandled", "hang", "blowup")]
    for error, group in collections.Counter(r.get("error", r["outcome"]) for r in bad).most_common(20):
        example = next(r["seed"] for r in bad if r.get("error", r["outcome"]) == error)
        print(f"  {group} x {error} (e.g. seed {example})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds per case")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "fuzz.jsonl")
    ap.add_argument("--summarize", type=Path, help="print the figures of an existing log and stop")
    ap.add_argument("--worker-seeds", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_seeds:
        worker([int(s) for s in args.worker_seeds.read_text().split()], args.timeout)
        return
    if args.summarize:
        summarize(args.summarize)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run(args.cases, args.first, args.workers, args.out, args.timeout)


if __name__ == "__main__":
    main()
