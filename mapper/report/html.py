"""The mapping sheet as one self-contained HTML page (the review meeting's artifact).

Called by `mapper.report.sheet`: KPI tiles, the plain-words verdict, the charts from
`mapper.report.charts` with plotly.js inlined (no CDN, works offline), then the tables.
Every piece of text interpolated here is html-escaped: node names come from uploads.
"""

from __future__ import annotations

import math
import numbers
from html import escape

import numpy as np
import pandas as pd

from mapper.report.charts import class_color, layer_share_figure, roofline_figure, timeline_figure

TOP_KERNELS = 20
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{font-size:1.5em;margin-bottom:4px} h2{font-size:1.15em;margin-top:32px;border-bottom:1px solid #ddd}
.sub{color:#666;margin-top:0} .tiles{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.tile{border:1px solid #ddd;border-radius:8px;padding:10px 14px;min-width:150px}
.tile .v{font-size:1.4em;font-weight:600} .tile .k{color:#666;font-size:.85em}
.verdict{background:#f5f7fb;border-left:4px solid #1f77b4;padding:10px 14px}
table{border-collapse:collapse;font-size:.85em;width:100%} th,td{border-bottom:1px solid #eee;padding:4px 6px;
text-align:left;vertical-align:top} td.n{text-align:right;font-variant-numeric:tabular-nums}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:6px}
.caveat{color:#8a4b00}
"""


def _si(value: float, unit: str) -> str:
    """3 significant digits with an SI prefix: display only, never stored."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    for factor, prefix in (
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1, ""),
        (1e-3, "m"),
        (1e-6, "u"),
        (1e-9, "n"),
    ):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}" if value else f"0 {unit}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _cell(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, numbers.Real):
        if math.isnan(value):
            return "<td></td>"
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        return f'<td class="n">{escape(text)}</td>'
    return f"<td>{escape('' if value is None else str(value))}</td>"


def table_html(frame: pd.DataFrame) -> str:
    """A frame as an escaped HTML table (numbers right-aligned, 4 significant digits)."""
    if frame.empty:
        return "<p>None.</p>"
    head = "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in frame.itertuples(index=False, name=None)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _tiles(t: dict) -> str:
    tiles = [
        ("latency", _si(t["latency_s"], "s")),
        ("throughput", f"{t['throughput_per_s']:,.1f} /s"),
        ("MFU", _pct(t["mfu"])),
        ("memory-stall fraction", _pct(t["memory_stall_fraction"])),
        ("perf / W", f"{t['perf_per_watt']:,.2f} inf/s/W"),
        ("energy per inference", _si(t["energy_per_inference_j"], "J")),
    ]
    return (
        '<div class="tiles">'
        + "".join(
            f'<div class="tile"><div class="v">{escape(v)}</div><div class="k">{escape(k)}</div></div>'
            for k, v in tiles
        )
        + "</div>"
    )


def _top_kernels(kernels: pd.DataFrame) -> str:
    top = kernels.sort_values("time_s", ascending=False).head(TOP_KERNELS)
    head = (
        "<tr><th>kernel</th><th>class</th><th>time</th><th>share</th><th>FLOP/B</th><th>achieved</th>"
        "<th>stall</th><th>tile</th><th>evidence</th><th>owner</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{escape(r.name)}</td>"
        f'<td><span class="dot" style="background:{class_color(r.bottleneck)}"></span>{escape(r.bottleneck)}</td>'
        f'<td class="n">{_si(r.time_s, "s")}</td><td class="n">{_pct(r.share)}</td>'
        f'<td class="n">{"-" if math.isnan(r.intensity_flop_per_byte) else f"{r.intensity_flop_per_byte:.3g}"}</td>'
        f'<td class="n">{_si(r.achieved_flops_per_s, "FLOP/s")}</td><td class="n">{_pct(r.stall_fraction)}</td>'
        f"<td>{escape(r.tile)}</td><td>{escape(r.evidence)}</td><td>{escape(r.owner)}</td></tr>"
        for r in top.itertuples(index=False)
    )
    return f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>"


def _figure_divs(doc: dict) -> list[str]:
    figures = (layer_share_figure(doc), roofline_figure(doc), timeline_figure(doc))
    config = {"displaylogo": False, "responsive": True}
    # plotly.js inlined once, in the first figure; the page needs no network. Fixed div ids (plotly draws
    # a random one): the same slice gives the same page bytes, which a review packet's reproduce.sh checks.
    return [
        fig.to_html(full_html=False, include_plotlyjs=(i == 0), config=config, div_id=f"mapper-figure-{i}")
        for i, fig in enumerate(figures)
    ]


def render_html(doc: dict, frames: dict[str, pd.DataFrame], verdict: str) -> str:
    """The whole page. `frames` are the sheet's frames (mapper.report.sheet.frames_from_document)."""
    t, model = doc["totals"], doc["model"]
    dims = ", ".join(f"{k}={v}" for k, v in model.get("dims", {}).items()) or "no symbolic dims"
    title = f"{model['name']} on {doc['hardware']['name']} ({t['dtype']}, {dims})"
    caveats = "".join(f'<li class="caveat">{escape(c)}</li>' for c in doc["caveats"]) or "<li>None.</li>"
    core = {"Summary", "Kernels", "Layer types", "Fusion plan", "Assumptions", "Provenance", "Unmodeled"}
    extras = "".join(
        f"<h2>{escape(name)}</h2>{table_html(frame)}" for name, frame in frames.items() if name not in core
    )
    unmodeled = frames["Unmodeled"]
    parts = [
        f"<h1>Mapping sheet: {escape(title)}</h1>",
        (
            f'<p class="sub">{len(doc["kernels"])} kernels from {escape(str(model.get("nodes", "?")))} nodes;'
            f" engine {escape(str(doc['engine_version']))}; created {escape(str(doc['created_utc']))}</p>"
        ),
        _tiles(t),
        f'<p class="verdict">{escape(verdict)}</p>',
        *_figure_divs(doc),
        f"<h2>Top {TOP_KERNELS} kernels by time</h2>",
        _top_kernels(frames["Kernels"]),
        f"<h2>Caveats</h2><ul>{caveats}</ul>",
        f"<h2>Unmodeled operators ({len(unmodeled)})</h2>{table_html(unmodeled)}",
        extras,
        "<h2>Assumptions</h2>",
        table_html(frames["Assumptions"]),
        "<h2>Provenance</h2>",
        table_html(frames["Provenance"]),
    ]
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )
