"""Import measured per-node times (ONNX Runtime profile JSON, PyTorch/Chrome trace) and match them to ONNX nodes.

Evidence stage two. `load_profile` reads one file (or bytes) and validates it; `match_nodes` ties each
measured node to the original ONNX nodes it ran: by node name, by the tensor it writes (ORT keeps the
original output name of a fused chain), by the name with ORT's suffixes stripped ("r2_nchwc" -> tensor r2),
and through ORT's optimized graph. What matches nothing is kept, with the reason, never dropped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.evidence.json_events import trace_events
from mapper.model.sandbox import open_regular_file

# Suffixes ORT adds to the names of nodes it creates or rewrites (NCHWc transformer, fusions, name dedup).
_ORT_SUFFIXES = re.compile(r"(_kernel_time|_nchwc|_fusion|_fused|_token_\d+|_\d+)$")
_CHROME_CATEGORIES = ("user_annotation", "gpu_user_annotation", "cpu_op", "kernel", "python_function")


@dataclass(frozen=True, slots=True)
class NodeTime:
    """One measured node: its time per model run (median call x calls per run)."""

    name: str
    op_type: str
    time_s: float
    calls_per_run: int
    provider: str = ""


@dataclass(frozen=True, slots=True)
class ProfileTimes:
    kind: str  # onnxruntime | chrome-trace
    runs: int
    nodes: tuple[NodeTime, ...]
    run_times_s: tuple[float, ...] = ()  # whole-run durations where the profile has them (ORT model_run)
    skipped: int = 0  # complete events whose duration or start is not a finite number in range

    @property
    def total_s(self) -> float:
        return sum(n.time_s for n in self.nodes)


@dataclass(frozen=True, slots=True)
class NodeMatch:
    """A measured node and the original ONNX nodes it ran (empty with a reason when unmatched)."""

    name: str
    op_type: str
    time_s: float
    onnx_nodes: tuple[str, ...]
    how: str  # name | output | stripped-name | optimized-graph | unmatched: <why>
    idle_s: float = 0.0  # a trace's idle time on its thread or stream just before these units, per run
    launch_s: float = 0.0  # a GPU trace's CPU time in the runtime calls that launched these units, per run


def read_bounded(source: str | os.PathLike | bytes) -> tuple[bytes, str]:
    """A profile's or trace's bytes (a regular file, or an upload's) and how messages name it; past MAX_TRACE_BYTES
    it is refused before it is read."""
    if isinstance(source, (bytes, bytearray)):
        raw, label = bytes(source), "uploaded profile"
    else:
        path = Path(source)
        label = f"profile {path.name}"
        try:  # a regular file only: a FIFO would block, /dev/zero never end; and no more than the limit is read
            with open_regular_file(path) as f:
                too_big = os.fstat(f.fileno()).st_size > limits.MAX_TRACE_BYTES
                raw = b"" if too_big else f.read(limits.MAX_TRACE_BYTES + 1)
            if too_big:
                raise MapperError(f"{label}: larger than {limits.limit_text('MAX_TRACE_BYTES')}; profile fewer runs")
        except OSError as exc:
            raise MapperError(f"{label}: cannot read it ({exc.strerror}); check the path") from None
    if len(raw) > limits.MAX_TRACE_BYTES:
        raise MapperError(f"{label}: larger than {limits.limit_text('MAX_TRACE_BYTES')}; profile fewer runs")
    return raw, label


@dataclass(frozen=True, slots=True)
class Event:
    """The fields of a complete ('ph': 'X') trace event that the loaders read, nothing else."""

    name: str
    dur_us: float
    ts_us: float
    cat: str
    tid: str
    op_name: str
    provider: str


def number_in(value: object, low: float, high: float) -> float | None:
    """The value as a float if it is a number (or a numeral) in [low, high], else None: Infinity, NaN,
    a 4,000-digit integer and "abc" all give None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if low <= number <= high else None


MAX_DUR_US = limits.MAX_TRACE_EVENT_SECONDS * 1e6
# An ORT-made node's inputs are followed back this many ORT nodes at most to find one with an original name (fused
# chains such as Conv+Add+Relu are a few deep); beyond that the node stays unmatched rather than guessed.
MAX_UPSTREAM_HOPS = 8
MAX_TS_US = 1e18  # timestamps are microseconds since an epoch (~1.7e15 now): finite, and then some


def _events(raw: bytes, label: str) -> tuple[list[Event], int]:
    """The complete events with a name and a usable duration and start, and how many complete events
    were skipped because their duration or start is not a finite number in range."""
    good, skipped = [], 0
    strings: dict[str, str] = {}
    share = lambda text: strings.setdefault(text, text)  # a node's name repeats once per run: held once
    for e in trace_events(raw, label):
        if not (isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)):
            continue
        dur, ts = number_in(e.get("dur"), 0.0, MAX_DUR_US), number_in(e.get("ts", 0), -MAX_TS_US, MAX_TS_US)
        if dur is None or ts is None:
            skipped += 1
            continue
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        cat = e.get("cat")
        good.append(
            Event(
                share(e["name"]),
                dur,
                ts,
                share(cat if isinstance(cat, str) else ""),
                share(str(e.get("tid"))),
                share(str(args.get("op_name", ""))),
                share(str(args.get("provider", ""))),
            )
        )
    if not good:
        raise MapperError(
            "profile: no complete ('ph': 'X') events with a name and a duration; is it a trace?"
            + (f" ({skipped} skipped: duration or start not a finite number)" if skipped else "")
        )
    return good, skipped


def _per_run(groups: dict[str, list[Event]], runs: int, op_of, provider_of, statistic: str) -> tuple[NodeTime, ...]:
    reducers: dict[str, Callable[[np.ndarray], Any]] = {"median": np.median, "min": np.min}
    out, reduce = [], reducers[statistic]
    for name, evs in groups.items():
        durs = np.asarray([e.dur_us for e in evs], dtype=float) * 1e-6  # trace durations are microseconds
        calls = max(1, round(len(evs) / runs))
        out.append(NodeTime(name, op_of(evs[0]), float(reduce(durs)) * calls, calls, provider_of(evs[0])))
    return tuple(out)


def _load_ort(events: list[Event], statistic: str) -> ProfileTimes:
    runs = [e.dur_us * 1e-6 for e in events if e.cat == "Session" and e.name == "model_run"]
    groups: dict[str, list[Event]] = {}
    for e in events:
        if e.cat == "Node" and e.name.endswith("_kernel_time"):
            groups.setdefault(e.name[: -len("_kernel_time")], []).append(e)
    if not groups:
        raise MapperError("ORT profile: no '<node>_kernel_time' node events; was enable_profiling on during a run?")
    count = len(runs) or max(len(v) for v in groups.values())
    nodes = _per_run(groups, count, lambda e: e.op_name, lambda e: e.provider, statistic)
    return ProfileTimes("onnxruntime", count, nodes, tuple(runs))


def _load_chrome(events: list[Event], statistic: str) -> ProfileTimes:
    steps = [e for e in events if e.name.startswith("ProfilerStep#")]
    chosen = sorted(
        (e for e in events if e.cat in _CHROME_CATEGORIES and not e.name.startswith("ProfilerStep#")),
        key=lambda e: (e.tid, e.ts_us, -e.dur_us),
    )
    groups: dict[str, list[Event]] = {}
    open_until: dict[str, float] = {}
    for e in chosen:  # keep outermost events only: nested aten calls would count their parent's time twice
        if e.ts_us < open_until.get(e.tid, -MAX_TS_US - 1):
            continue
        open_until[e.tid] = e.ts_us + e.dur_us
        groups.setdefault(e.name, []).append(e)
    if not groups:
        raise MapperError(
            f"Chrome trace: no events of categories {', '.join(_CHROME_CATEGORIES)}; "
            f"record with torch.profiler and export_chrome_trace"
        )
    runs = len(steps) or 1
    nodes = _per_run(groups, runs, lambda e: e.cat, lambda e: "pytorch", statistic)
    return ProfileTimes("chrome-trace", runs, nodes, tuple(e.dur_us * 1e-6 for e in steps))


# A file over this is scanned whole for what every usable profile holds before it is decoded event by event (a
# valid 256 MB one took ~12 s to load here, a scan 0.1-2 s); a smaller one decodes in a fraction of a second anyway.
SCAN_MIN_BYTES = 1 << 20
_WHITE = b" \t\r\n"


def _ends(raw: bytes) -> tuple[int, int]:
    """The first and last bytes that are not JSON white space (-1 for none), without copying the file."""
    first = next((c for c in raw[:4096] if c not in _WHITE), -1)
    end = len(raw)
    while end > 0:
        tail = raw[max(0, end - 4096) : end].rstrip(_WHITE)
        if tail:
            return first, tail[-1]
        end -= 4096
    return first, -1


def _scan(raw: bytes, label: str) -> None:
    """Refuse in well under a second what decoding would refuse only at the end: a file that does not open and
    close as JSON (one cut short), one with no complete event at all, one with more complete events than
    MAX_TRACE_EVENTS, one with neither ORT's node events nor a Chrome trace's categories. Byte searches only: what
    they cannot see (names written with \\u escapes, a fault inside) is left to the decoder, which decodes at most
    MAX_TRACE_EVENTS events."""
    first, last = _ends(raw)
    if first not in (ord("["), ord("{")) or last not in (ord("]"), ord("}")):
        raise MapperError(
            f"{label}: not JSON (it does not begin with [ or {{ and end with ] or }}: cut short?); give an ORT "
            "profile or a Chrome trace"
        )
    complete = raw.count(b'"X"') + raw.count(b"\\u0058")  # "ph": "X", however written: at most this many events
    if not complete:
        raise MapperError("profile: no complete ('ph': 'X') events with a name and a duration; is it a trace?")
    if complete > limits.MAX_TRACE_EVENTS:
        raise MapperError(
            f'{label}: a complete event\'s "X" appears {complete} times, more than '
            f"{limits.limit_text('MAX_TRACE_EVENTS')} events; profile fewer runs"
        )
    if b"\\u" in raw:  # names may be written with escapes: left to the decoder
        return
    if b"_kernel_time" not in raw and not any(f'"{cat}"'.encode() in raw for cat in _CHROME_CATEGORIES):
        raise MapperError(
            f"{label}: neither ORT's '<node>_kernel_time' node events nor Chrome trace events of categories "
            f"{', '.join(_CHROME_CATEGORIES)}; give an ORT profile (enable_profiling) or a PyTorch Chrome trace"
        )


def load_profile(source: str | os.PathLike | bytes, statistic: str = "median") -> ProfileTimes:
    """An ORT profile (any EP) or a PyTorch profiler Chrome trace -> per-node times per run.

    statistic: "median" of a node's calls (default) or "min" (best-of: on a shared machine, other
    processes only ever add time)."""
    if statistic not in ("median", "min"):
        raise MapperError(f"profile statistic {statistic!r} is not one of median, min")
    raw, label = read_bounded(source)
    if len(raw) > SCAN_MIN_BYTES:
        _scan(raw, label)
    events, skipped = _events(raw, label)
    if any(e.cat == "Node" for e in events):
        return replace(_load_ort(events, statistic), skipped=skipped)
    return replace(_load_chrome(events, statistic), skipped=skipped)


def candidate_names(name: str) -> list[str]:
    """The name, then the name with ORT's suffixes stripped one by one ('r2_nchwc' -> 'r2')."""
    out = [name]
    while True:
        stripped = _ORT_SUFFIXES.sub("", out[-1])
        if stripped == out[-1] or not stripped:
            return out
        out.append(stripped)


def match_nodes(times: ProfileTimes, model, optimized=None) -> tuple[NodeMatch, ...]:
    """Tie each measured node to original nodes of `model` (an onnx.ModelProto), optionally via ORT's optimized one."""
    producer = {out: n.name for n in model.graph.node for out in n.output if out}
    names = {n.name for n in model.graph.node if n.name}
    ort_outputs = {n.name: [o for o in n.output if o] for n in optimized.graph.node} if optimized is not None else {}
    ort_inputs = {n.name: [i for i in n.input if i] for n in optimized.graph.node} if optimized is not None else {}
    found = {node.name: _match_one(node.name, names, producer, ort_outputs, ort_inputs) for node in times.nodes}
    ort_producer = {o: n for n, outs in ort_outputs.items() for o in outs}
    for name, (hits, how) in list(found.items()):  # ORT-made nodes: follow inputs to a matched ORT node
        frontier = list(ort_inputs.get(name, ())) if not hits else []
        seen: set[str] = set()
        while frontier and len(seen) < MAX_UPSTREAM_HOPS:
            upstream = ort_producer.get(frontier.pop(0))
            if upstream is None or upstream in seen:
                continue
            seen.add(upstream)
            up_hits = found.get(upstream, _match_one(upstream, names, producer, ort_outputs, ort_inputs))[0]
            if up_hits:
                found[name] = (up_hits[:1], f"optimized-graph (after {upstream})")
                break
            frontier.extend(ort_inputs.get(upstream, ()))
    return tuple(NodeMatch(n.name, n.op_type, n.time_s, *found[n.name]) for n in times.nodes)


def _match_one(
    name: str, names: set, producer: dict, ort_outputs: dict, ort_inputs: dict
) -> tuple[tuple[str, ...], str]:
    if name in names:
        return (name,), "name"
    hits = tuple(producer[o] for o in ort_outputs.get(name, ()) if o in producer)
    if hits:
        return hits, "output"
    for cand in candidate_names(name)[1:]:
        if cand in names:
            return (cand,), "stripped-name"
        if cand in producer:
            return (producer[cand],), "stripped-name"
    if name in ort_outputs:  # an ORT-created node (layout reorder, cast): charge it to what produced its input
        hits = tuple(producer[i] for i in ort_inputs.get(name, ()) if i in producer)
        if hits:
            return hits[:1], "optimized-graph"
        return (), "unmatched: node created by ONNX Runtime (e.g. a layout reorder) with no original tensor"
    return (), "unmatched: no original node or tensor of that name"
