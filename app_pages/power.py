"""Power: board power over one batch's timeline, and perf-per-watt against batch size."""

import plotly.graph_objects as go
import streamlit as st

from app_pages import serving_model, ui

BATCHES = (1, 2, 4, 8, 16, 32, 64)

doc, result, sel = ui.current()
ui.header("Power", doc)
t = doc["totals"]
c = st.columns(3)
c[0].metric("Average power", f"{t['avg_power_w']:,.0f} W", border=True)
c[1].metric("Energy / inference", f"{t['energy_per_inference_j'] * 1e3:,.2f} mJ", border=True)
c[2].metric("Perf per watt", f"{t['perf_per_watt']:,.2f} inf/s/W", border=True)

steps_x, steps_y = [], []
for k in doc["kernels"]:
    steps_x += [k["start_s"] * 1e6, (k["start_s"] + k["time_s"]) * 1e6]
    steps_y += [k["avg_power_w"], k["avg_power_w"]]
fig = go.Figure(
    go.Scatter(
        x=steps_x,
        y=steps_y,
        mode="lines",
        line=dict(color="#d62728"),
        name="power",
        hovertemplate="%{x:.1f} µs: %{y:.0f} W<extra></extra>",
    )
)
fig.add_hline(y=sel.hw.tdp_w, line_dash="dash", annotation_text=f"TDP {sel.hw.tdp_w:,.0f} W")
fig.update_layout(
    title="Board power over one batch",
    xaxis_title="time (µs)",
    yaxis_title="power (W)",
    template="plotly_white",
    height=380,
    margin=dict(l=60, r=20, t=50, b=50),
)
st.plotly_chart(fig, key="power_timeline")

batch_dim = next((k for k, _ in sel.dims if k in serving_model.batch_dims(sel)), None)
if batch_dim is None:
    st.info("This model has no batch dim, so there is no perf-per-watt curve against batch.")
    st.stop()
with st.spinner("Mapping the model at each batch size ..."):
    points = serving_model.power(sel.key, BATCHES, sel)
current = dict(sel.dims)[batch_dim]
fig = go.Figure(
    go.Scatter(
        x=[p.batch for p in points],
        y=[p.perf_per_watt for p in points],
        mode="lines+markers",
        name="perf per watt",
        line_color="#2ca02c",
        customdata=[[p.avg_power_w, p.throughput_per_s, p.throttled_share] for p in points],
        hovertemplate="batch %{x}: %{y:.3g} inf/s/W<br>%{customdata[0]:.0f} W, "
        "%{customdata[1]:,.0f} inf/s, %{customdata[2]:.0%} throttled<extra></extra>",
    )
)
fig.add_vline(x=current, line_dash="dot", annotation_text=f"batch {current}")
fig.update_layout(
    title="Perf per watt against batch",
    xaxis=dict(title="batch", type="log"),
    yaxis_title="inferences per second per watt",
    template="plotly_white",
    height=380,
    margin=dict(l=60, r=20, t=50, b=50),
)
st.plotly_chart(fig, key="perf_per_watt")
