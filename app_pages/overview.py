"""Overview: the verdict, the KPI tiles and the top bottlenecks with their owners."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import serving_model, ui

doc, result, sel = ui.current()
t = doc["totals"]
ui.header("Overview", doc)
first = mapper.first_failure(doc)
with st.container(key="verdict"):  # styled by its key (state.BASE_CSS): no HTML around the model's name
    st.markdown(f"**Verdict.** {ui.md(ui.verdict(doc))} *First failure: {first.check}; owner: {first.owner}.*")
if first.kpis_unreachable:
    st.warning("Unreachable on this device as mapped: the figures below assume memory it does not have.")

served = serving_model.run(sel, curve=False)
row1 = st.columns(4)
row1[0].metric(
    "Throughput",
    f"{t['throughput_per_s']:,.0f} /s",
    help=f"batch {t['batch']} per {ui.ms(t['latency_s'])}",
    border=True,
)
row1[1].metric("Batch latency", ui.ms(t["latency_s"]), help="one batch, end to end on the device", border=True)
row1[2].metric(
    "MFU",
    ui.pct(t["mfu"]),
    help=f"model FLOPs / (latency × {ui.tflops(t['peak_flops_per_s'])} {t['dtype']} peak)",
    border=True,
)
row1[3].metric(
    "Memory stall", ui.pct(t["memory_stall_fraction"]), help="share of time the engines wait on DRAM", border=True
)
row2 = st.columns(4)
if served is None:
    row2[0].metric("p50 / p95 / p99", "—", help="no serving simulation for this selection", border=True)
elif served.continuous:  # a decoder: continuous batching, as `mapper serve` runs it
    r = served.result
    row2[0].metric(
        "TTFT / TPOT p99",
        f"{ui.ms(r.ttft_p99_s)} / {ui.ms(r.tpot_p99_s)}",
        help="time to first token and "
        f"per output token at the sidebar's load: TTFT p50 {ui.ms(r.ttft_p50_s)}, TPOT p50 "
        f"{ui.ms(r.tpot_p50_s)}",
        border=True,
    )
    row2[0].caption(f"TTFT p50 {ui.ms(r.ttft_p50_s)} · **p99 {ui.ms(r.ttft_p99_s)}** · TPOT p99 {ui.ms(r.tpot_p99_s)}")
else:
    r = served.result
    row2[0].metric(
        "p50 / p95 / p99",
        f"{ui.ms(r.p99_s)}",
        help=f"request latency at the sidebar's load: p50 {ui.ms(r.p50_s)}, p95 {ui.ms(r.p95_s)}, p99 {ui.ms(r.p99_s)}",
        border=True,
    )
    row2[0].caption(f"p50 {ui.ms(r.p50_s)} · p95 {ui.ms(r.p95_s)} · **p99 {ui.ms(r.p99_s)}**")
row2[1].metric("Perf per watt", f"{t['perf_per_watt']:,.2f} inf/s/W", border=True)
row2[2].metric("Energy / inference", f"{t['energy_per_inference_j'] * 1e3:,.2f} mJ", border=True)
row2[3].metric("Average power", f"{t['avg_power_w']:,.0f} W", border=True)

st.subheader("Top bottlenecks")
top = mapper.group_kernels(doc["kernels"], t["latency_s"])[:5]  # repeated layers as one row: "... x 32"
st.dataframe(
    pd.DataFrame(
        [
            {
                "kernel": k["kernel"],
                "share": k["share"],
                "class": k["bottleneck"],
                "evidence": k["evidence"],
                "owner": k["owner"],
            }
            for k in top
        ]
    ),
    hide_index=True,
    width="stretch",
    column_config={
        "share": ui.TABLE_FORMAT["share"],
        "kernel": st.column_config.TextColumn(width="medium"),
        "evidence": st.column_config.TextColumn(width="large"),
        "owner": st.column_config.TextColumn(width="medium"),
    },
)
ui.notices(doc)
