"""Devices: memory per device against capacity, pipeline stages, and what the interconnect costs."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app_pages import training, ui

if (training_doc := training.current()) is not None:  # the sidebar's training mode: the step's view instead
    training.devices(training_doc)
    st.stop()

doc, result, sel = ui.current()
ui.header("Devices", doc)
memory, parallel = doc.get("memory"), doc.get("parallel")
if not memory or not parallel:
    st.info("This mapping carries no device plan.")
    st.stop()

plan = f"TP {parallel['tp']} x PP {parallel['pp']} x DP {parallel['dp']} = {parallel['devices']} devices"
c1, c2, c3, c4 = st.columns(4)
c1.metric(
    "TP x PP x DP",
    f"{parallel['tp']} x {parallel['pp']} x {parallel['dp']}",
    help=f"{plan} over {ui.md(parallel['topology'])}",
)
c2.metric(
    "Memory per device", ui.size(memory["per_device_bytes"]), help=f"capacity {ui.size(memory['capacity_bytes'])}"
)
c3.metric(
    "Interconnect share", ui.pct(parallel["interconnect_share"]), help="time in collectives over one batch's time"
)
c4.metric("Collectives per batch", f"{len(parallel['collectives'])}")
if memory["fits"]:
    st.success(f"Fits: {ui.size(memory['per_device_bytes'])} of {ui.size(memory['capacity_bytes'])} per device.")
else:
    smallest = memory.get("smallest_fit")
    hint = (
        f" The smallest plan that fits: TP {smallest['tp']} x PP {smallest['pp']}"
        f" ({ui.size(smallest['per_device_bytes'])} per device)."
        if smallest
        else " No TP x PP within this interconnect fits."
    )
    st.warning(f"Does not fit: short by {ui.size(memory['shortfall_bytes'])} per device.{hint}")

parts = {
    "weights": memory["weight_bytes"],
    "KV cache": memory["kv_cache_bytes"],
    "activations": memory["activation_bytes"],
}
scale, unit = ui.unit_for(max(memory["capacity_bytes"], memory["per_device_bytes"]), ui.BYTE_UNITS)
fig = go.Figure([go.Bar(y=["per device"], x=[v / scale], name=k, orientation="h") for k, v in parts.items()])
fig.add_vline(x=memory["capacity_bytes"] / scale, line_dash="dash", annotation_text="capacity")
fig.update_layout(barmode="stack", height=200, xaxis_title=f"memory ({unit})", margin=dict(l=10, r=10, t=30, b=10))
st.plotly_chart(fig, key="memory_chart")

if parallel["pp"] > 1:
    st.subheader("Pipeline stages")
    scale, unit = ui.unit_for(max(parallel["stage_times_s"]))
    stages = pd.DataFrame(
        {
            "stage": range(len(parallel["stage_times_s"])),
            f"time ({unit})": [t / scale for t in parallel["stage_times_s"]],
        }
    )
    st.bar_chart(stages, x="stage", y=f"time ({unit})", height=220)
    st.caption(
        "One batch visits every stage in turn; back-to-back batches overlap, so the slowest stage sets the throughput."
    )
if parallel["collectives"]:
    st.subheader("Collectives")
    table = pd.DataFrame(parallel["collectives"])  # message_bytes and time_s: people_table picks their units
    st.dataframe(ui.people_table(table), hide_index=True, width="stretch", column_config=ui.people_config(table))
for line in parallel["assumptions"]:
    st.caption(ui.md(line))
