"""What a plan comparison compares: the metrics and their default thresholds, and the two plans.

`plan_spec` reads a plan ("fusion=aggressive,hw=h200-sxm", "max_batch=8,max_wait_ms=2") on top of shared
options and the shared serving load; `parse_thresholds` reads METRIC=FRACTION overrides.
mapper.explore.compare maps and judges them.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.hardware.load import load_hardware
from mapper.hardware.profile import HardwareProfile
from mapper.report.reproduce import FIELD_BY_NAME, format_option, parse_option


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    higher_is_better: bool
    default_threshold: float  # relative change that counts (0.02 = 2 %)
    aliases: tuple[str, ...]
    label: str  # how a person reads it (verdicts, the dashboard's headers)


# Thresholds: 2 % is above the run-to-run noise the profiles' jitter_cv puts on a p99 of 20k requests;
# footprint is deterministic, so 1 % already means a real change.
METRICS = (
    Metric("p99_latency_s", False, 0.02, ("p99", "latency"), "p99 latency"),
    Metric("throughput_per_s", True, 0.02, ("throughput", "tput"), "throughput"),
    Metric("mfu", True, 0.02, (), "MFU"),
    Metric("perf_per_watt", True, 0.02, ("ppw", "perf/w"), "perf/W"),
    Metric("memory_footprint_bytes", False, 0.01, ("footprint", "memory"), "memory footprint"),
)
METRIC_BY_NAME = {a: m for m in METRICS for a in (m.name, *m.aliases)}
# A plan's own serving settings: key -> (label, kind, least, most). Unset, a plan is served in static batches of
# the slice's batch at the comparison's shared load; max_batch set, it batches dynamically up to it.
SERVING_FIELDS = {
    "rate": ("rate (req/s)", float, 1e-3, 1e7),  # the bounds of the dashboard's and `mapper serve`'s rate
    "max_batch": ("max batch", int, 1, 1024),
    "max_wait_ms": ("max wait (ms)", float, 0.0, 1e5),
}
PLAN_FIELDS = ("model", "hw") + tuple(f.name for f in fields(PlanOptions)) + tuple(SERVING_FIELDS)
# A threshold is a relative change: 10 is a 1000% change, past any verdict a person means (a typo for 0.10).
MAX_THRESHOLD = 10
MAX_NUMBER_TEXT = 24  # longest number a plan setting may hold (as the link's option text, reproduce.py)


@dataclass(frozen=True, slots=True)
class PlanServing:
    """How a plan is served in the comparison; None: the shared default (the comparison's load, static
    batches of the slice's batch)."""

    rate: float | None = None  # offered requests/s
    max_batch: int | None = None  # dynamic batching up to this many requests
    max_wait_ms: float = 0.0  # dynamic batching: how long the oldest request waits for the batch to fill

    def changed(self) -> list[str]:
        return [f"{k}={getattr(self, k):g}" for k in SERVING_FIELDS if getattr(self, k) != getattr(PlanServing(), k)]


@dataclass(frozen=True, slots=True)
class PlanSpec:
    model: str | bytes  # a built-in name, a path, or uploaded bytes
    hardware: HardwareProfile
    options: PlanOptions
    serving: PlanServing = PlanServing()

    def describe(self) -> str:
        changed = [
            f"{f.name}={format_option(FIELD_BY_NAME[f.name], getattr(self.options, f.name))}"
            for f in fields(PlanOptions)
            if getattr(self.options, f.name) != getattr(PlanOptions(), f.name)
        ] + self.serving.changed()
        # a file by its name, never its folder: this text goes into packets and shared sheets
        name = os.path.basename(self.model) if isinstance(self.model, str) else "the model"
        return f"{name} on {self.hardware.name}" + (f" ({', '.join(changed)})" if changed else "")


def plan_spec(text: str, model: str | bytes, hw: str | HardwareProfile, base: PlanOptions) -> PlanSpec:
    """ "fusion=aggressive,dtype=bf16" or "hw=h200-sxm" or "model=..." on top of the shared options."""
    model_value, hw_value = model, hw
    option_values = asdict(base)
    serving: dict[str, Any] = {}  # each setting at its own field's type (`serving_value`)
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in PLAN_FIELDS:
            raise MapperError(
                f"plan setting {part!r} must look like KEY=VALUE with KEY one of {', '.join(PLAN_FIELDS)}"
            )
        value = value.strip()
        if key == "model":
            model_value = value
        elif key == "hw":
            hw_value = value
        elif key in SERVING_FIELDS:
            serving[key] = serving_value(key, value)
        else:  # the text form the link and the reproduce command share (mapper.report.reproduce)
            option_values[key] = parse_option(FIELD_BY_NAME[key], value)
    options = PlanOptions(**option_values)  # validated where it is built
    hardware = hw_value if isinstance(hw_value, HardwareProfile) else load_hardware(hw_value)
    return PlanSpec(model_value, hardware, options, PlanServing(**serving))


def serving_value(key: str, text: str) -> float | int:
    """A plan's serving setting from its text: a number within the setting's bounds, else one line naming it."""
    label, kind, least, most = SERVING_FIELDS[key]
    try:
        value = kind(text) if text.isascii() and len(text) <= MAX_NUMBER_TEXT else math.nan
    except ValueError:
        value = math.nan
    if not least <= value <= most:  # NaN fails too
        raise MapperError(f"plan setting {key}={text[:MAX_NUMBER_TEXT]!r}: {label} must be from {least:g} to {most:g}")
    return value


def parse_thresholds(items: list[str] | dict | None) -> dict[str, float]:
    """["p99=0.05", ...] or {"p99": 0.05} -> every metric's threshold (defaults for the rest)."""
    out = {m.name: m.default_threshold for m in METRICS}
    pairs = items.items() if isinstance(items, dict) else (i.partition("=")[::2] for i in items or [])
    for key, value in pairs:
        metric = METRIC_BY_NAME.get(str(key).strip().lower())
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if metric is None or not 0 <= number < MAX_THRESHOLD:
            raise MapperError(
                f"threshold {key}={value!r}: give METRIC=FRACTION with a fraction from 0 to {MAX_THRESHOLD} and METRIC"
                f" one of {', '.join(sorted(METRIC_BY_NAME))}, e.g. --threshold p99=0.02"
            )
        out[metric.name] = number
    return out
