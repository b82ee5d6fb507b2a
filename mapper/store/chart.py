"""The trend chart: a slice's primary metric across revisions, predicted against measured, as a Plotly line.

Each point carries its run's public id (customdata): a click on it is a selection the Trends page answers with that
run's sheet. (Plotly lays its drag and hover layers over in-plot and tick-label links, so those never click.)
Revision labels are the user's text: html-escaped here, because plotly renders labels as a subset of HTML.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from mapper.report.charts import LAYOUT
from mapper.store.kpis import KPIS, MEASURED_OF
from mapper.store.trend import SliceTrend


def trend_figure(trend: SliceTrend, metric: str | None = None) -> go.Figure:
    """`metric` (a KPIS name; default the slice's primary) per revision; the measured line where there is one."""
    metric = metric or trend.primary_metric() or "latency"
    column = KPIS[metric][0]
    points = [p for p in trend.points if p.kpis[column] is not None]
    x = [f"{i + 1}: {html.escape(p.revision[:24])}" for i, p in enumerate(points)]
    hover = [
        f"revision {html.escape(p.revision)}<br>model {p.model_sha256[:12]}<br>profile {p.hardware_sha256[:12]}"
        f"<br>engine {html.escape(p.engine_version)}<br>{p.recorded_utc}"
        for p in points
    ]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[p.kpis[column] for p in points],
            mode="lines+markers",
            customdata=[p.public_id for p in points],
            hovertext=hover,
            hoverinfo="text+y",
            name=f"{metric} (predicted)",
        )
    )
    measured = MEASURED_OF.get(metric)
    if measured and any(p.kpis[measured] is not None for p in points):
        fig.add_trace(
            go.Scatter(x=x, y=[p.kpis[measured] for p in points], mode="lines+markers", name=f"{metric} (measured)")
        )
    fig.update_layout(
        **LAYOUT,
        title=f"{html.escape(trend.model_name)} on {html.escape(trend.hardware_name)}: {metric} by revision",
        xaxis_title="revision (in the order recorded)",
        yaxis_title=column,
    )
    return fig
