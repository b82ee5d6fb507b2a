"""Whether a measured run proves or refutes the review's first failure: the failing class's kernel groups at their
measured time (a mapping document's Measured section, evidence/compare.py), the share of it that ran in that class,
and what they achieved against the roofs the comparison used. Step 3 (proof.py), review.json (steps.py) and the
packet's README (packet.py) read it; it imports no chart library.
"""

from __future__ import annotations

from mapper.core.units import format_duration, format_rate

NONE = "—"  # a rate where nothing was timed
PROVES_SHARE = 0.5  # the run proves the failure where the failing class's groups ran in that class for at least
# this share of their measured time (by the measured-class rule of evidence/compare.py), and refutes it otherwise


def rate_text(amount: float, time_s: float, roof: float, unit: str) -> str:
    """An achieved rate and its share of the roof ("310 TFLOP/s (31%)"); a dash where nothing was timed."""
    if time_s <= 0 or amount <= 0:
        return NONE
    rate = amount / time_s
    return f"{format_rate(rate, unit)} ({rate / roof:.0%})" if roof > 0 else format_rate(rate, unit)


def measured_verdict(doc: dict, cls: str) -> dict:
    """Whether the attached run proves or refutes the failing class: the failing class's kernel groups, their
    measured time, the share of it that ran in that class, and what they achieved against the roofs
    (JSON-ready; {} where the document has no measurement)."""
    section = doc.get("measured")
    if not section:
        return {}
    groups = [g for g in section.get("kernels", ()) if g["predicted_class"] == cls and g["measured_s"] > 0]
    measured = sum(g["measured_s"] for g in groups)
    agreeing = sum(g["measured_s"] for g in groups if g["measured_class"] == cls)
    model = section.get("model", {})
    peak, bandwidth = model.get("peak_flops_per_s") or 0.0, model.get("dram_bandwidth_bytes_per_s") or 0.0
    flops, dram = sum(g["flops"] for g in groups), sum(g["dram_bytes"] for g in groups)
    share = agreeing / measured if measured > 0 else 0.0
    verdict = "not measured" if measured <= 0 else "proves" if share >= PROVES_SHARE else "refutes"
    return {
        "verdict": verdict,
        "class": cls,
        "groups": len(groups),
        "groups_agreeing": sum(1 for g in groups if g["measured_class"] == cls),
        "measured_s": measured,
        "agreeing_share": share,
        "achieved_flops_per_s": flops / measured if measured > 0 else None,
        "achieved_dram_bytes_per_s": dram / measured if measured > 0 else None,
        "peak_flops_per_s": peak,
        "dram_bandwidth_bytes_per_s": bandwidth,
        "matched_share": (section.get("measurement", {}).get("trace") or {}).get("matched_share"),
        "runtime": (section.get("measurement", {}).get("trace") or {}).get("runtime", ""),
    }


def verdict_sentence(v: dict) -> str:
    """The verdict in one sentence a person reads aloud."""
    if not v:
        return "Not measured: attach a run of this slice (a trace on the Validation page, `mapper review --trace`)."
    if v["verdict"] == "not measured":
        return f"The run gave no {v['class']} kernel group any time: it neither proves nor refutes the failure."
    achieved = [
        rate_text(v["achieved_flops_per_s"] * v["measured_s"], v["measured_s"], v["peak_flops_per_s"], "FLOP/s"),
        rate_text(
            v["achieved_dram_bytes_per_s"] * v["measured_s"], v["measured_s"], v["dram_bandwidth_bytes_per_s"], "B/s"
        ),
    ]
    return (
        f"The run {v['verdict']} it: {v['groups_agreeing']} of {v['groups']} {v['class']} kernel groups,"
        f" {v['agreeing_share']:.0%} of their measured {format_duration(v['measured_s'])}, ran {v['class']};"
        f" they achieved {achieved[0]} of the peak and {achieved[1]} of the DRAM bandwidth."
    )
