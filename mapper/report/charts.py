"""Plotly figures of a mapping document, shared by the HTML sheet and the dashboard.

Each builder takes the plain-data document (`mapping_document(result)`) and
returns a `plotly.graph_objects.Figure`; none formats numbers into the data. Axes read in people's units
(a timeline in the unit of its length, FLOP/s with SI prefixes) and a log axis says so in its title.
Text from the model (kernel and node names) is html-escaped here, because
plotly renders hover text as a subset of HTML.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from mapper.core.units import duration_unit, format_duration

# One colour per bottleneck class (mapper/core/classes.py), stable across every chart and page.
CLASS_COLORS = {
    "compute-bound (matrix)": "#1f77b4",
    "compute-bound (vector/SFU)": "#17becf",
    "memory-bound": "#d62728",
    "occupancy / wave quantization": "#ff7f0e",
    "unaligned leading dimension": "#ffbb78",
    "launch / latency-bound": "#9467bd",
    "synchronization": "#8c564b",
    "interconnect": "#e377c2",
    "host / unsupported": "#7f7f7f",
}
OTHER_COLOR = "#bcbd22"
DRAM_BANDWIDTH_KEY = "memory.dram_bandwidth_bytes_per_s"
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.2))


def class_color(bottleneck: str) -> str:
    return CLASS_COLORS.get(bottleneck, OTHER_COLOR)


def _classes(kernels: list[dict]) -> list[str]:
    """Classes present, in the table's order (unknown ones last), so legends read the same everywhere."""
    present = {k["bottleneck"] for k in kernels}
    return [c for c in CLASS_COLORS if c in present] + sorted(present - CLASS_COLORS.keys())


def assumption_value(doc: dict, key: str) -> float | None:
    """A numeric profile value from the document's assumptions rows, if recorded."""
    for row in doc.get("assumptions", ()):
        if row.get("name") == key:
            try:
                return float(row["value"])
            except (TypeError, ValueError):
                return None
    return None


def dram_bandwidth(doc: dict) -> float | None:
    """The profile's DRAM bandwidth from the document's assumptions rows, if recorded."""
    return assumption_value(doc, DRAM_BANDWIDTH_KEY)


def vector_peak(doc: dict) -> float | None:
    """The vector units' peak at the plan dtype (fp32's where the dtype has none, as the engine does)."""
    dtype = doc.get("totals", {}).get("dtype", "fp32")
    return assumption_value(doc, f"compute.vector_peak_flops_per_s.{dtype}") or assumption_value(
        doc, "compute.vector_peak_flops_per_s.fp32"
    )


def layer_share_figure(doc: dict) -> go.Figure:
    """Share of the model's time per layer type (horizontal bars, largest on top)."""
    layers = sorted(doc.get("layer_types", ()), key=lambda r: r["share"])
    fig = go.Figure(
        go.Bar(
            x=[r["share"] for r in layers],
            y=[html.escape(r["layer_type"]) for r in layers],
            orientation="h",
            customdata=[[format_duration(r["time_s"]), r["kernels"], r["mfu"], r["stall_fraction"]] for r in layers],
            hovertemplate="%{y}: %{x:.1%} of time<br>%{customdata[0]} in %{customdata[1]} kernels"
            "<br>MFU %{customdata[2]:.1%}, memory stall %{customdata[3]:.1%}<extra></extra>",
            marker_color="#1f77b4",
        )
    )
    fig.update_layout(
        title="Time share by layer type",
        xaxis=dict(title="share of latency", tickformat=".0%"),
        height=max(260, 40 + 28 * len(layers)),
        **LAYOUT,
    )
    return fig


def roofline_figure(doc: dict, hw_peak: float | None = None, dram_bw: float | None = None) -> go.Figure:
    """Log-log roofline: each kernel at (FLOP/B, achieved FLOP/s), coloured by class, sized by time.

    The roofs come from the document (totals peak, the DRAM bandwidth assumption) unless passed in.
    Kernels with no FLOPs or no DRAM traffic have no place on log axes; the title counts them.
    """
    peak = hw_peak if hw_peak is not None else doc.get("totals", {}).get("peak_flops_per_s")
    bandwidth = dram_bw if dram_bw is not None else dram_bandwidth(doc)
    kernels = doc.get("kernels", [])
    plotted = [k for k in kernels if (k.get("intensity_flop_per_byte") or 0) > 0 and k["achieved_flops_per_s"] > 0]
    fig = go.Figure()
    _kernel_points(fig, plotted)
    xs = [k["intensity_flop_per_byte"] for k in plotted]
    ridge = peak / bandwidth if peak and bandwidth else None
    x_lo = min(xs + ([ridge] if ridge else []), default=1.0) / 3
    x_hi = max(xs + ([ridge] if ridge else []), default=1.0) * 3
    if ridge and bandwidth:  # a ridge is there only with a bandwidth
        _roof(fig, [x_lo, ridge], [bandwidth * x_lo, peak], "DRAM roof", dict(color="#444", dash="dash"))
    if peak:
        _roof(fig, [ridge or x_lo, x_hi], [peak, peak], "matrix peak", dict(color="#444"))
    l2 = assumption_value(doc, "memory.l2_bandwidth_bytes_per_s")
    if l2 and peak:  # the L2 ceiling: what a kernel whose re-reads all hit L2 could reach
        _roof(fig, [x_lo, peak / l2], [l2 * x_lo, peak], "L2 roof", dict(color="#999", dash="dot"))
    vector = vector_peak(doc)
    if vector and bandwidth and (not peak or vector < peak):
        _roof(fig, [vector / bandwidth, x_hi], [vector, vector], "vector peak", dict(color="#999"))
    skipped = len(kernels) - len(plotted)
    title = "Roofline" + (f" (ridge {ridge:.0f} FLOP/B)" if ridge else "")
    if skipped:
        title += f"; {skipped} kernel{'s' if skipped != 1 else ''} without FLOPs or DRAM traffic not shown"
    fig.update_layout(
        title=title,
        xaxis=dict(type="log", title="arithmetic intensity (FLOP/B of DRAM traffic, log scale)"),
        yaxis=dict(type="log", title="achieved FLOP/s (log scale)", exponentformat="SI"),  # 100T, never 1e+14
        height=480,
        **LAYOUT,
    )
    return fig


def _kernel_points(fig: go.Figure, plotted: list[dict]) -> None:
    """One marker trace per bottleneck class; a marker's area grows with its kernel's time."""
    longest = max((k["time_s"] for k in plotted), default=1.0) or 1.0
    for cls in _classes(plotted):
        ks = [k for k in plotted if k["bottleneck"] == cls]
        fig.add_trace(
            go.Scatter(
                x=[k["intensity_flop_per_byte"] for k in ks],
                y=[k["achieved_flops_per_s"] for k in ks],
                mode="markers",
                name=html.escape(cls),
                marker=dict(
                    color=class_color(cls),
                    size=[6 + 30 * (k["time_s"] / longest) ** 0.5 for k in ks],
                    line=dict(width=0.5, color="#333"),
                    opacity=0.8,
                ),
                text=[html.escape(k["name"]) for k in ks],
                customdata=[format_duration(k["time_s"]) for k in ks],
                hovertemplate="%{text}<br>%{x:,.3~r} FLOP/B, %{y:.3s}FLOP/s<br>%{customdata}<extra></extra>",
            )
        )


def _roof(fig: go.Figure, x: list[float], y: list[float], name: str, line: dict) -> None:
    fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, line=line, hoverinfo="skip"))


def timeline_figure(doc: dict) -> go.Figure:
    """Kernels on the device timeline (one stream): a bar per kernel from start_s, lanes by layer type, in the
    unit of the batch's length (µs, ms or s: 120 ms, never 120,000 µs)."""
    kernels = doc.get("kernels", [])
    end = max((k["start_s"] + k["time_s"] for k in kernels), default=0.0)
    scale, unit = duration_unit(end)
    fig = go.Figure()
    for cls in _classes(kernels):
        ks = [k for k in kernels if k["bottleneck"] == cls]
        fig.add_trace(
            go.Bar(
                base=[k["start_s"] / scale for k in ks],
                x=[k["time_s"] / scale for k in ks],
                y=[html.escape(k["layer_type"]) for k in ks],
                orientation="h",
                name=html.escape(cls),
                marker=dict(color=class_color(cls), line=dict(width=0)),
                text=[html.escape(k["name"]) for k in ks],
                customdata=[[format_duration(k["start_s"]), format_duration(k["time_s"])] for k in ks],
                textposition="none",
                hovertemplate="%{text}<br>start %{customdata[0]}, %{customdata[1]}<extra></extra>",
            )
        )
    lanes = len({k["layer_type"] for k in kernels})
    fig.update_layout(
        title="Kernel timeline (one stream)",
        barmode="overlay",
        bargap=0.3,
        xaxis=dict(title=f"time ({unit})"),
        height=max(260, 120 + 40 * lanes),
        **LAYOUT,
    )
    return fig
