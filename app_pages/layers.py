"""Layers: time share, MFU and memory-stall fraction by layer type."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import training, ui

if (training_doc := training.current()) is not None:  # the sidebar's training mode: the step's view instead
    training.layers(training_doc)
    st.stop()

doc, result, sel = ui.current()
ui.header("Layers", doc)
ui.chart(mapper.layer_share_figure, doc, key="layer_share")
table = pd.DataFrame(doc["layer_types"]).sort_values("share", ascending=False)
scale, unit = ui.unit_for(float(table["time_s"].max()))  # one unit for the column: the longest layer type's
shown = pd.DataFrame(
    {
        "layer type": table["layer_type"],
        "kernels": table["kernels"],
        f"time ({unit})": table["time_s"] / scale,
        "share": table["share"],
        "MFU": table["mfu"],
        "memory stall": table["stall_fraction"],
        "GFLOP": table["flops"] / 1e9,
    }
)
st.dataframe(
    shown,
    hide_index=True,
    width="stretch",
    column_config={
        f"time ({unit})": st.column_config.NumberColumn(format="%.3f" if unit == "s" else "%.1f"),
        "share": ui.TABLE_FORMAT["share"],
        "MFU": st.column_config.NumberColumn(format="percent"),
        "memory stall": st.column_config.NumberColumn(format="percent"),
        "GFLOP": st.column_config.NumberColumn(format="%.1f"),
    },
)
st.caption(
    "MFU: algorithmic FLOPs of the layer type / (its time × the dtype's matrix peak). "
    "Memory stall: share of its time the engines wait on DRAM."
)
ui.notices(doc)
