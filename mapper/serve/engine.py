"""The engine as the serving stage's service time: batch size -> the mapped latency at that size.

A slice's Serving section is the assessment's (mapper.review.assessment), at the load the question gives or
derives; nothing here picks a load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mapper.core.result import MappingResult
from mapper.handle import open_model
from mapper.pipeline import map_workload
from mapper.serve.serving import ServingConfig, ServingResult, simulate_serving
from mapper.work.workload import Workload


def engine_batch_time(
    source, dims: dict[str, int] | None, hw, options, mapped: MappingResult | None = None
) -> Callable[[int], float]:
    """Batch size -> the engine's latency for the model (a handle, or what `open_model` takes) at that
    batch (each size mapped once). `mapped`: a result already mapped; its batch is not mapped again where
    it is the very slice this would map (same graph, bindings, profile and options), so a caller that
    mapped the batch first (the dashboard's Overview) pays one mapping, not two. A model without a batch dim
    (static shapes) runs a batch of k requests as k runs of its one mapping."""
    cache: dict[int, float] = {}
    model = open_model(source)
    fixed = model.dims_without_batch(dims)
    if "batch" not in model.roles.values():  # static shapes: a batch of k requests is k runs, one after another
        one = model.bind(dims)
        alone = (
            mapped.totals.latency_s
            if mapped is not None and is_slice_of(mapped, one, hw, options)
            else map_workload(one, hw, options).totals.latency_s
        )
        return lambda batch: batch * alone

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
