"""Kernels: the sortable, filterable kernel table; selecting a row opens its drill-down."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import session, ui

doc, result, sel = ui.current()
ui.header("Kernels", doc)
if st.toggle("Group repeated layers", key="group_layers", help="one row per module across layers: ... x 32"):
    groups = pd.DataFrame(mapper.group_kernels(doc["kernels"], doc["totals"]["latency_s"]))
    groups["ops"] = groups["ops"].map(" ".join)
    groups["time_s"] = groups["time_s"] * 1e6  # the per-kernel table's unit, so the two read alike
    st.caption(f"{len(groups)} groups of {len(doc['kernels'])} kernels, slowest total first.")
    st.dataframe(
        groups.drop(columns=["first"]).rename(columns={"time_s": "time (µs)", "bottleneck": "class"}),
        hide_index=True,
        width="stretch",
        height=380,
        column_config=ui.TABLE_FORMAT,
    )
    ui.notices(doc)
    st.stop()  # the drill-down below is per kernel
table = ui.kernel_table(doc).sort_values("time (µs)", ascending=False)
c1, c2, c3 = st.columns([2, 2, 2])
text = c1.text_input("Filter by name or op", placeholder="e.g. self_attn, fused attention, conv")
classes = c2.multiselect("Bottleneck class", sorted(table["class"].unique()))
layers = c3.multiselect("Layer type", sorted(table["layer type"].unique()))
shown = table
if text:
    shown = shown[
        shown["kernel"].str.contains(text, case=False, regex=False)
        | shown["ops"].str.contains(text, case=False, regex=False)
    ]
if classes:
    shown = shown[shown["class"].isin(classes)]
if layers:
    shown = shown[shown["layer type"].isin(layers)]
st.caption(f"{len(shown)} of {len(table)} kernels; click a row to open its drill-down, a header to sort.")
event = st.dataframe(
    shown,
    hide_index=True,
    width="stretch",
    height=380,
    on_select="rerun",
    selection_mode="single-row",
    key="kernel_table",
    column_config=ui.TABLE_FORMAT,
)
st.caption(mapper.MEMORY_STALL_DEFINITION)
rows = event.selection.rows if event is not None else []
picked = shown.iloc[rows[0]]["kernel"] if rows else session.get().picked_kernel
if picked in set(shown["kernel"]):
    session.update(picked_kernel=picked)
    st.divider()
    ui.drilldown(doc, sel.hw, picked)
    st.caption(mapper.SPEEDUP_DEFINITION)
else:
    st.info("Select a kernel in the table to see its fusion, tiling, roofline point, evidence and owner.")
ui.notices(doc)
