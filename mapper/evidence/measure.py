"""Measure a model on ONNX Runtime (CPU): whole-run latencies and per-node times at the bound shapes.

Evidence stage three. `measure_model` runs the real graph at the bound shapes: shape-only models
(zoo weights are external data that does not exist) get deterministic weights in memory (synthesize.py),
index inputs get in-range ids. Whole-run p50/p95/p99 come from wall time; per-node times from ORT's
profiler, matched to ONNX nodes (profiles.match_nodes). evidence/compare.py sets a Measurement beside
a MappingResult.
"""

from __future__ import annotations

import io
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.extras import require
from mapper.core.options import PlanOptions
from mapper.core.settings import check_settings, setting_text
from mapper.core.vocab import Runtime
from mapper.evidence.measure_gate import check_run, estimate_run
from mapper.evidence.measure_slots import measure_slot
from mapper.evidence.nsys_trace import is_nsys_export, is_nsys_file, read_nsys_export
from mapper.evidence.profiles import NodeMatch, ProfileTimes, load_profile, match_nodes, read_bounded
from mapper.evidence.synthesize import synthesize_inputs, synthesize_weights
from mapper.evidence.torch_match import match_trace, trace_summary
from mapper.evidence.torch_trace import TorchTrace, gunzip, is_kineto, read_torch_trace
from mapper.handle import ModelHandle, open_model
from mapper.model.sandbox import run_child

WARMUP_RUNS = 2
# What a measurement on ONNX Runtime is compared with: the exported graph as ORT runs it (the past -> present
# Concat copies the whole cache, one launch per kernel), whatever the profile's kind would pick by default.
ORT_PLAN = PlanOptions(runtime=Runtime.ONNXRUNTIME)


@dataclass(frozen=True, slots=True)
class Measurement:
    model_name: str
    dims: tuple[tuple[str, int], ...]
    threads: int
    latencies_s: tuple[float, ...]  # wall time of each timed run (empty for an imported profile)
    nodes: tuple[NodeMatch, ...]  # measured nodes, per run, with the ONNX nodes they ran
    provider: str
    ort_version: str
    created_utc: str
    notes: tuple[str, ...] = field(default=())
    source: str | bytes = field(default="", repr=False)  # what calibrate re-maps: a built-in, a path or the bytes
    trace: dict = field(default_factory=dict, compare=False)  # a PyTorch trace's summary (torch_match.trace_summary)

    def percentile_s(self, q: float) -> float:
        if not self.latencies_s:
            return sum(n.time_s for n in self.nodes)  # imported profile: the sum of node times
        return float(np.percentile(np.asarray(self.latencies_s), q))

    @property
    def p50_s(self) -> float:
        return self.percentile_s(50)

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        """Back from to_dict() plus "latencies_s" (what bench/validate_cpu.py caches)."""
        try:
            nodes = tuple(
                NodeMatch(
                    n["name"],
                    n["op_type"],
                    float(n["time_s"]),
                    tuple(n["onnx_nodes"]),
                    n["match"],
                    float(n.get("idle_s", 0.0)),
                    float(n.get("launch_s", 0.0)),
                )
                for n in data["nodes"]
            )
            return cls(
                data["model"],
                tuple((k, int(v)) for k, v in data["dims"].items()),
                int(data["threads"]),
                tuple(float(t) for t in data["latencies_s"]),
                nodes,
                data["provider"],
                data["onnxruntime"],
                data["created_utc"],
                tuple(data.get("notes", ())),
                data.get("source", ""),
                dict(data.get("trace") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MapperError(f"measurement: missing or bad field ({exc}); write it with Measurement.to_dict") from None

    def to_dict(self) -> dict:
        return {
            "model": self.model_name,
            "source": self.source if isinstance(self.source, str) else "",  # an upload's bytes stay out of JSON
            "dims": dict(self.dims),
            "threads": self.threads,
            "runs": len(self.latencies_s),
            "min_s": min(self.latencies_s, default=self.p50_s),
            "p50_s": self.p50_s,
            "p95_s": self.percentile_s(95),
            "p99_s": self.percentile_s(99),
            "provider": self.provider,
            "onnxruntime": self.ort_version,
            "created_utc": self.created_utc,
            "notes": list(self.notes),
            "latencies_s": list(self.latencies_s),
            "nodes": [
                {
                    "name": n.name,
                    "op_type": n.op_type,
                    "time_s": n.time_s,
                    "onnx_nodes": list(n.onnx_nodes),
                    "match": n.how,
                    **({"idle_s": n.idle_s} if n.idle_s else {}),
                    **({"launch_s": n.launch_s} if n.launch_s else {}),
                }
                for n in self.nodes
            ],
            **({"trace": self.trace} if self.trace else {}),
        }


def _onnx_model(source) -> onnx.ModelProto:
    """A private copy of the model's ModelProto (synthesis rewrites it in place), from its handle: a
    built-in name, a path, bytes or a ModelHandle, parsed once and never with its external data."""
    model = onnx.ModelProto()
    model.CopyFrom(open_model(source).proto)
    return model


_CHILD = Path(__file__).with_name("ort_child.py")


def _child_error(label: str, result) -> MapperError:
    """One line for a child that failed: the limit it hit where that shows, else ORT's own first line."""
    said = next(
        (
            ln.split("measure-child: ", 1)[1]
            for ln in reversed(result.stderr_tail.splitlines())
            if ln.startswith("measure-child: ")
        ),
        "",
    )
    if result.returncode == -signal.SIGXCPU:
        return MapperError(f"measure {label}: the run was stopped at {setting_text('MEASURE_CPU_SECONDS')} of CPU time")
    if result.returncode == -signal.SIGKILL:  # the hard CPU limit (5 s past the soft one), or the system out of memory
        return MapperError(
            f"measure {label}: the run was killed (past {setting_text('MEASURE_CPU_SECONDS')} of CPU "
            f"time, or the machine out of memory)"
        )
    if result.returncode == -signal.SIGXFSZ or "MemoryError" in said or "alloc" in said.lower():
        return MapperError(
            f"measure {label}: the run ran out of its address space, {setting_text('MEASURE_MEMORY_BYTES')} "
            f"({said.removeprefix('MemoryError: ')[:120] or 'a file it wrote grew past it'})"
        )
    why = said or f"the child process ended with status {result.returncode}"
    return MapperError(f"measure {label}: ONNX Runtime could not run it ({why[:160]})")


def _run_in_child(label: str, model_bytes: bytes, feeds: dict, spec: dict) -> tuple[list[float], bytes, bytes | None]:
    """Timed and profiled runs in a sandboxed child (mapper.model.sandbox.run_child): a separate process rather than
    ORT in this one, so a hostile model meets RLIMIT_AS/RLIMIT_CPU, a wall clock and an empty working directory
    and takes down only the child; `python -I` rather than multiprocessing, which would re-import the parent's
    main module (Streamlit's script) and talk pickles, which the parent must never unpickle from a child it does
    not trust. Returns the latencies, ORT's profile JSON and its optimized graph (or None)."""
    buf = io.BytesIO()
    np.savez(buf, **{f"f{i}": value for i, value in enumerate(feeds.values())})
    header = json.dumps({**spec, "feeds": list(feeds), "model_bytes": len(model_bytes)}).encode() + b"\n"
    try:
        result = run_child(
            _CHILD.read_text(),
            [],
            header + model_bytes + buf.getvalue(),
            memory_limit="MEASURE_MEMORY_BYTES",
            cpu_limit="MEASURE_CPU_SECONDS",
            wall_limit="MEASURE_WALL_SECONDS",
            keep={
                "latencies.json": 1 << 20,
                "profile.json": limits.MAX_TRACE_BYTES,
                "optimized.onnx": limits.MAX_MODEL_BYTES,
            },
        )
    except MapperError as exc:
        raise MapperError(f"measure {label}: the run {exc}") from None
    if result.returncode != 0 or "latencies.json" not in result.files or "profile.json" not in result.files:
        raise _child_error(label, result)
    try:
        latencies = [float(x) for x in json.loads(result.files["latencies.json"])]
    except (ValueError, TypeError):
        raise MapperError(f"measure {label}: the child process answered garbled timings") from None
    return latencies, result.files["profile.json"], result.files.get("optimized.onnx")


def measure_model(
    source,
    dims: dict[str, int] | None = None,
    threads: int = 1,
    runs: int = 10,
    providers: list[str] | None = None,
    profiled_runs: int = 3,
    on_wait: Callable[[int], None] | None = None,
) -> Measurement:
    """Run the model on ONNX Runtime: `runs` timed runs (after warm-up) for wall-time percentiles, then
    `profiled_runs` in a second, profiled session for per-node times (min per node: best-of on a shared machine).

    The run is estimated and refused over the MEASURE_* limits first (measure_gate), every external-data
    reference is replaced (synthesize_weights), and ORT runs in a sandboxed child (_run_in_child) when its turn
    comes (measure_slots; on_wait(place) hears the place in line)."""
    ort = require("onnxruntime", "measure_model")  # the `measure` extra

    if runs < 1 or threads < 1 or profiled_runs < 1:
        raise MapperError(
            f"measure: runs={runs}, profiled_runs={profiled_runs} and threads={threads} must all be at least 1"
        )
    check_settings()  # a bad MAPPER_MEASURE_* is refused before any work
    handle = open_model(source)  # parsed once: the run, the gate and the prediction read this one
    workload = handle.bind(dims)
    model = _onnx_model(handle)
    label = workload.graph.name[:80]
    check_run(estimate_run(workload, model), 2 * WARMUP_RUNS + runs + profiled_runs, label)
    replaced = synthesize_weights(model)
    feeds = synthesize_inputs(model, workload.graph)
    providers = providers or ["CPUExecutionProvider"]
    spec = dict(threads=threads, providers=providers, warmup=WARMUP_RUNS, runs=runs, profiled_runs=profiled_runs)
    with measure_slot(label, on_wait):
        latencies, profile, optimized = _run_in_child(label, model.SerializeToString(), feeds, spec)
    times = load_profile(profile, statistic="min")
    try:  # the optimized graph names its large weights in weights.bin, which is neither kept nor read
        optimized_model = onnx.load_from_string(optimized) if optimized else None
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: match without it
        optimized_model = None
    nodes = match_nodes(times, model, optimized_model)
    notes = [f"{replaced} external-data tensors replaced by deterministic random tensors"] if replaced else []
    notes.append(
        f"wall times: {runs} runs of an unprofiled session after {WARMUP_RUNS} warm-up; per-node times: "
        f"best of {times.runs} runs of a profiled session per ORT node"
    )
    return Measurement(
        workload.graph.name,
        workload.graph.dims,
        threads,
        tuple(latencies),
        nodes,
        ",".join(providers),
        ort.__version__,
        datetime.now(UTC).isoformat(timespec="seconds"),
        tuple(notes),
        handle.source or handle.data,  # an upload is re-mapped (calibrate) from the very bytes that ran
    )


def _named(source, name: str) -> tuple[str, str | bytes]:
    """The measurement's model name and what re-opens the model, whether `source` is a name, a path, bytes or a
    ModelHandle (never a handle's repr or an upload's bytes as its name)."""
    if isinstance(source, ModelHandle):
        return name or source.name, source.source or source.data
    if isinstance(source, bytes):
        return name or "uploaded model", source
    return name or str(source), source if isinstance(source, str) else str(source)


def _from_torch_trace(trace: TorchTrace, source, name: str) -> Measurement:
    """A PyTorch profiler trace or an Nsight Systems export matched to the model `source` by module scopes, or in
    graph order where it has none (evidence/torch_match.py)."""
    matched = match_trace(trace, _onnx_model(source))
    summary = trace_summary(trace, matched)
    label, reopen = _named(source, name)
    return Measurement(
        label,
        (),
        0,
        trace.step_s,
        matched.nodes,
        f"{'nsys' if trace.tool == 'Nsight Systems' else 'pytorch'}-{trace.device.lower()}",
        "",
        datetime.now(UTC).isoformat(timespec="seconds"),
        (
            (
                f"imported {summary['runtime']} ({trace.device}), {matched.runs} run(s); per-run time of each "
                f"{summary['unit']}, matched share {summary['matched_share']:.1%}"
            ),
        ),
        reopen,
        summary,
    )


def measurement_from_profile(profile: str | os.PathLike | bytes | ProfileTimes, source, name: str = "") -> Measurement:
    """An imported profile (made elsewhere, any EP) matched to the model `source` by node and tensor names, or a
    PyTorch profiler (Kineto) trace or an Nsight Systems SQLite export, gzipped or not, matched by module scopes."""
    if isinstance(profile, str | os.PathLike) and is_nsys_file(profile):
        return _from_torch_trace(read_nsys_export(profile, f"export {Path(profile).name}"), source, name)
    if isinstance(profile, str | os.PathLike) and Path(profile).suffix in (".sqlite", ".sqlite3", ".db"):
        raise MapperError(
            f"profile {Path(profile).name}: not an SQLite database (an Nsight Systems export opens with"
            " 'SQLite format 3'); give the file `nsys export --type sqlite` wrote"
        )
    if not isinstance(profile, ProfileTimes):
        raw, label = read_bounded(profile)
        text = gunzip(raw, label)
        if is_nsys_export(text):
            return _from_torch_trace(read_nsys_export(text, label), source, name)
        if is_kineto(text, label):
            return _from_torch_trace(read_torch_trace(text, label), source, name)
        if text is not raw:
            profile = text
    times = profile if isinstance(profile, ProfileTimes) else load_profile(profile)
    nodes = match_nodes(times, _onnx_model(source))
    provider = ",".join(sorted({n.provider for n in times.nodes if n.provider})) or times.kind
    label, reopen = _named(source, name)
    return Measurement(
        label,
        (),
        0,
        times.run_times_s,
        nodes,
        provider,
        "",
        datetime.now(UTC).isoformat(timespec="seconds"),
        (f"imported {times.kind} profile, {times.runs} runs",),
        reopen,
    )
