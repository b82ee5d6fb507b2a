"""PyTorch profiler (Kineto) Chrome traces: the timed units and where each ran, read within the upload bounds.

A trace as `torch.profiler` / Kineto writes it (`export_chrome_trace`, gzipped or not; one rank per file, or ranks
merged into one file by pid) is read event by event by `json_events.trace_events` (at most MAX_TRACE_BYTES of
text after decompression, MAX_TRACE_EVENTS events, MAX_TRACE_EVENT_BYTES each; a hostile file is one line).
The units are a GPU trace's kernels (cat "kernel", "gpu_memcpy", "gpu_memset"), each tied to the CPU op that
launched it through the "cuda_runtime" launch event of the same "correlation" id, or, on a CPU trace (no kernels),
its outermost "cpu_op" events. Each unit carries its launching op and the innermost enclosing module scope: a
"user_annotation" range named by a dotted module path (`record_function("layer1.0.conv1")`; bench/torch_cpu_trace.py
`scope_modules` writes them). `torch_match` ties the units to the mapping. An Nsight Systems export comes through the
same sweep (`trace_of_events`), its rows named as these events by nsys_trace.py.

Holistic Trace Analysis (PyPI HolisticTraceAnalysis) reads these traces too, but it loads each whole trace into
pandas DataFrames (memory follows the file, not a cap on events) and brings pandas, plotly and friends; the loop
needs seven fields of four categories, so this stays a small bounded reader on the one the ORT path already uses.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.evidence.json_events import trace_events
from mapper.evidence.profiles import MAX_DUR_US, MAX_TS_US, number_in

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
SCOPE_CATS = frozenset({"user_annotation", "gpu_user_annotation"})
KINETO_CATS = GPU_CATS | SCOPE_CATS | {"cpu_op", "cuda_runtime", "cuda_driver", "python_function"}
MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")  # "layer1.0.conv1", "lm_head"
MAX_NAME = 512  # characters of a name kept (kernel names are long templates)
MAX_CORRELATION = 2**63
STEP_CATS = frozenset({"user_annotation", "cpu_op", ""})  # a step's CPU range (its GPU twin is not counted again)
GZIP_MAGIC = b"\x1f\x8b"
SNIFF_EVENTS = 5_000  # events looked at to tell a Kineto trace from an ORT profile


@dataclass(frozen=True, slots=True)
class Event:
    cat: str
    name: str
    ts_us: float
    dur_us: float
    thread: str  # "pid/tid": a CPU thread, or a GPU's stream
    correlation: int  # -1 where absent


@dataclass(frozen=True, slots=True)
class Unit:
    """One timed unit: a GPU kernel, or on a CPU trace an outermost CPU op."""

    name: str  # the kernel's or the op's name
    op: str  # the CPU op that ran or launched it ("" where no launch was found)
    scope: str  # the innermost module scope around that op ("" where none)
    ts_us: float
    dur_us: float
    thread: str
    op_key: str  # one per launching op instance: a conv's three kernels share it
    why: str = ""  # why it has no op (a correlation id no launch carries)
    launch_us: float = 0.0  # the CPU time of the runtime call that launched it (0 on a CPU trace)


@dataclass(frozen=True, slots=True)
class TorchTrace:
    device: str  # "GPU" or "CPU"
    runs: int  # ProfilerStep ranges (1 where none)
    units: tuple[Unit, ...]
    step_s: tuple[float, ...]
    launches: int  # CUDA runtime kernel launches
    launch_s: float  # their total CPU time
    skipped: int  # complete events without a usable duration or start
    tool: str = "PyTorch"  # what wrote it: "PyTorch" (profiler / Kineto) or "Nsight Systems" (nsys_trace.py)


def gunzip(raw: bytes, label: str) -> bytes:
    """The bytes, decompressed where gzipped, never past MAX_TRACE_BYTES (a small bomb is refused, not expanded)."""
    if not raw.startswith(GZIP_MAGIC):
        return raw
    inflate = zlib.decompressobj(wbits=31)
    try:
        out = inflate.decompress(raw, limits.MAX_TRACE_BYTES + 1)
    except zlib.error as exc:
        raise MapperError(f"{label}: a broken gzip file ({exc}); give the trace as written") from None
    if len(out) > limits.MAX_TRACE_BYTES or inflate.unconsumed_tail:
        raise MapperError(f"{label}: decompresses past {limits.limit_text('MAX_TRACE_BYTES')}; trace fewer steps")
    return out


def is_kineto(raw: bytes, label: str) -> bool:
    """Whether the (decompressed) file is a Kineto trace: among its first events, one of a Kineto category and
    none of ORT's ("Node", "Session"). Malformed files are left to the loader that reads them whole."""
    if b"traceEvents" not in raw[: 1 << 16]:
        return False
    try:
        for i, e in enumerate(trace_events(raw, label)):
            cat = e.get("cat") if isinstance(e, dict) else None
            if cat in ("Node", "Session") or i >= SNIFF_EVENTS:
                return False
            if cat in KINETO_CATS:
                return True
    except MapperError:
        return False
    return False


def _text(value: object) -> str:
    return str(value)[:MAX_NAME] if isinstance(value, (str, int, float)) else ""


def _events(raw: bytes, label: str) -> tuple[list[Event], int]:
    kept, skipped = [], 0
    strings: dict[str, str] = {}
    share = lambda text: strings.setdefault(text, text)  # op and kernel names repeat per step: held once
    for e in trace_events(raw, label):
        if not (isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)):
            continue
        cat, name = _text(e.get("cat")), e["name"][:MAX_NAME]
        if cat not in KINETO_CATS and not name.startswith("ProfilerStep#"):
            continue
        dur, ts = number_in(e.get("dur"), 0.0, MAX_DUR_US), number_in(e.get("ts"), -MAX_TS_US, MAX_TS_US)
        if dur is None or ts is None:
            skipped += 1
            continue
        args = e.get("args")
        args = args if isinstance(args, dict) else {}
        corr = number_in(args.get("correlation"), 0, MAX_CORRELATION)
        thread = share(f"{_text(e.get('pid'))[:64]}/{_text(e.get('tid'))[:64]}")
        kept.append(Event(share(cat), share(name), ts, dur, thread, -1 if corr is None else int(corr)))
    if not kept:
        raise MapperError(
            f"{label}: no complete events of a PyTorch profiler trace ({', '.join(sorted(KINETO_CATS))})"
            + (f"; {skipped} skipped: duration or start not a finite number" if skipped else "")
        )
    return kept, skipped


@dataclass(slots=True)
class _Open:
    end: float
    op: str  # the outermost CPU op open here ("" none)
    op_key: str
    scope: str  # the innermost module scope open here


def _host_side(events: list[Event]) -> tuple[list[Unit], dict[int, tuple[str, str, str, float]], int, float]:
    """One sweep per CPU thread over its ranges in start order, a stack of what is open: each outermost CPU op (a
    CPU trace's units), and each launch's correlation -> (op, scope, op_key). Iterative: depth costs no recursion."""
    host = sorted(
        (e for e in events if e.cat not in GPU_CATS and not e.name.startswith("ProfilerStep#")),
        key=lambda e: (e.thread, e.ts_us, -e.dur_us),
    )
    units, launched, launches, launch_s = [], {}, 0, 0.0
    stack: list[_Open] = []
    thread = None
    for e in host:
        if e.thread != thread:
            stack, thread = [], e.thread
        while stack and stack[-1].end <= e.ts_us:
            stack.pop()
        top = stack[-1] if stack else _Open(0.0, "", "", "")
        op, op_key, scope = top.op, top.op_key, top.scope
        if e.cat == "cpu_op" and not op:
            op, op_key = e.name, f"{e.thread}@{e.ts_us}"
            units.append(Unit(e.name, e.name, scope, e.ts_us, e.dur_us, e.thread, op_key))
        elif e.cat in SCOPE_CATS and MODULE_PATH.fullmatch(e.name):
            scope = e.name
        elif e.cat == "cuda_runtime" and e.correlation >= 0:
            launched[e.correlation] = (op, scope, op_key, e.dur_us)
            if "Launch" in e.name:  # cudaLaunchKernel(ExC), cuLaunchKernel: not syncs, copies or allocations
                launches += 1
                launch_s += e.dur_us * 1e-6
        stack.append(_Open(e.ts_us + e.dur_us, op, op_key, scope))
    return units, launched, launches, launch_s


def _kernels(events: list[Event], launched: dict[int, tuple[str, str, str, float]]) -> list[Unit]:
    out = []
    for e in events:
        if e.cat not in GPU_CATS:
            continue
        if e.correlation < 0:
            out.append(Unit(e.name, "", "", e.ts_us, e.dur_us, e.thread, "", "no correlation id on the kernel"))
            continue
        found = launched.get(e.correlation)
        op, scope, op_key, launch_us = found or ("", "", "", 0.0)
        corr = e.correlation & 0xFFFFFFFF  # an Nsight export's id carries its process above bit 32 (nsys_trace._key)
        why = (
            f"no CPU launch with correlation {corr} in the trace"
            if found is None
            else ""
            if op_key
            else "launched outside any op (no cpu_op, or emit_nvtx range, around its launch)"
        )
        out.append(Unit(e.name, op, scope, e.ts_us, e.dur_us, e.thread, op_key, why, launch_us))
    return out


def read_torch_trace(raw: bytes, label: str = "trace") -> TorchTrace:
    """A Kineto / torch.profiler Chrome trace (bytes, gzipped or not) -> its units, steps and launch costs."""
    events, skipped = _events(gunzip(raw, label), label)
    return trace_of_events(events, skipped, label)


def trace_of_events(events: list[Event], skipped: int, label: str, tool: str = "PyTorch") -> TorchTrace:
    """Events in Kineto's vocabulary (a Chrome trace's, or an Nsight Systems export's as nsys_trace.py names them)
    -> the trace's units, each with its launching op and module scope, its steps and its launch costs."""
    units, launched, launches, launch_s = _host_side(events)
    kernels = _kernels(events, launched)
    steps = tuple(e.dur_us * 1e-6 for e in events if e.name.startswith("ProfilerStep#") and e.cat in STEP_CATS)
    device = "GPU" if kernels else "CPU"
    chosen = kernels or units
    if not chosen:
        raise MapperError(f"{label}: a {tool} trace with neither GPU kernels nor CPU ops; record CPU or CUDA activity")
    ordered = tuple(sorted(chosen, key=lambda u: (u.thread, u.ts_us)))
    return TorchTrace(device, len(steps) or 1, ordered, steps, launches, launch_s, skipped, tool)
