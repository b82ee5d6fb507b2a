"""Roll-up: kernel estimates -> model totals and per-layer-type figures.

The schedule stage (pipeline.roll_up_slice). On one stream, latency is the sum of kernel times. MFU is model
FLOPs (algorithmic, unpadded) over latency x the dtype's matrix peak; the
memory-stall fraction is the time-weighted mean of kernels' stall fractions
(`cost.roofline.MEMORY_STALL_DEFINITION`, the one definition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mapper.core.graph import Graph
from mapper.core.result import KernelEstimate, LayerRollup, Totals
from mapper.core.timeline import KernelEstimates, in_order_sum
from mapper.cost.roofline import MEMORY_STALL_DEFINITION
from mapper.work.workload import Workload

STALL_DEFINITION = MEMORY_STALL_DEFINITION  # the name the assumptions' row reads (pipeline.assumptions_used)


def batch_size(graph: Graph) -> int:
    dims = dict(graph.dims)
    for key in ("batch", "batch_size", "N"):
        if key in dims:
            return max(int(dims[key]), 1)
    for name in graph.inputs:
        spec = graph.tensors.get(name)
        if spec is not None and spec.shape:
            return max(int(spec.shape[0]), 1)
    return 1


@dataclass(frozen=True, slots=True)
class Spread:
    """How one batch is spread over devices; the defaults are one device."""

    devices: int = 1  # devices serving one batch together (a stage's x pp): MFU is against all of their peaks
    replicas: int = 1  # data-parallel copies (dp): throughput counts each
    steady_state_s: float | None = None  # with pipeline stages: back-to-back batches overlap, one per this
    ranks: int = 1  # devices each kernel runs on at once (a stage's: tp, or ep devices of their own at tp 1)
    idle_others_w: float = 0.0  # the other stages' devices, idling meanwhile


def roll_up(
    estimates: Sequence[KernelEstimate],
    workload: Workload,
    weight_bytes: float,
    peak: float,
    dtype: str,
    spread: Spread = Spread(),
) -> tuple[tuple[LayerRollup, ...], Totals]:
    """Model totals and per-layer-type figures of `workload`'s kernel estimates, spread over devices as
    `spread` says. Energy: each kernel runs on `spread.ranks` devices at once while the other stages' devices
    idle; power and perf-per-watt are over every device of every replica."""
    timeline: KernelEstimates = KernelEstimates.of(estimates)
    column = timeline.column  # the columns: an estimate's figures are properties of it, none is written
    times = column("time_s")
    with np.errstate(all="ignore"):  # Python's float arithmetic: inf and nan follow from a hostile profile silently
        stalled = column("stall_fraction") * times
    latency = in_order_sum(times)
    stall_time = in_order_sum(stalled)
    energy = spread.ranks * in_order_sum(column("energy_j")) + spread.idle_others_w * latency
    batch = batch_size(workload.graph)
    layers = _layers(timeline, times, stalled, latency, peak)
    power = spread.replicas * energy / latency if latency else 0.0
    period = spread.steady_state_s if spread.steady_state_s else latency
    throughput = spread.replicas * batch / period if period else 0.0
    model_flops = workload.flops
    totals = Totals(
        latency_s=latency,
        batch=batch,
        throughput_per_s=throughput,
        flops=model_flops,
        matrix_flops=workload.matrix_flops,
        dram_bytes=in_order_sum(column("dram_bytes")),
        weight_bytes=weight_bytes,
        mfu=model_flops / (latency * peak * spread.devices) if latency else 0.0,
        memory_stall_fraction=stall_time / latency if latency else 0.0,
        energy_j=energy,
        energy_per_inference_j=energy / batch,
        avg_power_w=power,
        perf_per_watt=throughput / power if power else 0.0,
        peak_flops_per_s=peak,
        dtype=dtype,
    )
    return layers, totals


def _layers(
    estimates: KernelEstimates, times: np.ndarray, stalled: np.ndarray, latency: float, peak: float
) -> tuple[LayerRollup, ...]:
    """One row per layer type, the most time first (`times` and `stalled`: each position's time and stalled time)."""
    code: dict[str, int] = {}  # each layer type in order of first appearance, as the rows were grouped
    codes = estimates.kernels.source_codes(lambda k: code.setdefault(k.layer_type, len(code)))
    kinds = list(code)
    figures = np.column_stack([times, estimates.kernels.column("flops"), stalled])
    rows = []
    for i, layer in enumerate(kinds):
        mine = figures[codes == i]
        with np.errstate(all="ignore"):  # each column summed in timeline order, as `in_order_sum`: one call a layer
            t, f, stall = np.cumsum(mine, axis=0)[-1].tolist() if len(mine) else (0.0, 0.0, 0.0)
        rows.append((layer, len(mine), t, f, stall))
    layers = []
    for layer, count, t, f, stall in sorted(rows, key=lambda row: -row[2]):
        layers.append(
            LayerRollup(
                str(layer),
                count,
                t,
                t / latency if latency else 0.0,
                f,
                f / (t * peak) if t else 0.0,  # per-device kernels on one device's peak
                stall / t if t else 0.0,
            )
        )
    return tuple(layers)
