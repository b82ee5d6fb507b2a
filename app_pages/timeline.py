"""Timeline: the kernels in launch order over one batch, coloured by bottleneck class."""
import streamlit as st

from app_pages import cache, ui

doc, result, sel = ui.current()
ui.header("Timeline", doc)
charts = cache.optional("mapper.charts")
if charts is None:
    st.info("The timeline chart (mapper.charts) is not available yet.")
else:
    st.plotly_chart(charts.timeline_figure(doc), key="timeline_chart")
st.caption(f"One batch: {len(doc['kernels'])} kernels in {ui.ms(doc['totals']['latency_s'])} on one stream.")
