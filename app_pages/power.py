"""Power: board power over one batch's timeline, and perf-per-watt against batch size."""

import plotly.graph_objects as go
import streamlit as st

from app_pages import power_model, ui

BATCHES = (1, 2, 4, 8, 16, 32, 64)

doc, result, sel = ui.current()
ui.header("Power", doc)
t = doc["totals"]
devices = max(int(doc["parallel"]["devices"]), 1)  # tp x pp devices serve one batch; totals sum them
per_device_w = t["avg_power_w"] / devices
c = st.columns(4)
c[0].metric(
    "Power per device",
    ui.num(per_device_w, "W"),
    help=f"average over one batch, against this device's TDP of {ui.num(sel.hw.tdp_w, 'W')}",
    border=True,
)
c[0].caption(f"{ui.pct(per_device_w / sel.hw.tdp_w)} of the {ui.num(sel.hw.tdp_w, 'W')} TDP per device")
c[1].metric(
    "Total power",
    ui.num(t["avg_power_w"], "W"),
    help=f"{devices} device{'s' if devices > 1 else ''} together",
    border=True,
)
c[1].caption(f"{devices} device{'s' if devices > 1 else ''} (TP × PP)")
c[2].metric("Energy / inference", ui.energy(t["energy_per_inference_j"]), border=True)
c[3].metric("Perf per watt", ui.num(t["perf_per_watt"], "inf/s/W"), help="over every device's power", border=True)

scale, unit = ui.unit_for(t["latency_s"])  # the timeline in the unit of the batch's length: 6.13 ms, not 6,129 µs
steps_x, steps_y = [], []
for k in doc["kernels"]:
    steps_x += [k["start_s"] / scale, (k["start_s"] + k["time_s"]) / scale]
    steps_y += [k["avg_power_w"], k["avg_power_w"]]
fig = go.Figure(
    go.Scatter(
        x=steps_x,
        y=steps_y,
        mode="lines",
        line=dict(color="#d62728"),
        name="power",
        hovertemplate="%{x:,.3~r} " + unit + ": %{y:,.0f} W<extra></extra>",
    )
)
fig.add_hline(y=sel.hw.tdp_w, line_dash="dash", annotation_text=f"TDP per device {ui.num(sel.hw.tdp_w, 'W')}")
fig.update_layout(
    title="Board power of one device over one batch",
    xaxis_title=f"time ({unit})",
    yaxis_title="power (W)",
    template="plotly_white",
    height=380,
    margin=dict(l=60, r=20, t=50, b=50),
)
st.plotly_chart(ui.scaled(fig), key="power_timeline")

batch_dim = next((k for k, _ in sel.dims if k in power_model.batch_dims(sel)), None)
if batch_dim is None:
    st.info("This model has no batch dim, so there is no perf-per-watt curve against batch.")
    st.stop()
with st.spinner("Mapping the model at each batch size ..."):
    points = power_model.power(sel.key, BATCHES, sel)
current = dict(sel.dims)[batch_dim]
fig = go.Figure(
    go.Scatter(
        x=[p.batch for p in points],
        y=[p.perf_per_watt for p in points],
        mode="lines+markers",
        name="perf per watt",
        line_color="#2ca02c",
        customdata=[[p.avg_power_w, p.throughput_per_s, p.throttled_share] for p in points],
        hovertemplate="batch %{x}: %{y:,.3~r} inf/s/W<br>%{customdata[0]:,.0f} W, "
        "%{customdata[1]:,.0f} inf/s, %{customdata[2]:.0%} throttled<extra></extra>",
    )
)
# Named in the legend, not annotated: on a log axis an annotation's x is read as log10(x), so "batch 32" stood
# at 10^32 and stretched the axis to it (plotly draws the line itself at the data's x).
fig.add_vline(x=current, line_dash="dot", name=f"this batch ({current})", showlegend=True)
fig.update_layout(
    title="Perf per watt against batch",
    xaxis=dict(title="batch (log scale)", type="log"),
    yaxis_title="inferences per second per watt",
    template="plotly_white",
    height=380,
    margin=dict(l=60, r=20, t=50, b=50),
)
st.plotly_chart(ui.scaled(fig), key="perf_per_watt")
