"""A training review as one JSON-ready document: what `mapper train --json` prints and the CLI's text reads."""

from __future__ import annotations

from mapper.core.version import __version__
from mapper.train.memory import TrainMemory
from mapper.train.review import Lever, TrainingReview

TOTALS_FIELDS = (
    "step_time_s", "tokens_per_step", "tokens_per_s_per_device", "mfu", "hfu", "model_flops", "hardware_flops",
    "peak_flops_per_s", "bubble_share", "exposed_communication_share", "tensor_parallel_share", "recompute_share",
    "optimizer_share", "memory_stall_fraction", "flop_convention",
)  # fmt: skip
MEMORY_FIELDS = (
    "weight_bytes", "gradient_bytes", "optimizer_bytes", "activation_bytes", "recompute_working_bytes", "logits_bytes",
    "host_optimizer_bytes", "capacity_bytes", "stage",
)  # fmt: skip


def memory_section(m: TrainMemory) -> dict:
    return {
        **{f: getattr(m, f) for f in MEMORY_FIELDS},
        "per_device_bytes": m.per_device_bytes,
        "fits": m.fits,
        "shortfall_bytes": m.shortfall_bytes,
    }


def _lever(lever: Lever) -> dict:
    return {
        "change": lever.change,
        "step_time_s": lever.step_time_s,
        "tokens_per_s_per_device": lever.tokens_per_s_per_device,
        "gain": lever.gain,
        "per_device_bytes": lever.per_device_bytes,
        "fits": lever.fits,
        "owner": str(lever.owner),
        "rollback": lever.rollback,
        "text": lever.text,
    }


def training_document(review: TrainingReview) -> dict:
    r = review.result
    o, t, d = r.options, r.totals, r.forward.dims
    options = {
        "tp": o.tp, "pp": o.pp, "dp": o.dp, "cp": o.cp, "ep": o.ep, "vp": o.vp, "devices": o.devices, "zero": o.zero,
        "micro_batch": o.micro_batch, "global_batch": o.sequences, "micro_batches": o.micro_batches, "seq": o.seq,
        "recompute": str(o.recompute), "dtype": str(o.dtype), "schedule": str(o.pipeline),
        "sequence_parallel": o.sequence_parallel, "offload_optimizer": o.offload_optimizer,
        "overlap_grad_reduce": o.overlap_grad_reduce, "dropout": o.dropout,
    }  # fmt: skip
    return {
        "kind": "training",
        "engine_version": __version__,
        "model": r.model_name,
        "hardware": r.hardware_name,
        "parameters": r.parameters,
        "layer": {
            "hidden": d.hidden,
            "heads": d.heads,
            "kv_width": d.kv_width,
            "ffn": d.ffn,
            "gated": d.gated,
            "layers": d.layers,
            "vocab": d.vocab,
        },
        "options": options,
        "totals": {**{f: getattr(t, f) for f in TOTALS_FIELDS}, "dtype": str(t.dtype)},
        "memory": memory_section(r.memory),
        "micro_batch_s": dict(r.micro_batch_s),
        "stage_times_s": list(r.stage_times_s),
        "layer_shares": dict(r.layer_shares),
        "gradient_sync": {
            "kind": r.sync.kind,
            "gradient_bytes": r.sync.gradient_bytes,
            "parameter_bytes": r.sync.parameter_bytes,
            "time_s": r.sync.time_s,
            "exposed_s": r.sync.exposed_s,
            "buckets": r.sync.buckets,
        },
        "review": {
            "first_failure": review.first_failure,
            "fix": _lever(review.fix) if review.fix else None,
            "levers": [_lever(lever) for lever in review.levers],
        },
        "assumptions": list(r.assumptions),
    }


MEMORY_ROWS = (
    ("weights", "weight_bytes"),
    ("gradients (fp32 main)", "gradient_bytes"),
    ("optimizer state", "optimizer_bytes"),
    ("activations", "activation_bytes"),
    ("recompute working set", "recompute_working_bytes"),
    ("logits (fp32)", "logits_bytes"),
    ("per device", "per_device_bytes"),
    ("capacity", "capacity_bytes"),
    ("optimizer state on the host", "host_optimizer_bytes"),
)


def training_sheet(doc: dict) -> list[dict]:
    """The training document as a sheet's rows (section, item, value, unit): the totals, the memory per device
    broken down, the time by layer type and the micro-batch by phase; numbers, never formatted text."""
    t, m = doc["totals"], doc["memory"]
    rows = [{"section": "totals", "item": f, "value": t[f], "unit": _unit(f)} for f in TOTALS_FIELDS[:-1]]
    rows += [
        {"section": "memory per device", "item": name, "value": m[key], "unit": "bytes"} for name, key in MEMORY_ROWS
    ]
    rows += [
        {"section": "share of the step", "item": k, "value": v, "unit": "fraction"}
        for k, v in doc["layer_shares"].items()
    ]
    rows += [{"section": "micro-batch", "item": k, "value": v, "unit": "s"} for k, v in doc["micro_batch_s"].items()]
    return rows


UNITS = {"step_time_s": "s", "tokens_per_step": "tokens", "tokens_per_s_per_device": "tokens/s",
         "model_flops": "FLOP", "hardware_flops": "FLOP", "peak_flops_per_s": "FLOP/s"}  # fmt: skip


def _unit(field: str) -> str:
    """A totals field's unit (the rest are fractions of the step or of the peak)."""
    return UNITS.get(field, "fraction")
