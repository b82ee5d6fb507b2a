"""Layers: time share, MFU and memory-stall fraction by layer type."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import ui

doc, result, sel = ui.current()
ui.header("Layers", doc)
ui.chart(mapper.layer_share_figure, doc, key="layer_share")
table = pd.DataFrame(doc["layer_types"]).sort_values("share", ascending=False)
table = table.assign(time_us=table["time_s"] * 1e6, gflop=table["flops"] / 1e9)
st.dataframe(
    table[["layer_type", "kernels", "time_us", "share", "mfu", "stall_fraction", "gflop"]],
    hide_index=True,
    width="stretch",
    column_config={
        "layer_type": "layer type",
        "time_us": st.column_config.NumberColumn("time (µs)", format="%.1f"),
        "share": ui.TABLE_FORMAT["share"],
        "mfu": st.column_config.NumberColumn("MFU", format="percent"),
        "stall_fraction": st.column_config.NumberColumn("memory stall", format="percent"),
        "gflop": st.column_config.NumberColumn("GFLOP", format="%.3g"),
    },
)
st.caption(
    "MFU: algorithmic FLOPs of the layer type / (its time × the dtype's matrix peak). "
    "Memory stall: share of its time the engines wait on DRAM."
)
ui.notices(doc)
