"""The first failing slice: given a KPI target, the smallest batch and the shortest sequence at which it fails.

Walks batch (at the frozen sequence) and sequence length (at the frozen batch) by doubling, then bisects
between the last slice that passes and the first that fails ("p99 target 50 ms first fails at batch 24,
seq 2048"). A decoder's sequence axis is its context (KV-cache) length. Each slice is one `map_slice`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.errors import MapperError
from mapper.core.result import MappingResult, PlanOptions
from mapper.handle import ModelHandle
from mapper.hardware.profile import HardwareProfile
from mapper.serve.engine import map_slice

MAX_BATCH = 4096  # the walk stops here: a target still met at 4096 sequences per batch is met in practice
MAX_LENGTH = 131_072  # tokens: past every built-in model's context
TARGETS = ("p99", "mfu", "fit")


@dataclass(frozen=True, slots=True)
class Target:
    """A KPI target: p99 latency at most `value` seconds, MFU at least `value`, or the model fitting memory."""

    kind: str  # p99 | mfu | fit
    value: float = 0.0

    def fails(self, result: MappingResult) -> bool:
        if self.kind == "fit":
            return not result.memory.fits
        if self.kind == "mfu":
            return result.totals.mfu < self.value
        return (result.serving or {}).get("p99_s", result.totals.latency_s) > self.value

    def text(self) -> str:
        return {
            "p99": f"p99 target {self.value * 1e3:g} ms",
            "mfu": f"MFU floor {self.value:.0%}",
            "fit": "memory fit",
        }[self.kind]


def parse_target(text: str) -> Target:
    """ "p99=50ms" | "p99=0.05" | "mfu=0.4" | "fit"."""
    kind, _, value = text.strip().lower().partition("=")
    if kind not in TARGETS:
        raise MapperError(f"target {text!r} must be p99=MILLISECONDS, mfu=FRACTION or fit")
    if kind == "fit":
        return Target("fit")
    try:
        number = float(value.removesuffix("ms")) / (1e3 if kind == "p99" else 1)
    except ValueError:
        number = -1.0
    if not number > 0:
        raise MapperError(f"target {text!r}: give a positive number, e.g. p99=50 (ms) or mfu=0.4")
    return Target(kind, number)


def _first_fail(fails: Callable[[int], bool], start: int, top: int) -> int | None:
    """The smallest n >= start at which fails(n), by doubling then bisection; None if none up to top."""
    if fails(start):
        return start
    low, high = start, start * 2
    while high <= top and not fails(high):
        low, high = high, high * 2
    if high > top:
        return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fails(mid) else (mid, high)
    return high


def first_failing_slice(
    model: ModelHandle,
    dims: dict[str, int],
    hardware: HardwareProfile,
    options: PlanOptions,
    target: Target,
) -> dict:
    """{"target", "batch": {...} | None, "length": {...} | None, "sentence"}: where the target first fails
    along batch (from 1, at the frozen length) and along length (from the frozen one, at the frozen batch)."""
    roles = model.roles
    batch_name = next((n for n, r in roles.items() if r == "batch"), None)
    past = next((n for n, r in roles.items() if r == "past"), None)
    seq = next((n for n, r in roles.items() if r == "seq"), None)
    length_name = past if past and dims.get(seq, 1) == 1 else seq
    results: dict[tuple, bool] = {}

    def fails_at(changes: dict[str, int]) -> bool:
        slice_dims = {**dims, **changes}
        key = tuple(sorted(slice_dims.items()))
        if key not in results:
            results[key] = target.fails(map_slice(model.bind(slice_dims), hardware, options))
        return results[key]

    along_batch = _first_fail(lambda b: fails_at({batch_name: b}), 1, MAX_BATCH) if batch_name else None
    along_length = None
    if length_name and length_name in dims:
        along_length = _first_fail(lambda n: fails_at({length_name: n}), max(dims[length_name], 1), MAX_LENGTH)
    return {
        "target": target.text(),
        "kind": target.kind,
        "value": target.value,
        "batch": None if along_batch is None else {**dims, batch_name: along_batch},
        "length": None if along_length is None else {**dims, length_name: along_length},
        "length_dim": length_name or "",
        "sentence": _sentence(target, batch_name, along_batch, length_name, along_length, dims),
    }


def _sentence(target: Target, batch_name, along_batch, length_name, along_length, dims) -> str:
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
        return (
            f"{target.text()} holds up to batch {MAX_BATCH} and {length_name or 'the model'}'s longest length searched"
        )
    return f"{target.text()} first fails " + " and ".join(parts)
