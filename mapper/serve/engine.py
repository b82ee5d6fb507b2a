"""The engine as the serving stage's service time, and one mapped slice with its Serving section.

`map_slice` is what `mapper map` and the dashboard both run, so the CLI's sheet and the dashboard's
sheet of one slice are the same document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mapper.core.result import MappingResult, PlanOptions
from mapper.handle import open_model
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.serve.load_curve import serving_section
from mapper.serve.serving import ServingConfig, ServingResult, simulate_serving
from mapper.work.workload import Workload

SHEET_LOAD_FRACTION = 0.7  # offered load for the sheet's default serving run, of the batch's capacity
SHEET_REQUESTS = 20_000


def engine_batch_time(
    source, dims: dict[str, int] | None, hw, options, mapped: MappingResult | None = None
) -> Callable[[int], float]:
    """Batch size -> the engine's latency for the model (a handle, or what `open_model` takes) at that
    batch (each size mapped once). `mapped`: a result already mapped; its batch is not mapped again where
    it is the very slice this would map (same graph, bindings, profile and options), so a caller that
    mapped the batch first (the dashboard's Overview) pays one mapping, not two."""
    cache: dict[int, float] = {}
    model = open_model(source)
    fixed = model.dims_without_batch(dims)

    def batch_time(batch: int) -> float:
        if batch not in cache:
            workload = model.bind(fixed, batch=batch)
            if mapped is not None and is_slice_of(mapped, workload, hw, options):
                cache[batch] = mapped.totals.latency_s
            else:
                cache[batch] = map_workload(workload, hw, options).totals.latency_s
        return cache[batch]

    return batch_time


def is_slice_of(result: MappingResult, workload: Workload, hw, options) -> bool:
    """Whether `result` is the mapping of `workload` on `hw` with `options` (map_workload's own inputs)."""
    graph = workload.graph
    return (result.model_sha256, result.dims, result.hardware_sha256, result.options) == (
        graph.sha256,
        graph.dims,
        hw.sha256,
        options,
    )


def simulate_model_serving(
    source, dims: dict[str, int] | None, hw, options, config: ServingConfig, service_time_s: float | None = None
) -> ServingResult:
    """simulate_serving with the engine's batch latency as the service time and the profile's jitter
    where the config leaves it open (`service_time_s` replaces the engine: what-if)."""
    if config.jitter_cv is None:
        config = replace(config, jitter_cv=hw.jitter_cv, jitter_dist=config.jitter_dist or hw.jitter_dist)
    service = service_time_s if service_time_s is not None else engine_batch_time(source, dims, hw, options)
    return simulate_serving(service, config)


def serving_for_result(
    result, hw, load_fraction: float = SHEET_LOAD_FRACTION, requests: int = SHEET_REQUESTS, seed: int = 0
) -> dict:
    """Serve the mapped batch as a static batch at `load_fraction` of its capacity, with the profile's
    jitter: the percentiles a review asks for next to the batch latency (Serving sheet, `--json`)."""
    batch, latency = result.totals.batch, result.totals.latency_s
    if not latency > 0:  # a model of free ops only (Identity): no queue forms, there is nothing to simulate
        return {
            "policy": "static",
            "max_batch": batch,
            "requests": 0,
            "assumptions": [
                (
                    f"not simulated: this mapping takes {latency!r} s per batch (every node is free),"
                    " so requests never wait"
                )
            ],
        }
    config = ServingConfig(
        policy="static",
        max_batch=batch,
        rate_per_s=load_fraction * batch / latency,
        requests=requests,
        seed=seed,
        jitter_cv=hw.jitter_cv,
        jitter_dist=hw.jitter_dist,
    )
    section = serving_section(simulate_serving(lambda _size: latency, config), config)
    section["assumptions"].append(
        f"service time: this mapping's batch latency {latency:.6g} s (the final short"
        " batch is charged a full batch's time)"
    )
    return section


def map_slice(workload: Workload, hardware: HardwareProfile, options: PlanOptions = PlanOptions()) -> MappingResult:
    """`map_workload` with the Serving section attached: the one mapping of a slice that `mapper map`
    prints and the dashboard shows and exports."""
    result = map_workload(workload, hardware, options)
    return replace(result, serving=serving_for_result(result, hardware))
