"""The first failing slice: given a KPI target, the smallest batch and the shortest sequence at which it fails.

Searches batch (at the frozen length) and length (at the frozen batch) over round values, the powers of
two and their midpoints (1, 2, 3, 4, 6, 8, 12, 16, 24, ...), bisecting between the last that passes and
the first that fails ("p99 target 50 ms first fails at batch 24, seq 2048"). A decoder at a decode step
is searched along its context (past, the KV-cache length), up to the model's own maximum context or a
declared cap. Each slice is one `map_workload`; a p99 target reads the slice's batch latency, unloaded (the
assessment serves the frozen slice at its load; the search asks where one batch alone already misses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.classes import TargetKind
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.core.result import MappingResult
from mapper.handle import ModelHandle
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload

MAX_BATCH = 4096  # the walk stops here: a target still met at 4096 sequences per batch is met in practice
MAX_LENGTH = 131_072  # tokens: the cap for a model that declares no maximum context of its own
# Built-ins whose maximum context no initializer holds (rotary positions): HF config.json max_position_embeddings
# (meta-llama/Llama-2-7b-hf and -70b-hf: 4096; mistralai/Mixtral-8x7B-v0.1: 32768).
ROTARY_CONTEXT = {"llama2-7b": 4096, "llama2-70b": 4096, "mixtral-8x7b": 32768}
POSITION_TABLES = ("position_embeddings.weight", "wpe.weight")  # learned positions: [max_positions, hidden]


@dataclass(frozen=True, slots=True)
class Target:
    """A KPI target: p99 latency at most `value` seconds, MFU at least `value`, or the model fitting memory."""

    kind: TargetKind
    value: float = 0.0

    def fails(self, result: MappingResult) -> bool:
        if self.kind == TargetKind.FIT:
            return not result.memory.fits
        if self.kind == TargetKind.MFU:
            return result.totals.mfu < self.value
        return result.totals.latency_s > self.value  # unloaded: one batch's latency, no queueing

    def text(self) -> str:
        return {
            TargetKind.P99: f"unloaded p99 target {self.value * 1e3:g} ms",
            TargetKind.MFU: f"MFU floor {self.value:.0%}",
            TargetKind.FIT: "memory fit",
        }[self.kind]


def parse_target(text: str) -> Target:
    """ "p99=50ms" | "p99=0.05" | "mfu=0.4" | "fit"."""
    word, _, value = text.strip().lower().partition("=")
    try:
        kind = TargetKind(word)
    except ValueError:
        raise MapperError(f"target {text!r} must be p99=MILLISECONDS, mfu=FRACTION or fit") from None
    if kind == TargetKind.FIT:
        return Target(kind)
    try:
        number = float(value.removesuffix("ms")) / (1e3 if kind == TargetKind.P99 else 1)
    except ValueError:
        number = -1.0
    if not number > 0:
        raise MapperError(f"target {text!r}: give a positive number, e.g. p99=50 (ms) or mfu=0.4")
    return Target(kind, number)


def round_values(start: int, top: int) -> tuple[int, ...]:
    """start, then the powers of two and their midpoints above it, up to top (top itself included)."""
    values, p = {start, top}, 1
    while p <= top:
        values |= {v for v in (p, p + p // 2) if start < v <= top}
        p *= 2
    return tuple(sorted(v for v in values if v >= start))


def _first_fail(fails: Callable[[int], bool], values: tuple[int, ...]) -> int | None:
    """The first of the (ascending) values at which fails(v), by bisection; None if the last still passes."""
    if fails(values[0]):
        return values[0]
    if not fails(values[-1]):
        return None
    low, high = 0, len(values) - 1
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fails(values[mid]) else (mid, high)
    return values[high]


def max_context(model: ModelHandle) -> int:
    """The model's own maximum context: its learned position table's rows, a rotary built-in's published
    maximum, else MAX_LENGTH."""
    for init in model.proto.graph.initializer:
        if init.name.endswith(POSITION_TABLES) and init.dims:
            return int(init.dims[0])
    return ROTARY_CONTEXT.get(model.source, MAX_LENGTH) if model.builtin else MAX_LENGTH


def _length_cap(model: ModelHandle, dims: dict[str, int], length_name: str, max_length: int) -> int:
    """The longest length searched: the declared cap, else the model's maximum context less the other part
    of the context (past + seq <= maximum)."""
    if max_length:
        return max_length
    other = sum(v for n, v in dims.items() if n != length_name and model.roles.get(n) in ("seq", "past"))
    return max(max_context(model) - other, 1)


def first_failing_slice(
    model: ModelHandle,
    dims: dict[str, int],
    hardware: HardwareProfile,
    options: PlanOptions,
    target: Target,
    max_length: int = 0,
) -> dict:
    """{"target", "batch": {...} | None, "length": {...} | None, "sentence"}: where the target first fails
    along batch (from 1, at the frozen length) and along length (from the frozen one, at the frozen batch,
    up to `max_length` or the model's own maximum context)."""
    roles = model.roles
    batch_name = next((n for n, r in roles.items() if r == "batch"), None)
    past = next((n for n, r in roles.items() if r == "past"), None)
    seq = next((n for n, r in roles.items() if r == "seq"), None)
    length_name = past if past and (seq is None or dims.get(seq, 1) == 1) else seq
    results: dict[tuple, bool] = {}

    def fails_at(changes: dict[str, int]) -> bool:
        slice_dims = {**dims, **changes}
        key = tuple(sorted(slice_dims.items()))
        if key not in results:
            results[key] = target.fails(map_workload(model.bind(slice_dims), hardware, options))
        return results[key]

    along_batch = _first_fail(lambda b: fails_at({batch_name: b}), round_values(1, MAX_BATCH)) if batch_name else None
    along_length, top = None, 0
    if length_name and length_name in dims:
        start = max(dims[length_name], 1)
        top = max(_length_cap(model, dims, length_name, max_length), start)  # a slice past the maximum: itself
        along_length = _first_fail(lambda n: fails_at({length_name: n}), round_values(start, top))
    return {
        "target": target.text(),
        "kind": target.kind,
        "value": target.value,
        "batch": None if along_batch is None else {**dims, batch_name: along_batch},
        "length": None if along_length is None else {**dims, length_name: along_length},
        "length_dim": length_name or "",
        "max_length": top,
        "sentence": _sentence(target, (batch_name, along_batch), (length_name, along_length, top), dims),
    }


def _sentence(target: Target, batch: tuple, length: tuple, dims: dict[str, int]) -> str:
    (batch_name, along_batch), (length_name, along_length, top) = batch, length
    frozen = {k: dims[k] for k in (batch_name, length_name) if k in dims}
    if along_batch == frozen.get(batch_name, 1) and along_length == frozen.get(length_name):
        at = ", ".join(f"{k} {v}" for k, v in frozen.items())
        return f"{target.text()} already fails at the frozen slice ({at})"
    parts = []
    if along_batch is not None:
        at = f", {length_name} {dims[length_name]}" if length_name in dims else ""
        parts.append(f"at batch {along_batch}{at}")
    if along_length is not None:
        parts.append(f"at {length_name} {along_length} (batch {dims.get(batch_name, 1)})")
    if not parts:
        searched = ([f"batch {MAX_BATCH}"] if batch_name else []) + (
            [f"{length_name} {top}"] if length_name in dims else []
        )
        if not searched:  # static shapes: nothing to search along
            return f"{target.text()} holds at the frozen slice (static shapes: no batch or length dim to vary)"
        return f"{target.text()} holds up to {' and '.join(searched)}"
    holds = f"; it holds up to {length_name} {top}" if along_length is None and length_name in dims else ""
    return f"{target.text()} first fails " + " and ".join(parts) + holds
