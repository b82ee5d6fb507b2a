"""Serving: the request latency distribution at the sidebar's load, and p50/p95/p99 against load
with the p99 target and the knee (mapper.simulate_serving / mapper.load_curve)."""
import plotly.graph_objects as go
import streamlit as st

from app_pages import serving_model, ui

doc, result, sel = ui.current()
ui.header("Serving", doc)
if not serving_model.available():
    st.info("The serving simulation (mapper.serve.serving) is not available yet.")
    st.stop()
s = dict(sel.serving)
target_ms = s["p99_target_s"] * 1e3
with st.spinner("Simulating requests at each load ..."):
    report = serving_model.simulate(sel.key, sel.serving, sel)
    load = serving_model.curve(sel.key, sel.serving, sel)
st.caption(f"Poisson arrivals at {s['rate_per_s']:,.0f} req/s, dynamic batching up to {s['max_batch']} "
           f"(wait ≤ {s['max_wait_s'] * 1e3:g} ms), {serving_model.REQUESTS:,} requests, the profile's run-to-run jitter.")
c = st.columns(6)
for col, (label, value) in zip(c, [("p50", report.p50_s), ("p95", report.p95_s), ("p99", report.p99_s)]):
    col.metric(label, ui.ms(value), border=True)
c[2].caption("meets the target" if report.p99_s <= s["p99_target_s"] else f"**over the {target_ms:g} ms target**")
c[3].metric("Throughput", f"{report.throughput_per_s:,.0f} /s", border=True)
c[4].metric("Utilization", ui.pct(report.utilization), border=True)
c[5].metric("Mean batch", f"{report.mean_batch:.2f}", border=True)

LAYOUT = dict(template="plotly_white", height=380, margin=dict(l=60, r=20, t=50, b=50),
              legend=dict(orientation="h", y=-0.25))
left, right = st.columns(2)
with left:
    samples = [q * 1e3 for q in report.latency_quantiles_s]
    fig = go.Figure(go.Histogram(x=samples, nbinsx=60, histnorm="probability", marker_color="#1f77b4",
                                 name="requests", hovertemplate="%{x} ms: %{y:.1%}<extra></extra>"))
    for name, value, dash, where in (("p50", report.p50_s, "dot", "top left"), ("p95", report.p95_s, "dash", "top"),
                                     ("p99", report.p99_s, "solid", "top right")):
        fig.add_vline(x=value * 1e3, line_dash=dash, annotation_text=name, line_color="#333", annotation_position=where)
    x_max = max(samples) * 1.15
    if target_ms <= x_max:
        fig.add_vline(x=target_ms, line_color="#d62728", annotation_text="p99 target", annotation_position="top left")
    fig.update_layout(title="Request latency distribution" + ("" if target_ms <= x_max else f" (p99 target {target_ms:g} ms is off the right)"),
                      xaxis=dict(title="latency (ms)", range=[0, x_max]),
                      yaxis=dict(title="share of requests", tickformat=".0%"), **LAYOUT)
    st.plotly_chart(fig, key="latency_hist")
with right:
    rates = [p.offered_rate_per_s for p in load.points]
    fig = go.Figure()
    for name, attr, color in (("p50", "p50_s", "#2ca02c"), ("p95", "p95_s", "#ff7f0e"), ("p99", "p99_s", "#d62728")):
        fig.add_scatter(x=rates, y=[getattr(p, attr) * 1e3 for p in load.points], mode="lines+markers", name=name,
                        line_color=color, hovertemplate="%{x:,.0f} req/s: %{y:.3g} ms<extra>" + name + "</extra>")
    fig.add_hline(y=target_ms, line_color="#d62728", line_dash="dash", annotation_text=f"p99 target {target_ms:g} ms")
    if load.knee_index is not None:
        fig.add_vline(x=rates[load.knee_index], line_dash="dot", annotation_text="knee")
    fig.add_vline(x=s["rate_per_s"], line_color="#1f6feb", annotation_text="your load", annotation_position="bottom right")
    fig.update_layout(title="Latency against load", xaxis_title="offered load (req/s)",
                      yaxis=dict(title="latency (ms)", rangemode="tozero"), **LAYOUT)
    st.plotly_chart(fig, key="load_curve")
best = load.max_rate_meeting_target_per_s
st.markdown(f"Saturation at **{load.saturation_rate_per_s:,.0f} req/s**; "
            + (f"the p99 target of {target_ms:g} ms holds up to **{best:,.0f} req/s**." if best
               else f"no simulated load meets the p99 target of {target_ms:g} ms."))
with st.expander("Serving assumptions"):
    st.markdown("\n".join(f"- {ui.md(a)}" for a in report.assumptions + load.assumptions))
