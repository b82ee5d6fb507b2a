"""Export: the mapping sheet as XLSX, CSV, JSON and HTML downloads."""

import dataclasses
import json

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, session, training, ui

doc, result, sel = ui.current()
ui.header("Export", doc)
if (training_doc := training.current()) is not None:  # the training mode: the step's sheet first
    st.subheader("Training step")
    st.write("The training step's sheet: its totals, the memory per device broken down, time by layer type.")
    train_stem = f"{training_doc['model']}_{training_doc['hardware']}_training".replace("/", "_").replace(" ", "_")
    t1, t2 = st.columns(2)
    t1.download_button(
        "Training sheet (.csv)", mapper.csv_bytes(pd.DataFrame(mapper.training_sheet(training_doc))),
        file_name=f"{train_stem}.csv", mime="text/csv",
    )  # fmt: skip
    t2.download_button(
        "Training document (.json)", json.dumps(training_doc, indent=1), file_name=f"{train_stem}.json",
        mime="application/json",
    )  # fmt: skip
    st.subheader("Inference slice")
FORMATS = {
    "xlsx": ("Excel workbook (.xlsx)", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    "csv": ("Kernels table (.csv)", "text/csv"),
    "json": ("Mapping document (.json)", "application/json"),
    "html": ("Standalone report (.html)", "text/html"),
}
st.write(
    "The mapping sheet: summary and verdict, every kernel with its fusion rule, tiling and bottleneck class, "
    "layer types, assumptions with sources, and the model and profile hashes that reproduce it."
)
stem = f"{doc['model']['name']}_{doc['hardware']['name']}_{doc['totals']['dtype']}".replace("/", "_").replace(" ", "_")
# a comparison with a measured run (Validation page) for this selection rides along as the Measured sheet
measured = session.get().measured
sheet_result = (
    result if measured is None or measured[0] != sel.key else dataclasses.replace(result, measured=measured[1])
)
if sheet_result.measured is not None:
    st.caption("Includes the Measured sheet from the Validation page.")
cols = st.columns(len(FORMATS))
for col, (fmt, (label, mime)) in zip(cols, FORMATS.items()):
    with col:
        with st.spinner(f"Writing {fmt} ..."):
            data = cache.sheet((*sel.key, sheet_result.measured is not None), fmt, sheet_result)
        st.download_button(
            label,
            data,
            file_name=f"{stem}.{fmt}",
            mime=mime,
            key=f"download_{fmt}",
            icon=":material/download:",
            width="stretch",
        )
        st.caption(f"{len(data) / 1024:,.0f} KiB")
if sel.hw.name not in mapper.list_hardware():
    # the user's own profile (uploaded or edited here) travels with the sheet: the reproduce command reads it
    st.subheader("Your own profile")
    edited = sum(1 for source in sel.hw.sources.values() if source.startswith("edited by the user"))
    st.caption(
        f"{ui.md(sel.hw.display_name)}: {edited} value(s) marked “edited by the user”; "
        f"save it as {ui.md(sel.hw.name)}.json beside the sheet for the command above."
    )
    st.download_button(
        f"Profile file ({ui.md(sel.hw.name)}.json)",
        json.dumps(sel.hw.to_dict(), indent=1).encode(),
        file_name=f"{sel.hw.name}.json",
        mime="application/json",
        key="download_profile",
        icon=":material/download:",
    )
