"""Roofline: every kernel on the device roofline; clicking a point opens that kernel's drill-down."""

import html

import streamlit as st

from app_pages import session, ui

doc, result, sel = ui.current()
ui.header("Roofline", doc)
t = doc["totals"]
st.caption(
    f"Matrix peak {ui.tflops(t['peak_flops_per_s'])} ({t['dtype']}), "
    f"DRAM {ui.gbps(sel.hw.dram_bandwidth_bytes_per_s)}, "
    f"ridge {t['peak_flops_per_s'] / sel.hw.dram_bandwidth_bytes_per_s:,.0f} FLOP/B. "
    "Marker size is kernel time; click a point to drill down."
)
fig = ui.roofline(doc, sel.hw, highlight=session.get().picked_kernel, height=560)
event = st.plotly_chart(fig, key="roofline_chart", on_select="rerun", selection_mode=("points",))
points = event.selection.points if event is not None else []
if points:
    trace = fig.data[points[0]["curve_number"]]
    clicked = html.unescape(trace.text[points[0]["point_index"]]) if trace.text is not None else None
    if clicked and clicked != session.get().picked_kernel:
        session.update(picked_kernel=clicked)
        st.rerun()  # draw the one chart again with the clicked kernel ringed
picked = session.get().picked_kernel
if picked:
    st.divider()
    ui.drilldown(doc, sel.hw, picked, chart=False)  # this page's chart already rings it: one roofline, not two
