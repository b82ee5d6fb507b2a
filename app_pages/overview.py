"""Overview: the verdict (the first failure, in the decision table's order), the six KPI tiles and the top
bottlenecks with their owners."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import serving_model, ui

doc, result, sel = ui.current()
t = doc["totals"]
ui.header("Overview", doc)
with ui.timed("overview serving"):
    served, refusal = serving_model.attempt(sel, curve=False, mapped=result)  # a refusal is shown under the table
queue = served is not None and not served.continuous
# The latency check reads the sidebar's own serving run (its load and batching) against its p99 target.
judged = {**doc, "serving": served.section()} if queue else doc
target_s = sel.serving.p99_target_s
first = mapper.first_failure(judged, target_s)
with st.container(key="verdict"):  # styled by its key (style.BASE_CSS): no HTML around the model's name
    st.markdown(
        f"**Verdict.** {ui.md(mapper.verdict_sentence(judged, target_s))}"
        f" *First failure: {first.check}; owner: {first.owner}.*"
    )
if first.kpis_unreachable:
    st.warning("Unreachable on this device as mapped: the figures below assume memory it does not have.")


def tile(column, label: str, value: str, help_text: str, note: str | None = None) -> None:
    """One KPI, with a grey note under its value (what it assumes); marked unreachable where the model does
    not fit the device (the verdict says why)."""
    if first.kpis_unreachable:
        label, help_text = f"{label} (unreachable)", f"unreachable on one device as mapped. {help_text}"
    column.metric(label, value, note, delta_color="off", delta_arrow="off", help=help_text, border=True)


def percentile_tiles(columns) -> None:
    """Request latency p99 of the mapped batch at the sidebar's load, large, with p50/p95, the load and the
    batching in its note (a decoder: TTFT and TPOT); the overload flag instead of a runaway p99."""
    if served is None:
        tile(columns[0], "Latency p99", "—", f"no serving simulation: {refusal}", "not simulated")
        tile(columns[1], "Memory stall", ui.pct(t["memory_stall_fraction"]), "share of time the engines wait on DRAM")
        return
    r, c = served.result, served.config
    if served.continuous:  # a decoder: continuous batching, as `mapper serve` runs it
        sequences = f"{c.max_batch} sequence{'s' if c.max_batch != 1 else ''}"
        assumed = f"{ui.num(c.rate_per_s)} req/s offered, continuous batching of up to {sequences}"
        if r.overload:  # the queue grows without bound: no percentile describes it
            tile(columns[0], "TTFT p99", "overloaded", f"{r.overload}; {assumed}", r.overload)
            tile(columns[1], "TPOT p99", ui.duration(r.tpot_p99_s), f"time per output token; {assumed}")
            return
        ttft = ui.lower_percentiles(r.ttft_p50_s, r.ttft_p95_s)
        tile(
            columns[0],
            "TTFT p99",
            ui.duration(r.ttft_p99_s),
            f"time to first token as `mapper serve` runs it; {assumed}",
            f"{ttft}; {assumed}",
        )
        tpot = ui.lower_percentiles(r.tpot_p50_s, r.tpot_p95_s)
        tile(columns[1], "TPOT p99", ui.duration(r.tpot_p99_s), f"time per output token; {assumed}", tpot)
        return
    batching = f"static batches of {c.max_batch}" if c.policy == "static" else f"dynamic batching up to {c.max_batch}"
    assumed = f"{ui.num(r.offered_rate_per_s)} req/s offered, {batching}"
    if r.overload:
        tile(columns[0], "Latency p99", "overloaded", f"{r.overload}; {assumed}", r.overload)
    else:
        tile(
            columns[0],
            "Latency p99",
            ui.duration(r.p99_s),
            f"request latency as `mapper serve` runs it; {assumed}",
            f"{ui.lower_percentiles(r.p50_s, r.p95_s)}; {assumed}",
        )
    tile(columns[1], "Memory stall", ui.pct(t["memory_stall_fraction"]), "share of time the engines wait on DRAM")


row1 = st.columns(3)
tile(
    row1[0],
    "Throughput",
    f"{ui.num(t['throughput_per_s'])} /s",
    f"batch {t['batch']} per {ui.duration(t['latency_s'])}",
)
tile(row1[1], "Batch latency", ui.duration(t["latency_s"]), "one batch, end to end on the device")
tile(
    row1[2], "MFU", ui.pct(t["mfu"]), f"model FLOPs / (latency × {ui.tflops(t['peak_flops_per_s'])} {t['dtype']} peak)"
)
row2 = st.columns(3)
percentile_tiles(row2)
tile(
    row2[2],
    "Energy / inference",
    ui.energy(t["energy_per_inference_j"]),
    f"{ui.num(t['perf_per_watt'])} inferences/s per W at {ui.num(t['avg_power_w'], 'W')} average",
)

st.subheader("Top bottlenecks")
with ui.timed("overview group"):
    top = mapper.group_kernels(doc["kernels"], t["latency_s"])[:5]  # repeated layers as one row: "... x 32"
st.dataframe(
    pd.DataFrame(
        [
            {
                "kernel": k["kernel"],
                "share": k["share"],
                "class": k["bottleneck"],
                "owner": k["owner"],  # before the long evidence: in view on a 1280 px screen
                "evidence": k["evidence"],
            }
            for k in top
        ]
    ),
    hide_index=True,
    width="stretch",
    column_config={
        "share": ui.TABLE_FORMAT["share"],
        "kernel": st.column_config.TextColumn(width="medium"),
        "owner": st.column_config.TextColumn(width="medium"),
        "evidence": st.column_config.TextColumn(width="large"),
    },
)
if refusal is not None:  # under the table: the verdict, the tiles and the table come first on a shared screen
    st.warning(f"No serving simulation for this selection: {ui.md(refusal)}")
ui.notices(doc)
