"""Serving: request latency distribution at the sidebar's load, and p50/p95/p99 against load."""
import streamlit as st

from app_pages import serving_model, ui

doc, result, sel = ui.current()
ui.header("Serving", doc)
if not serving_model.available():
    st.info("The serving simulation (mapper.serving) is not available yet.")
    st.stop()
st.info("Serving page: waiting for the engine's serving API to be wired.")
