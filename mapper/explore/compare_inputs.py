"""What a plan comparison compares: the metrics and their default thresholds, and the two plans.

`plan_spec` reads a plan ("fusion=aggressive,hw=h200-sxm") on top of shared options; `parse_thresholds`
reads METRIC=FRACTION overrides. mapper.explore.compare maps and judges them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from mapper.core.errors import MapperError
from mapper.core.result import PlanOptions
from mapper.hardware.load import load_hardware
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import validate_options
from mapper.report.reproduce import FIELD_BY_NAME, format_option, parse_option


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    higher_is_better: bool
    default_threshold: float  # relative change that counts (0.02 = 2 %)
    aliases: tuple[str, ...]


# Thresholds: 2 % is above the run-to-run noise the profiles' jitter_cv puts on a p99 of 20k requests;
# footprint is deterministic, so 1 % already means a real change.
METRICS = (
    Metric("p99_latency_s", False, 0.02, ("p99", "latency")),
    Metric("throughput_per_s", True, 0.02, ("throughput", "tput")),
    Metric("mfu", True, 0.02, ()),
    Metric("perf_per_watt", True, 0.02, ("ppw", "perf/w")),
    Metric("memory_footprint_bytes", False, 0.01, ("footprint", "memory")),
)
METRIC_BY_NAME = {a: m for m in METRICS for a in (m.name, *m.aliases)}
PLAN_FIELDS = ("model", "hw") + tuple(f.name for f in fields(PlanOptions))
# A threshold is a relative change: 10 is a 1000% change, past any verdict a person means (a typo for 0.10).
MAX_THRESHOLD = 10


@dataclass(frozen=True, slots=True)
class PlanSpec:
    model: str | bytes  # a built-in name, a path, or uploaded bytes
    hardware: HardwareProfile
    options: PlanOptions

    def describe(self) -> str:
        changed = [
            f"{f.name}={format_option(FIELD_BY_NAME[f.name], getattr(self.options, f.name))}"
            for f in fields(PlanOptions)
            if getattr(self.options, f.name) != getattr(PlanOptions(), f.name)
        ]
        name = self.model if isinstance(self.model, str) else "uploaded model"
        return f"{name} on {self.hardware.name}" + (f" ({', '.join(changed)})" if changed else "")


def plan_spec(text: str, model: str | bytes, hw: str | HardwareProfile, base: PlanOptions) -> PlanSpec:
    """ "fusion=aggressive,dtype=bf16" or "hw=h200-sxm" or "model=..." on top of the shared options."""
    values: dict[str, object] = {"model": model, "hw": hw}
    option_values = asdict(base)
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in PLAN_FIELDS:
            raise MapperError(
                f"plan setting {part!r} must look like KEY=VALUE with KEY one of {', '.join(PLAN_FIELDS)}"
            )
        value = value.strip()
        if key in ("model", "hw"):
            values[key] = value
        else:  # the text form the link and the reproduce command share (mapper.report.reproduce)
            option_values[key] = parse_option(FIELD_BY_NAME[key], value)
    options = validate_options(PlanOptions(**option_values))
    hw_value = values["hw"]
    hardware = hw_value if isinstance(hw_value, HardwareProfile) else load_hardware(hw_value)
    return PlanSpec(values["model"], hardware, options)


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
