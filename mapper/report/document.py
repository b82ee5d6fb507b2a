"""The mapping document: one JSON-ready dict that `--json`, the sheets and the dashboard share.

Key names are stable (later stages add sections, never rename). Numbers stay
numbers in SI units; units are in the key names. The row sections (a record per kernel and per node, most of
a large graph's document) can be read once as they are written (`streamed_document`), so writing the document
out (`report.json_text`) never holds every row's record at once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from mapper.core.records import each
from mapper.core.result import KernelEstimate, MappingResult, MemoryPlan, NodeWork, ParallelPlan
from mapper.report.reproduce import reproduce_command


def _num(x: float) -> float | None:
    """JSON has no inf/NaN: an infinite intensity (no DRAM traffic) is written as null."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def kernel_record(e: KernelEstimate) -> dict:
    k, c = e.kernel, e.tiling.chosen
    tile = f"{c.tile_m}x{c.tile_n}x{c.tile_k}" if c else ""
    return {
        "name": k.name,
        "ops": list(k.op_types),
        "nodes": list(k.nodes),
        "rule": k.rule,
        "layer_type": str(k.layer_type),
        "engine": k.engine,
        "dtype": e.dtype,
        "layout": k.layout,
        "tile": tile,
        "stages": c.stages if c else None,
        "split_k": c.split_k if c else None,
        "tiles": c.tiles if c else None,
        "waves": c.waves if c else None,
        "wave_efficiency": c.wave_efficiency if c else None,
        "padding_efficiency": c.padding_efficiency if c else None,
        "sram_bytes": c.sram_bytes if c else None,
        "block_size": e.tiling.block_size or None,
        "query_heads_per_kv": k.matrix.group if k.matrix is not None and k.matrix.kv_heads else None,
        "passes": e.tiling.passes,
        "grid_syncs": e.tiling.grid_syncs,
        "alternatives": [
            {
                "tile": f"{a.tile_m}x{a.tile_n}x{a.tile_k}",
                "split_k": a.split_k,
                "waves": a.waves,
                "wave_efficiency": a.wave_efficiency,
                "time_s": a.time_s,  # on the kernel's basis, launch included, as the kernel's own time_s
            }
            for a in e.tiling.alternatives
        ],
        "flops": k.flops,
        "matrix_flops": k.matrix_flops,
        "dram_bytes": e.dram_bytes,
        "l2_bytes": e.l2_bytes,
        "weight_bytes": k.weight_bytes,
        "time_s": e.time_s,
        "start_s": e.start_s,
        "compute_time_s": e.compute_time_s,
        "memory_time_s": e.memory_time_s,
        "overhead_s": e.overhead_s,
        "sync_s": e.sync_s,
        "intensity_flop_per_byte": _num(e.intensity_flop_per_byte),
        "achieved_flops_per_s": e.achieved_flops_per_s,
        "stall_fraction": e.stall_fraction,
        "energy_j": e.energy_j,
        "avg_power_w": e.avg_power_w,
        "throttled": e.throttled,
        "bottleneck": e.bottleneck,
        "evidence": e.evidence,
        "owner": e.owner,
        "roofline_time_s": e.roofline_time_s,
        "speedup_if_removed": e.speedup_if_removed,
        "note": k.note,
    }


def slice_section(result: MappingResult) -> dict:
    """What the slice is: the model (its hash and bindings), the profile (its hash) and the plan options."""
    model = {"name": result.model_name, "sha256": result.model_sha256, "nodes": result.node_count}
    hardware = {"name": result.hardware_name, "sha256": result.hardware_sha256}
    return {
        "model": model | {"dims": dict(result.dims), "builtin": result.model_builtin},
        "hardware": hardware | {"builtin": result.hardware_builtin},
        "options": dataclasses.asdict(result.options),
    }


ROW_SECTIONS = ("kernels", "nodes")  # the document's sections of one record per kernel / per node


def node_record(n: NodeWork) -> dict:
    return {
        "name": n.name,
        "op_type": n.op_type,
        "op_class": str(n.op_class),
        "layer_type": str(n.layer_type),
        "flops": n.flops,
        "matrix_flops": n.matrix_flops,
        "bytes": n.bytes,
        "weight_bytes": n.weight_bytes,
    }


def mapping_document(result: MappingResult) -> dict:
    """The whole result as plain data (what `mapper map --json` prints)."""
    doc = streamed_document(result)
    for key in ROW_SECTIONS:
        doc[key] = list(doc[key])
    return doc


def streamed_document(result: MappingResult) -> dict[str, Any]:
    """`mapping_document` with its row sections (`ROW_SECTIONS`) as iterators to be read once, in key order."""
    t = result.totals
    rows: dict[str, Iterable[dict]] = {
        "kernels": map(kernel_record, each(result.kernels)),
        "nodes": map(node_record, each(result.nodes)),
    }
    doc = {
        **slice_section(result),
        "engine_version": result.engine_version,
        "created_utc": result.created_utc,
        "totals": {
            "flops": t.flops,
            "matrix_flops": t.matrix_flops,
            "dram_bytes": t.dram_bytes,
            "weight_bytes": t.weight_bytes,
            "latency_s": t.latency_s,
            "batch": t.batch,
            "throughput_per_s": t.throughput_per_s,
            "mfu": t.mfu,
            "memory_stall_fraction": t.memory_stall_fraction,
            "energy_j": t.energy_j,
            "energy_per_inference_j": t.energy_per_inference_j,
            "avg_power_w": t.avg_power_w,
            "perf_per_watt": t.perf_per_watt,
            "peak_flops_per_s": t.peak_flops_per_s,
            "dtype": t.dtype,
            "kernels": len(result.kernels),
        },
        "precision": precision_record(result),
        "layer_types": [dataclasses.asdict(layer) for layer in result.layers],
        **rows,
        "unmodeled": [{"name": n, "op_type": op, "reason": why} for n, op, why in result.unmodeled],
        "caveats": list(result.caveats),
        "assumptions": [{"name": n, "value": v, "source": s} for n, v, s in result.assumptions],
        "memory": memory_record(result.memory),
        "parallel": parallel_record(result.parallel),
        **{
            key: section
            for key, section in (
                ("serving", result.serving),
                ("measured", result.measured),
                ("assessment", result.assessment),
            )
            if section
        },
    }
    doc["reproduce"] = reproduce_command(doc)  # the `mapper map` line that maps this slice again
    return doc


def precision_record(result: MappingResult) -> dict:
    """The `precision` section: the plan's dtype, the model's released one and where that was read (a built-in's
    table row, a config's torch_dtype, the file's tensors); released and source null where not known."""
    released = result.released
    return {
        "dtype": result.totals.dtype,
        "released": str(released.dtype) if released else None,
        "source": released.source if released else None,
    }


def memory_record(plan: MemoryPlan) -> dict:
    """The `memory` section: the plan's fields, the smallest fit as {"tp", "pp", "per_device_bytes"} or null."""
    record = {f: getattr(plan, f) for f in MemoryPlan.__slots__}
    record["smallest_fit"] = dataclasses.asdict(plan.smallest_fit) if plan.smallest_fit else None
    return record


def parallel_record(plan: ParallelPlan) -> dict:
    """The `parallel` section: degrees, stage times, the interconnect's share and every collective."""
    record = {f: getattr(plan, f) for f in ParallelPlan.__slots__}
    record["stage_times_s"] = list(plan.stage_times_s)
    record["collectives"] = [dataclasses.asdict(c) for c in plan.collectives]
    record["assumptions"] = list(plan.assumptions)
    return record
