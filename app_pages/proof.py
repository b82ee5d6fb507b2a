"""Review step 3 drawn: the roofline with the failing class's kernels marked (the rest faint), the kernel time by
class with the bytes or FLOPs behind each, the failing kernels in people's words and the measured evidence.
`show(mapper.proving_artifact(doc, cls))` from the Review page; the engine computed every figure, this draws."""

import html

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import mapper
from app_pages import ui

CHART_PX = 240  # each chart's height: two side by side and a table fit one 1280x720 shared-screen step
TABLE_PX = 180  # a table's height at most (it scrolls inside)
ROW_PX = 35  # Streamlit's dataframe row height
MARKER_PX = 26  # the longest failing kernel's marker (area grows with time)
FAINT = "#c8c8c8"  # the kernels of other classes: context, not evidence
LAYOUT = dict(template="plotly_white", height=CHART_PX, margin=dict(l=10, r=10, t=36, b=10))


def roofline(a) -> go.Figure:
    """Log-log roofline at the plan's precision: the failing kernels in their class colour, sized by time."""
    fig = go.Figure()
    x, y = zip(*a.roof.line, strict=True)
    fig.add_scatter(x=x, y=y, mode="lines", name="roof", line=dict(color="#444"), hoverinfo="skip")
    points = pd.DataFrame(a.points.rows, columns=a.points.columns)
    for failing, part in points.groupby("failing", sort=True):  # faint first, the failing drawn on top
        _points(fig, part, a.bottleneck if failing else "other classes", failing)
    measured = pd.DataFrame(a.measured_points.rows, columns=a.measured_points.columns)
    if len(measured):
        _points(fig, measured, "measured", None)
    fig.update_layout(
        title=dict(text=f"Roofline ({html.escape(a.roof.dtype)}), ridge {a.roof.ridge_flop_per_byte:,.0f} FLOP/B"),
        xaxis=dict(type="log", title=dict(text="intensity (log scale)"), ticksuffix=" FLOP/B", dtick=1),
        yaxis=dict(
            type="log", title=dict(text="achieved (log scale)"), ticksuffix="FLOP/s", exponentformat="SI", dtick=1
        ),
        legend=dict(x=0.01, y=0.99, bgcolor="rgba(255,255,255,0.7)", itemsizing="constant"),
        **LAYOUT,
    )
    return fig


def _points(fig: go.Figure, part: pd.DataFrame, name: str, failing: bool | None) -> None:
    """One marker trace: failing (class colour, area by time), faint (the rest) or measured (open diamonds)."""
    marker = {
        True: dict(color=mapper.class_color(name), size=part["time_s"], sizemode="area", sizemin=4, opacity=0.85),
        False: dict(color=FAINT, size=5, opacity=0.5),
        None: dict(symbol="diamond-open", color="#000", size=10, line=dict(width=2)),
    }[failing]
    if failing:
        marker["sizeref"] = part["time_s"].max() / MARKER_PX**2 or 1.0
    fig.add_scatter(
        x=part["intensity_flop_per_byte"],
        y=part["achieved_flops_per_s"],
        mode="markers",
        name=html.escape(name),
        marker=marker,
        text=[html.escape(n) for n in part["name"]],
        customdata=[mapper.format_duration(t) for t in part["time_s"]],
        hovertemplate="%{text}<br>%{x:,.1f} FLOP/B, %{y:.3s}FLOP/s, %{customdata}<extra></extra>",
    )


def class_split(a) -> go.Figure:
    """The kernel time by class (the failing one solid), each bar labelled with its share and what is behind it."""
    rows = pd.DataFrame(a.classes.rows, columns=a.classes.columns).iloc[::-1]  # longest on top
    fig = go.Figure(
        go.Bar(
            x=rows["share"],
            y=[html.escape(c) for c in rows["class"]],
            orientation="h",
            marker=dict(
                color=[mapper.class_color(c) for c in rows["class"]],
                opacity=[1.0 if c == a.bottleneck else 0.45 for c in rows["class"]],
            ),
            text=[f"{s:.0%} · {html.escape(b)}" for s, b in zip(rows["share"], rows["behind"], strict=True)],
            textposition="auto",
            customdata=[[mapper.format_duration(t), n] for t, n in zip(rows["time_s"], rows["kernels"], strict=True)],
            hovertemplate="%{y}: %{customdata[0]} in %{customdata[1]} kernels<extra></extra>",
        )
    )
    fig.update_layout(
        title=dict(text="Kernel time by class"),
        xaxis=dict(tickformat=".0%", range=[0, 1]),
        yaxis=dict(automargin=True),
        showlegend=False,
        **LAYOUT,
    )
    return fig


def table(t) -> None:
    """An engine table of text cells, at most TABLE_PX tall."""
    st.dataframe(
        pd.DataFrame(t.rows, columns=t.columns),
        hide_index=True,
        width="stretch",
        height=min(ROW_PX * (len(t.rows) + 1) + 3, TABLE_PX),
    )


def show(a) -> None:
    """Step 3 on one screen: the headline, the two charts side by side, the failing kernels, the evidence."""
    st.markdown(f"**{ui.md(a.headline)}**")
    left, right = st.columns([3, 2])
    left.plotly_chart(ui.scaled(roofline(a)), key="proof_roofline")
    right.plotly_chart(ui.scaled(class_split(a)), key="proof_classes")
    table(a.kernels)
    of_class = f" ({a.off_axes_failing} of them {ui.md(a.bottleneck)})" if a.off_axes_failing else ""
    off = f" {a.off_axes} kernels without FLOPs or DRAM traffic are off the log axes{of_class}." if a.off_axes else ""
    st.caption(
        f"{a.kernels_of_class} {ui.md(a.bottleneck)} kernels, repeated layers one row, longest first."
        f" Roof: {ui.tflops(a.roof.peak_flops_per_s)} at {ui.md(a.roof.dtype)},"
        f" DRAM {ui.gbps(a.roof.dram_bandwidth_bytes_per_s)} ({ui.md(a.roof.source)}).{off}"
    )
    if a.measured is not None:
        table(a.measured)
    st.caption(ui.md(a.measured_summary))
