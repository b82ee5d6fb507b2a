"""The sheet's people's tabs, Summary and Review. Summary: the slice's KPIs each in the unit that suits it
(420 µs, 80.1 MB), the number kept a number and shown through its Excel number format; the assessment's rows
(mapper.report.answer: the same words every view prints); time by class, the top bottlenecks and the caveats.
Review: the assessment as a meeting reads it, its rows and every candidate fix with its status, gain and owner."""

from __future__ import annotations

import pandas as pd

from mapper.core.classes import fix_of
from mapper.core.units import DURATION_UNITS, ENERGY_UNITS, FLOP_UNITS
from mapper.report.answer import answer_rows

TOP_BOTTLENECKS = 5
# Summary metrics: (key in document totals, label, the units it reads in). The Summary is a people's tab: each
# value in the unit that suits it (420 µs, 80.1 MB), the number kept a number and shown through its format;
# fractions as percentages. The data tabs, CSV and JSON keep SI under unit-suffixed keys.
BYTES = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B"))
FLOP_RATE = ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1.0, "FLOP/s"))
ONE = ((1.0, ""),)
SUMMARY_METRICS = (
    ("latency_s", "batch latency", DURATION_UNITS[2:]),
    ("throughput_per_s", "throughput (inferences/s)", ONE),
    ("mfu", "MFU", "%"),
    ("memory_stall_fraction", "memory stall (share of latency)", "%"),
    ("energy_per_inference_j", "energy per inference", ENERGY_UNITS),
    ("energy_j", "energy per batch", ENERGY_UNITS),
    ("avg_power_w", "average power (W)", ONE),
    ("perf_per_watt", "perf per watt (inferences/s/W)", ONE),
    ("flops", "FLOPs (2 per MAC)", FLOP_UNITS),
    ("matrix_flops", "matrix FLOPs (2 per MAC)", FLOP_UNITS),
    ("dram_bytes", "DRAM traffic", BYTES),
    ("weight_bytes", "weights", BYTES),
    ("peak_flops_per_s", "matrix peak", FLOP_RATE),
    ("dtype", "precision", None),
    ("batch", "batch (inferences)", ONE),
    ("kernels", "kernels", ONE),
)
PERCENT_FORMAT = "0.0%"


def people_value(value, units) -> tuple[object, str, str]:
    """(the number in its unit, the unit, its Excel number format): 4.23e-4 s -> (423.0, "µs", '0.0## "µs"')."""
    if units is None or not isinstance(value, int | float):
        return value, "", "General"
    if units == "%":
        return value, "", PERCENT_FORMAT
    scale, unit = next(((sc, u) for sc, u in units if abs(value) >= sc), units[-1])
    shown = value / scale
    digits = "#,##0" if float(shown).is_integer() else "#,##0.0##"
    return shown, unit, f'{digits} "{unit}"' if unit else digits


def class_times(doc: dict) -> list[tuple[str, float, str]]:
    """(class, time_s, owner) per bottleneck class, most time first."""
    times: dict[str, list] = {}
    for k in doc["kernels"]:
        entry = times.setdefault(k["bottleneck"], [0.0, k["owner"]])
        entry[0] += k["time_s"]
    return sorted(((c, t, o) for c, (t, o) in times.items()), key=lambda x: -x[1])


def summary_frame(doc: dict) -> pd.DataFrame:
    t = doc["totals"]
    rows = [
        {"section": "model", "name": "model", "value": doc["model"]["name"], "unit": ""},
        {"section": "model", "name": "hardware", "value": doc["hardware"]["name"], "unit": ""},
    ]
    for key, label, units in SUMMARY_METRICS:
        if key in t:
            value, unit, fmt = people_value(t[key], units)
            rows.append({"section": "metric", "name": label, "value": value, "unit": unit, "format": fmt, "key": key})
    if t.get("dram_bytes"):
        value, unit, fmt = people_value(t["flops"] / t["dram_bytes"], ONE)
        rows.append(
            {"section": "metric", "name": "intensity (FLOP/B)", "value": value, "unit": "FLOP/B", "format": fmt}
        )
    rows.append({"section": "metric", "name": "unmodeled nodes", "value": len(doc["unmodeled"]), "unit": "nodes"})
    rows += [{"section": r.section, "name": r.name, "value": r.text, "unit": ""} for r in answer_rows(doc)]
    for cls, time_s, owner in class_times(doc):
        value, unit, fmt = people_value(time_s, DURATION_UNITS[2:])
        rows.append(
            {
                "section": "time by class",
                "name": cls,
                "value": value,
                "unit": unit,
                "format": fmt,
                "owner": owner,
                "fix": fix_of(cls),
            }
        )
    for k in sorted(doc["kernels"], key=lambda k: -k["time_s"])[:TOP_BOTTLENECKS]:
        value, unit, fmt = people_value(k["time_s"], DURATION_UNITS[2:])
        rows.append(
            {
                "section": "top bottleneck",
                "name": k["name"],
                "value": value,
                "unit": unit,
                "format": fmt,
                "bottleneck": k["bottleneck"],
                "evidence": k["evidence"],
                "owner": k["owner"],
                "fix": fix_of(k["bottleneck"]),
            }
        )
    rows += [
        {"section": "caveat", "name": f"caveat {i}", "value": c, "unit": ""} for i, c in enumerate(doc["caveats"], 1)
    ]
    text = ["unit", "bottleneck", "evidence", "owner", "fix", "key"]
    frame = pd.DataFrame(rows, columns=["section", "name", "value", *text, "format"])
    return frame.fillna({c: "" for c in text} | {"format": "General"})


def review_frame(doc: dict) -> pd.DataFrame:
    """The Review tab: the assessment's rows, then each candidate (chosen, can be adopted, or rejected and why)."""
    rows = [{"part": r.section, "name": r.name, "text": r.text} for r in answer_rows(doc)]
    a = doc["assessment"]
    chosen = (a.get("chosen") or {}).get("label")
    for c in a.get("candidates", ()):
        status = (
            "chosen" if c["label"] == chosen else f"rejected: {c['rejected']}" if c["rejected"] else "can be adopted"
        )
        text = f"{c['changes'] or 'the slice'}: {c['gain_text']}" + (f" ({c['cost']})" if c["cost"] else "")
        rows.append({"part": "candidate", "name": c["label"], "text": f"{text}; owner {c['owner']}; {status}"})
    return pd.DataFrame(rows, columns=["part", "name", "text"])
