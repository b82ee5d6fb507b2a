"""Serving: the assessment's serving run (mapper.assess_slice: the load the sidebar gives, or the one it
derives and says so), what `mapper serve` reports for the same question. A decoder is served by continuous
batching (TTFT and TPOT per request); any other model by a request queue: its latency distribution, and
p50/p95/p99 against load with the p99 target and the knee."""

import plotly.graph_objects as go
import streamlit as st

from app_pages import people, session, ui

LAYOUT = dict(
    template="plotly_white", height=380, margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.25)
)


def overloaded(sentence: str) -> None:
    st.warning(f"**Overloaded:** {ui.md(sentence)}; the percentiles below only measure how long the run was.")


def continuous(run) -> None:
    r, c = run.result, run.config
    st.caption(
        f"Continuous batching of up to {c.max_batch} sequences, Poisson arrivals at {ui.num(c.rate_per_s)} req/s, "
        f"{c.prompt_tokens} prompt and {c.output_tokens} output tokens, {r.requests:,} requests, "
        "the profile's run-to-run jitter."
    )
    if r.overload:
        overloaded(r.overload)
    cols = st.columns(3)
    for col, (label, prefix, help_text) in zip(
        cols,
        (
            ("TTFT", "ttft", "time to first token"),
            ("TPOT", "tpot", "time per output token"),
            ("Request latency", "latency", ""),
        ),
    ):
        p95 = getattr(r, f"{prefix}_p95_s", None)
        for suffix, value in (
            ("p50", getattr(r, f"{prefix}_p50_s")),
            ("p95", p95),
            ("p99", getattr(r, f"{prefix}_p99_s")),
        ):
            if value is not None:
                col.metric(f"{label} {suffix}", ui.duration(value), help=help_text or None, border=True)
    cols = st.columns(3)
    cols[0].metric(
        "Throughput",
        ui.num(r.throughput_tokens_per_s, "tok/s"),
        help=f"{ui.num(r.throughput_requests_per_s)} requests/s",
        border=True,
    )
    cols[1].metric(
        "Mean running", ui.num(r.mean_running), help="sequences in the running batch, time average", border=True
    )
    cols[2].metric("KV cache", f"{r.kv_capacity_tokens:,} tokens", border=True)


def queue(run, load) -> None:
    report, config = run.result, run.config
    target_ms = load.p99_target_s * 1e3 if load.p99_target_s is not None else None
    batching = (
        f"static batches of {config.max_batch}"
        if config.policy == "static"
        else f"dynamic batching up to {config.max_batch}"
        + (
            f" (wait ≤ {ui.duration(config.max_wait_s)})"
            if config.max_wait_s
            else " (no wait: a batch is what has arrived)"
        )
    )
    st.caption(
        f"Poisson arrivals at {ui.num(config.rate_per_s)} req/s, {batching}, {report.requests:,} requests, "
        "the profile's run-to-run jitter."
    )
    if report.overload:
        overloaded(report.overload)
    c = st.columns(6)
    for col, (label, value) in zip(c, [("p50", report.p50_s), ("p95", report.p95_s), ("p99", report.p99_s)]):
        col.metric(label, ui.duration(value), border=True)
    if target_ms is not None:
        c[2].caption("meets the target" if report.p99_s * 1e3 <= target_ms else f"**over the {target_ms:g} ms target**")
    c[3].metric("Throughput", ui.num(report.throughput_per_s, "/s"), border=True)
    c[4].metric("Utilization", ui.pct(report.utilization), border=True)
    c[5].metric("Mean batch", ui.num(report.mean_batch), border=True)
    left, right = st.columns(2)
    with left:
        st.plotly_chart(ui.scaled(histogram(report, target_ms)), key="latency_hist")
    with right:
        st.plotly_chart(ui.scaled(against_load(load, target_ms, config.rate_per_s)), key="load_curve")


def curve_sentence(load, target_ms: float | None) -> str:
    best = load.max_rate_meeting_target_per_s
    if target_ms is None:
        return f"Saturation at **{ui.num(load.saturation_rate_per_s)} req/s**; no p99 target set."
    return f"Saturation at **{ui.num(load.saturation_rate_per_s)} req/s**; " + (
        f"the p99 target of {target_ms:g} ms holds up to **{ui.num(best)} req/s**."
        if best
        else f"no simulated load meets the p99 target of {target_ms:g} ms."
    )


def histogram(report, target_ms: float | None) -> go.Figure:
    samples = [q * 1e3 for q in report.latency_quantiles_s]
    fig = go.Figure(
        go.Histogram(
            x=samples,
            nbinsx=60,
            histnorm="probability",
            marker_color="#1f77b4",
            name="requests",
            hovertemplate="%{x} ms: %{y:.1%}<extra></extra>",
        )
    )
    for name, value, dash, where in (
        ("p50", report.p50_s, "dot", "top left"),
        ("p95", report.p95_s, "dash", "top"),
        ("p99", report.p99_s, "solid", "top right"),
    ):
        fig.add_vline(x=value * 1e3, line_dash=dash, annotation_text=name, line_color="#333", annotation_position=where)
    x_max = max(samples) * 1.15
    shown = target_ms is not None and target_ms <= x_max
    if shown:
        fig.add_vline(x=target_ms, line_color="#d62728", annotation_text="p99 target", annotation_position="top left")
    fig.update_layout(
        title="Request latency distribution"
        + ("" if shown or target_ms is None else f" (p99 target {target_ms:g} ms is off the right)"),
        xaxis=dict(title="latency (ms)", range=[0, x_max]),
        yaxis=dict(title="share of requests", tickformat=".1%"),
        **LAYOUT,
    )
    return fig


def against_load(load, target_ms: float | None, rate_per_s: float) -> go.Figure:
    """p50/p95/p99 against offered load, on a latency axis in the unit of the largest p99 (ms or s)."""
    rates = [p.offered_rate_per_s for p in load.points]
    scale, unit = people.unit_for(max(p.p99_s for p in load.points))
    fig = go.Figure()
    for name, attr, color in (("p50", "p50_s", "#2ca02c"), ("p95", "p95_s", "#ff7f0e"), ("p99", "p99_s", "#d62728")):
        values = [getattr(p, attr) for p in load.points]
        fig.add_scatter(
            x=rates,
            y=[v / scale for v in values],
            text=[ui.duration(v) for v in values],
            mode="lines+markers",
            name=name,
            line_color=color,
            hovertemplate="%{x:,.0f} req/s: %{text}<extra>" + name + "</extra>",
        )
    if target_ms is not None:
        fig.add_hline(
            y=target_ms / 1e3 / scale,
            line_color="#d62728",
            line_dash="dash",
            annotation_text=f"p99 target {ui.duration(target_ms / 1e3)}",
        )
    if load.knee_index is not None:
        fig.add_vline(x=rates[load.knee_index], line_dash="dot", annotation_text="knee")
    fig.add_vline(x=rate_per_s, line_color="#1f6feb", annotation_text="the load", annotation_position="bottom right")
    fig.update_layout(
        title="Latency against load",
        xaxis_title="offered load (req/s)",
        yaxis=dict(title=f"latency ({unit})", rangemode="tozero"),
        **LAYOUT,
    )
    return fig


doc, result, sel = ui.current()
ui.header("Serving", doc)
served = session.get().assessment.load
st.markdown(f"**Load:** {ui.md(served.sentence())}")
run = served.run
if run is not None and run.continuous:
    continuous(run)
elif run is not None:
    queue(run, served.curve or run.curve)
if served.curve is not None:
    if run is None:
        st.plotly_chart(ui.scaled(against_load(served.curve, None, served.rate_per_s)), key="load_curve")
    target = served.curve.p99_target_s
    st.markdown(curve_sentence(served.curve, target * 1e3 if target is not None else None))
if run is not None:
    with st.expander("Serving assumptions"):
        lines = run.result.assumptions + (served.curve.assumptions if served.curve else ())
        st.markdown("\n".join(f"- {ui.md(a)}" for a in lines))
