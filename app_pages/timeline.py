"""Timeline: the kernels in launch order over one batch, coloured by bottleneck class."""

import streamlit as st

import mapper
from app_pages import ui

doc, result, sel = ui.current()
ui.header("Timeline", doc)
ui.chart(mapper.timeline_figure, doc, key="timeline_chart")
st.caption(f"One batch: {len(doc['kernels'])} kernels in {ui.ms(doc['totals']['latency_s'])} on one stream.")
