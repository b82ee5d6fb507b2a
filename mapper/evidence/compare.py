"""Predicted against measured: a MappingResult beside a Measurement, per kernel group, layer type and model.

`compare_measured` gives the JSON-ready "Measured" section; `kernel_groups` (also calibrate's input)
scores kernels ORT ran inside another node's time together with the next measured kernel.
"""

from __future__ import annotations

from mapper.core.classes import Bottleneck
from mapper.core.vocab import Engine
from mapper.evidence.measure import Measurement

LAUNCH_BOUND_MULTIPLE = 2  # a measured group under this many kernel launches is launch-bound (its fixed cost)


DEFINITIONS = {  # how each figure of the comparison is computed (the JSON carries it)
    "error": "(predicted - measured) / measured",
    "measured_mfu": "FLOPs / (measured time x the plan dtype's matrix peak)",
    "achieved_flops_per_s": "a kernel group's FLOPs / its measured time (bytes/s likewise, DRAM bytes)",
    "measured_class": "launch-bound under 2x kernel_launch_s, else the larger of FLOP/s/peak "
    "and DRAM B/s/bandwidth at the measured time (compute-bound on the group's engine: matrix, or "
    "vector/SFU); not measured where the run gave the group no time",
    "roofline_efficiency": "the roofline's time for the work (max of FLOPs / peak and DRAM bytes / bandwidth)"
    " / the measured time",
    "measured_memory_stall_fraction": "over the measured kernel time: the time past their compute floor"
    " (FLOPs / peak) of the groups whose measured class is memory-bound",
    "class_agreement": "the share of measured kernel time whose measured class is the predicted one",
    "idle_before_s": "a trace's idle time on the unit's thread or stream just before the group's units, per"
    " run (the gap since the previous unit there ended)",
    "launch_s": "a GPU trace's CPU time in the CUDA runtime calls that launched the group's kernels, per run",
}


SUMMED = ("predicted_s", "measured_s", "flops", "dram_bytes", "measured_stall_s", "idle_before_s", "launch_s")


def _assumed(result, key: str, default: float) -> float:
    for name, value, _src in result.assumptions:
        if name == key:
            return float(value)
    return default


def measured_class(group: dict, peak: float, bandwidth: float, launch_s: float) -> Bottleneck:
    """The bottleneck a kernel group's measured time implies, in the predicted classes' vocabulary: the
    resource it used the largest share of (compute on the group's engine) or the fixed cost."""
    flops, dram_bytes, time_s = group["flops"], group["dram_bytes"], group["measured_s"]
    if time_s <= 0:
        return Bottleneck.NOT_MEASURED
    if time_s < LAUNCH_BOUND_MULTIPLE * launch_s:
        return Bottleneck.LAUNCH
    if flops / time_s / peak < dram_bytes / time_s / bandwidth:
        return Bottleneck.MEMORY
    return Bottleneck.COMPUTE_MATRIX if group["engine"] == Engine.MATRIX else Bottleneck.COMPUTE_VECTOR


def kernel_groups(result, measurement: Measurement) -> tuple[list[dict], float, list[dict]]:
    """Measured time per engine kernel; kernels ORT ran inside another node's time join the next measured kernel."""
    kernel_of = {node: i for i, e in enumerate(result.kernels) for node in e.kernel.nodes}
    measured = [0.0] * len(result.kernels)
    idle = [0.0] * len(result.kernels)
    launch = [0.0] * len(result.kernels)
    unmatched, unmatched_s = [], 0.0
    for n in measurement.nodes:
        hits = [kernel_of[o] for o in n.onnx_nodes if o in kernel_of]
        if hits:
            measured[max(hits)] += n.time_s
            idle[max(hits)] += n.idle_s
            launch[max(hits)] += n.launch_s
        else:
            why = (
                n.how if n.onnx_nodes == () else "unmatched: the engine has no kernel for it (folded shape op or view)"
            )
            unmatched.append({"name": n.name, "op_type": n.op_type, "time_s": n.time_s, "why": why})
            unmatched_s += n.time_s
    groups, pending = [], []
    for i, e in enumerate(result.kernels):
        pending.append(i)
        if measured[i] > 0 or i == len(result.kernels) - 1:
            groups.append(pending)
            pending = []
    out = []
    for members in groups:
        kernels = [result.kernels[i] for i in members]
        lead = max(kernels, key=lambda e: e.time_s)
        out.append(
            {
                "kernels": [e.kernel.name for e in kernels],
                "layer_type": str(lead.kernel.layer_type),
                "engine": lead.kernel.engine,
                "predicted_class": lead.bottleneck,
                "flops": sum(e.kernel.flops for e in kernels),
                "dram_bytes": sum(e.dram_bytes for e in kernels),
                "predicted_s": sum(e.time_s for e in kernels),
                "measured_s": sum(measured[i] for i in members),
                "idle_before_s": sum(idle[i] for i in members),  # a trace's idle gaps before its units, per run
                "launch_s": sum(launch[i] for i in members),  # a GPU trace's CPU time launching them, per run
            }
        )
    return out, unmatched_s, unmatched


def _error(predicted: float, measured: float) -> float | None:
    return (predicted - measured) / measured if measured > 0 else None


def _roofline_s(flops: float, dram_bytes: float, peak: float, bandwidth: float) -> float:
    """The roofline's time for the work: the slower of its FLOPs at the peak and its DRAM bytes at the bandwidth."""
    return max(flops / peak if peak > 0 else 0.0, dram_bytes / bandwidth if bandwidth > 0 else 0.0)


def _stall_s(group: dict, peak: float) -> float:
    """Measured memory-stall time: a group the run found memory-bound waited on DRAM for its time past its compute
    floor (its FLOPs at the peak)."""
    if group["measured_class"] != Bottleneck.MEMORY:
        return 0.0
    return max(group["measured_s"] - (group["flops"] / peak if peak > 0 else 0.0), 0.0)


def _rates(row: dict, peak: float, bandwidth: float) -> None:
    """A row's achieved FLOP/s and DRAM bytes/s at its measured time, and the share of the roofline it reached."""
    measured = row["measured_s"]
    row["measured_mfu"] = row["flops"] / (measured * peak) if measured > 0 else None
    row["achieved_flops_per_s"] = row["flops"] / measured if measured > 0 else None
    row["achieved_bytes_per_s"] = row["dram_bytes"] / measured if measured > 0 else None
    row["roofline_s"] = _roofline_s(row["flops"], row["dram_bytes"], peak, bandwidth)
    row["roofline_efficiency"] = row["roofline_s"] / measured if measured > 0 else None


def _score(groups: list[dict], peak: float, bandwidth: float, launch: float) -> None:
    """Each kernel group's error, measured MFU, achieved FLOP/s and bytes/s against the roofline, measured class and
    measured memory-stall time, in place."""
    for g in groups:
        g["error"] = _error(g["predicted_s"], g["measured_s"])
        _rates(g, peak, bandwidth)
        g["measured_class"] = measured_class(g, peak, bandwidth, launch)
        g["measured_stall_s"] = _stall_s(g, peak)


def _layers(groups: list[dict], peak: float, bandwidth: float) -> list[dict]:
    """Per layer type: times, FLOPs and bytes summed, the rates they imply, the predicted and measured class (each
    the class of most of the layer's predicted or measured time) and the share of measured time where they agree."""
    layers: dict[str, dict] = {}
    for g in groups:
        row = layers.setdefault(
            g["layer_type"],
            {
                "layer_type": g["layer_type"],
                "kernel_groups": 0,
                "predicted_s": 0.0,
                "measured_s": 0.0,
                "flops": 0.0,
                "dram_bytes": 0.0,
                "measured_stall_s": 0.0,
                "idle_before_s": 0.0,
                "launch_s": 0.0,
                "agreeing_s": 0.0,
                "class_time": {},
                "predicted_time": {},
            },
        )
        row["kernel_groups"] += 1
        for key in SUMMED:
            row[key] += g[key]
        row["agreeing_s"] += g["measured_s"] if g["measured_class"] == g["predicted_class"] else 0.0
        row["class_time"][g["measured_class"]] = row["class_time"].get(g["measured_class"], 0.0) + g["measured_s"]
        row["predicted_time"][g["predicted_class"]] = (
            row["predicted_time"].get(g["predicted_class"], 0.0) + g["predicted_s"]
        )
    for row in layers.values():
        row["error"] = _error(row["predicted_s"], row["measured_s"])
        _rates(row, peak, bandwidth)
        row["measured_class"] = max(row.pop("class_time").items(), key=lambda kv: kv[1])[0]
        row["predicted_class"] = max(row.pop("predicted_time").items(), key=lambda kv: kv[1])[0]
        row["class_agreement"] = row.pop("agreeing_s") / row["measured_s"] if row["measured_s"] > 0 else None
    return sorted(layers.values(), key=lambda r: -abs(r["predicted_s"] - r["measured_s"]))


def compare_measured(result, measurement: Measurement) -> dict:
    """Predicted against measured (JSON-ready; attach as MappingResult.measured): per kernel group, layer, model.

    error = (predicted - measured) / measured. Kernel groups: ORT often fuses more than the engine, so a kernel
    with no measured node of its own is scored together with the next kernel that has one."""
    peak = result.totals.peak_flops_per_s
    bandwidth = _assumed(result, "memory.dram_bandwidth_bytes_per_s", 1.0)
    launch = _assumed(result, "overhead.kernel_launch_s", 0.0)
    groups, unmatched_s, unmatched = kernel_groups(result, measurement)
    _score(groups, peak, bandwidth, launch)
    layers = _layers(groups, peak, bandwidth)
    measured_p50 = measurement.p50_s
    node_sum = sum(n.time_s for n in measurement.nodes)
    kernel_s = sum(g["measured_s"] for g in groups)
    model = {
        "model": result.model_name,
        "hardware": result.hardware_name,
        "predicted_s": result.totals.latency_s,
        "measured_p50_s": measured_p50,
        "measured_p95_s": measurement.percentile_s(95),
        "measured_p99_s": measurement.percentile_s(99),
        "error": _error(result.totals.latency_s, measured_p50),
        "measured_mfu": result.totals.flops / (measured_p50 * peak) if measured_p50 > 0 else None,
        "peak_flops_per_s": peak,
        "dram_bandwidth_bytes_per_s": bandwidth,
        "predicted_mfu": result.totals.mfu,
        "predicted_memory_stall_fraction": result.totals.memory_stall_fraction,
        "measured_memory_stall_fraction": sum(g["measured_stall_s"] for g in groups) / kernel_s if kernel_s else None,
        "class_agreement": sum(g["measured_s"] for g in groups if g["measured_class"] == g["predicted_class"])
        / kernel_s
        if kernel_s
        else None,
        "node_time_s": node_sum,
        "unmatched_s": unmatched_s,
        "framework_overhead_s": max(measured_p50 - node_sum, 0.0) if measurement.latencies_s else 0.0,
        "kernels": len(result.kernels),
        "measured_nodes": len(measurement.nodes),
    }
    by_miss = sorted(groups, key=lambda g: -abs(g["predicted_s"] - g["measured_s"]))
    return {
        "model": model,
        "layers": layers,
        "kernels": by_miss,
        "unmatched": sorted(unmatched, key=lambda u: -u["time_s"]),
        "measurement": {k: v for k, v in measurement.to_dict().items() if k != "nodes"},
        "definitions": dict(DEFINITIONS),
    }
