"""Power and perf-per-watt against batch size (docs/manual.md, "Serving: p50/p95/p99 under load, and
perf-per-watt").

Per-kernel power (idle + energy per FLOP by dtype + energy per byte, capped at the TDP by a clock
drop that stretches the kernel) is the cost stage's (mapper/cost/estimate.py); this maps the model at each
batch size and reads the roll-up: average power, energy per inference, perf-per-watt, throttled share.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.handle import open_model
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
MAX_POINTS = limits.MAX_POWER_POINTS


@dataclass(frozen=True, slots=True)
class PowerPoint:
    batch: int
    latency_s: float
    throughput_per_s: float  # inferences per second
    avg_power_w: float
    energy_per_inference_j: float
    perf_per_watt: float  # inferences per second per watt (= inferences per joule)
    throttled_share: float  # share of the batch's time spent in kernels slowed by the power cap


def power_curve(
    source,
    hw: HardwareProfile,
    options: PlanOptions = PlanOptions(),
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    dims: dict[str, int] | None = None,
) -> tuple[PowerPoint, ...]:
    """Map the model (built-in name, path or bytes) at each batch size and report its power figures."""
    batches = tuple(batches)
    if not batches or len(batches) > MAX_POINTS or any(not isinstance(b, int) or b < 1 for b in batches):
        raise MapperError(
            f"batches must be 1 to {limits.limit_text('MAX_POWER_POINTS')} integers >= 1 (got {batches!r})"
        )
    model = open_model(source)
    fixed = model.dims_without_batch(dims)
    points = []
    for batch in sorted(set(batches)):
        result = map_workload(model.bind(fixed, batch=batch), hw, options)
        t = result.totals
        throttled = sum(e.time_s for e in result.kernels if e.throttled)
        points.append(
            PowerPoint(
                batch,
                t.latency_s,
                t.throughput_per_s,
                t.avg_power_w,
                t.energy_per_inference_j,
                t.perf_per_watt,
                throttled / t.latency_s if t.latency_s else 0.0,
            )
        )
    return tuple(points)
