"""Steps 1-3 of a review, read off the baseline's mapping document: the KPIs, the first mechanism failure
in first-principles terms (bytes over bandwidth, FLOPs over peak, launches times overhead) and the part
of the mapping sheet that proves it (the failing kernels' tiling, fusion rule and class).
"""

from __future__ import annotations

from mapper.core.classes import Bottleneck
from mapper.core.targets import Targets
from mapper.core.units import format_bytes, format_duration
from mapper.hardware.profile import HardwareProfile
from mapper.report.answer import PERCENTILES
from mapper.report.verdict import Finding
from mapper.review.measured import measured_verdict

ARTIFACT_KERNELS = 8  # kernels of the failing class the proving artifact lists, longest first
KERNEL_FIELDS = (
    "name", "layer_type", "ops", "rule", "engine", "tile", "split_k", "waves", "wave_efficiency",
    "dram_bytes", "flops", "intensity_flop_per_byte", "time_s", "bottleneck", "evidence", "owner",
)  # fmt: skip
TERA = 1e12  # display units: T/s from 1e12, else G/s


# The Serving section's percentiles step 1 shows (None: not simulated): every kind's, as report.answer reads them.
SERVING_KPIS = tuple(key for rows in PERCENTILES.values() for _label, keys in rows for key in keys)


def kpis(doc: dict, targets: Targets, decode: bool) -> dict:
    """Step 1's KPIs, all read off the assessed document: the batch's latency (a decode step's: the time per
    output token of a full batch), throughput, MFU, stall and perf/W, and the per-request percentiles at the
    assessment's load (its rate and whether it was given or derived), each target with whether it is met."""
    t, serving = doc["totals"], doc.get("serving") or {}
    load = (doc.get("assessment") or {}).get("load") or {}
    return {
        "latency_s": t["latency_s"],
        "latency_is_tpot": decode,
        "throughput_per_s": t["throughput_per_s"],
        "mfu": t["mfu"],
        "memory_stall_fraction": t["memory_stall_fraction"],
        "perf_per_watt": t["perf_per_watt"],
        "avg_power_w": t["avg_power_w"],
        **{k: serving.get(k) for k in SERVING_KPIS},
        "load_rate_per_s": load.get("rate_per_s"),
        "load_derived": load.get("derived"),
        "load_sentence": load.get("sentence", ""),
        "targets": [c.as_dict() for c in targets.checks(serving)],
        "layer_types": [
            {k: layer[k] for k in ("layer_type", "share", "mfu", "stall_fraction")} for layer in doc["layer_types"]
        ],
    }


def dominant_class(doc: dict) -> str:
    times: dict[str, float] = {}
    for k in doc["kernels"]:
        times[k["bottleneck"]] = times.get(k["bottleneck"], 0.0) + k["time_s"]
    return max(sorted(times), key=times.__getitem__) if times else ""


def behind(doc: dict, cls: str) -> list[dict]:
    """The layer types of the class's kernels and their share of the latency, largest first."""
    latency = doc["totals"]["latency_s"] or 1.0
    by_layer: dict[str, list] = {}
    for k in doc["kernels"]:
        if k["bottleneck"] == cls:
            row = by_layer.setdefault(k["layer_type"], [0, 0.0])
            row[0] += 1
            row[1] += k["time_s"]
    rows = [{"layer_type": lt, "kernels": n, "share": s / latency} for lt, (n, s) in by_layer.items()]
    return sorted(rows, key=lambda r: -r["share"])


def _ms(seconds: float) -> str:
    return format_duration(seconds)  # the one duration format (µs, ms, s): the sentence reads as the pages do


def _rate(per_s: float, unit: str) -> str:
    return f"{per_s / 1e12:,.3g} T{unit}/s" if per_s >= TERA else f"{per_s / 1e9:,.3g} G{unit}/s"


def mechanism(doc: dict, finding: Finding, hw: HardwareProfile, decode: bool) -> str:
    """The first failure as one sentence of mechanism: what moves or computes how much at what rate."""
    cls = dominant_class(doc)
    if finding.check != "dominant bottleneck":  # capacity or the latency target first, then what lies under it
        under = mechanism(doc, Finding("dominant bottleneck", "", finding.owner), hw, decode) if cls else ""
        return f"{finding.sentence[0].upper()}{finding.sentence[1:]} Underneath: {under}".strip()
    kernels = [k for k in doc["kernels"] if k["bottleneck"] == cls]
    rows = behind(doc, cls)
    what = f"{'decode ' if decode else ''}{rows[0]['layer_type'] if rows else 'its'} kernels"
    spent = sum(k["time_s"] for k in kernels)
    step = "per step" if decode else "per batch"
    if cls == Bottleneck.MEMORY:
        dram = sum(k["dram_bytes"] for k in kernels)
        weights = sum(k["weight_bytes"] for k in kernels)
        floor = dram / hw.dram_bandwidth_bytes_per_s
        of_weights = f" ({format_bytes(weights)} of it weights)" if weights else ""
        return (
            f"The {len(kernels)} memory-bound kernels (mostly {what}) read and write {format_bytes(dram)}{of_weights}"
            f" {step} at {_rate(hw.dram_bandwidth_bytes_per_s, 'B')}: memory-bound, a {_ms(floor)} floor;"
            f" they take {_ms(spent)} of {_ms(doc['totals']['latency_s'])}."
        )
    if cls == Bottleneck.COMPUTE_MATRIX:
        flops = sum(k["flops"] for k in kernels)
        peak = doc["totals"]["peak_flops_per_s"]
        return (
            f"The {len(kernels)} matrix kernels (mostly {what}) do {flops / 1e9:,.4g} GFLOP {step} at a"
            f" {doc['totals']['dtype']} peak of {_rate(peak, 'FLOP')}: compute-bound, a {_ms(flops / peak)} floor;"
            f" they take {_ms(spent)}."
        )
    if cls == Bottleneck.LAUNCH:
        n, launches_s = len(doc["kernels"]), sum(k["overhead_s"] for k in doc["kernels"])
        return (  # the launch the cost charged each kernel (the runtime's: eager, or graph replay)
            f"{n} kernels at {_ms(launches_s / n)} of launch overhead each spend {_ms(launches_s)}"
            f" on launches alone, {launches_s / doc['totals']['latency_s']:.0%} of the"
            f" {_ms(doc['totals']['latency_s'])} {step}: launch-bound."
        )
    if cls == Bottleneck.OCCUPANCY:
        waves = [k["wave_efficiency"] for k in kernels if k["wave_efficiency"] is not None]
        mean = sum(waves) / len(waves) if waves else 1.0
        return (
            f"The {len(kernels)} occupancy-bound kernels (mostly {what}) fill their last wave to {mean:.0%} on"
            f" {hw.compute_units} compute units: wave quantization, {_ms(spent)} {step}."
        )
    return f"The {len(kernels)} {cls} kernels (mostly {what}) take {_ms(spent)} {step}: {finding.sentence}"


def artifact(doc: dict, cls: str) -> dict:
    """Step 3: the failing class's kernels from the sheet (tiling, fusion rule, class) and the fusion plan."""
    kernels = sorted((k for k in doc["kernels"] if k["bottleneck"] == cls), key=lambda k: -k["time_s"])
    rules: dict[str, int] = {}
    for k in doc["kernels"]:
        rules[k["rule"]] = rules.get(k["rule"], 0) + 1
    return {
        "class": cls,
        "kernels": [{f: k[f] for f in KERNEL_FIELDS} for k in kernels[:ARTIFACT_KERNELS]],
        "kernels_of_class": len(kernels),
        "fusion_plan": dict(sorted(rules.items(), key=lambda kv: -kv[1])),
        "measured": doc.get("measured"),
        "measured_verdict": measured_verdict(doc, cls),
    }
