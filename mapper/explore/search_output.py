"""A deployment search's outputs beyond its JSON answer: the sheet (every configuration, the frontier, the pruned
entries and the answer, as numbers), the run store's record, and the frontier as a Plotly figure.

Reads only the `SearchResult` that mapper/explore/search.py builds; the dashboard's Search page and `mapper search
--out/--store` both write through here.
"""

from __future__ import annotations

import dataclasses
import html
import json
from typing import TYPE_CHECKING

from mapper.core.errors import MapperError
from mapper.core.version import __version__
from mapper.explore.search import SearchResult
from mapper.report.tables import xlsx_bytes

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

SHEET_FORMATS = ("xlsx", "json")


def configuration_rows(result: SearchResult) -> list[dict]:
    """Every served configuration, by tokens/s per device (the SLA's misses beside the ones meeting it), each with
    its index in `result.points` (what a chart point carries) and whether it is on the frontier or chosen."""
    front = {id(p) for p in result.frontier}
    best = result.best
    order = sorted(range(len(result.points)), key=lambda i: -result.points[i].tokens_per_s_per_device)
    rows = []
    for i in order:
        p = result.points[i]
        rows.append(
            {"point": i, "configuration": p.label, "chosen": p is best, "on_frontier": id(p) in front} | p.row()
        )
    return rows


def search_tables(result: SearchResult) -> dict[str, pd.DataFrame]:
    """Sheet name -> table: the answer (one row per statement), the configurations, the frontier, the pruned."""
    import pandas as pd  # lazy: `import mapper` starts without pandas

    doc = result.document()
    answer = [("model", result.model), ("hardware", result.hw), ("devices", str(result.spec.devices))]
    answer += [("prompt_tokens", str(result.spec.prompt_tokens)), ("output_tokens", str(result.spec.output_tokens))]
    answer += [(f"target.{k}", str(v)) for k, v in dataclasses.asdict(result.spec.targets).items() if v is not None]
    best = result.best
    answer.append(("chosen", "none meets the SLA" if best is None else best.label))
    if best is not None:
        answer.append(("command", doc["best"]["command"]))
    answer += [("beside the choice", line) for line in doc["neighbours"]]
    answer += [("sensitivity", line) for line in doc["sensitivity"]]
    answer += [("configurations served", str(len(result.points))), ("steps mapped", str(result.mapped))]
    answer += [(f"pruned.{k}", str(n)) for k, n in doc["evaluated"]["pruned"].items() if n]
    answer += [("wall_s", f"{result.wall_s:.3f}"), ("engine_version", __version__)]
    rows = configuration_rows(result)
    return {
        "Answer": pd.DataFrame(answer, columns=["field", "value"]),
        "Configurations": pd.DataFrame(rows),
        "Frontier": pd.DataFrame([r for r in rows if r["on_frontier"]]),
        "Pruned": pd.DataFrame(doc["pruned"], columns=["what", "reason", "detail"]),
    }


def search_sheet_bytes(result: SearchResult, fmt: str = "xlsx") -> bytes:
    """The search as a workbook (`search_tables`) or its JSON answer."""
    if fmt == "json":
        return json.dumps(result.document(), indent=1, allow_nan=False).encode()
    if fmt != "xlsx":
        raise MapperError(f"a search's sheet is one of {', '.join(SHEET_FORMATS)}, not {fmt!r}")
    return xlsx_bytes(search_tables(result))


def search_record(result: SearchResult) -> dict:
    """The run store's document of a search: its slice (model, profile, the question as options) and the chosen
    configuration's figures as the serving section, so a trend follows the chosen plan across revisions."""
    s, best = result.spec, result.best
    question = {
        "devices": s.devices,
        "prompt_tokens": s.prompt_tokens,
        "output_tokens": s.output_tokens,
        "rate_per_s": s.rate_per_s,
        "targets": dataclasses.asdict(s.targets),
    }
    serving = {}
    if best is not None:
        per_replica = best.tokens_per_s_per_device * best.plan.devices_per_replica
        serving = {
            "ttft_p99_s": best.ttft_p99_s,
            "tpot_p99_s": best.tpot_p99_s,
            "latency_p99_s": best.latency_p99_s,
            "throughput_tokens_per_s": per_replica * best.plan.replicas,
        }
    return {
        "model": {"name": result.model, "sha256": "", "dims": {}},
        "hardware": {"name": result.hw, "sha256": ""},
        "options": question,
        "engine_version": __version__,
        "serving": serving,
        "search": result.document(),
    }


FEASIBLE, MISSES, FRONTIER, CHOSEN = "#1f77b4", "#c7c7c7", "#ff7f0e", "#d62728"


def frontier_figure(result: SearchResult) -> go.Figure:
    """Tokens/s per device against tokens/s per user: every configuration (grey where it misses the SLA), the
    frontier as a line, the chosen one starred, the TPOT target as the tokens/s per user it allows (1 / TPOT: the
    rate a user sees at that step time). Each point's customdata is its index in `result.points`."""
    import plotly.graph_objects as go  # lazy: plotly is an extra

    from mapper.report.charts import LAYOUT

    fig = go.Figure()
    points = list(enumerate(result.points))
    x = (lambda p: p.latency_p99_s * 1e3) if result.queue else (lambda p: p.tokens_per_s_per_user)
    for name, color, group in (
        ("meets the SLA", FEASIBLE, [(i, p) for i, p in points if p.feasible]),
        ("misses the SLA", MISSES, [(i, p) for i, p in points if not p.feasible]),
    ):
        fig.add_trace(
            go.Scatter(
                x=[x(p) for _, p in group],
                y=[p.tokens_per_s_per_device for _, p in group],
                mode="markers",
                name=name,
                marker=dict(color=color, size=8),
                customdata=[i for i, _ in group],
                hovertext=[_hover(p) for _, p in group],
                hoverinfo="text",
            )
        )
    front = result.frontier
    fig.add_trace(
        go.Scatter(
            x=[x(p) for p in front],
            y=[p.tokens_per_s_per_device for p in front],
            mode="lines",
            name="frontier",
            line=dict(color=FRONTIER, width=2),
            hoverinfo="skip",
        )
    )
    _chosen_point(fig, result, x)
    _target_line(fig, result)
    s = result.spec
    fig.update_layout(
        **LAYOUT,
        title=f"{html.escape(result.model)} on {s.devices} x {html.escape(result.hw)}: {_workload(result)}",
        xaxis_title="request p99 (ms)" if result.queue else "tokens/s per user (1 / mean TPOT)",
        yaxis_title="requests/s per device" if result.queue else "output tokens/s per device",
        height=480,
    )
    return fig


def _chosen_point(fig: go.Figure, result: SearchResult, x) -> None:
    """The chosen configuration as a star (its customdata its index in `result.points`), where one meets the SLA."""
    import plotly.graph_objects as go  # lazy: plotly is an extra

    best = result.best
    if best is None:
        return
    fig.add_trace(
        go.Scatter(
            x=[x(best)],
            y=[best.tokens_per_s_per_device],
            mode="markers",
            name="chosen",
            marker=dict(symbol="star", size=18, color=CHOSEN, line=dict(width=1, color="#000")),
            customdata=[result.points.index(best)],
            hovertext=[_hover(best)],
            hoverinfo="text",
        )
    )


def _target_line(fig: go.Figure, result: SearchResult) -> None:
    """The SLA as a line on the frontier's axis: the request p99 target (encoders), else the TPOT target as the
    tokens/s per user it allows."""
    tpot, p99 = result.spec.targets.tpot_p99_s, result.spec.targets.p99_s
    if result.queue and p99 is not None:
        fig.add_vline(
            x=p99 * 1e3,
            line=dict(color=CHOSEN, dash="dash"),
            annotation_text=f"request p99 target {p99 * 1e3:g} ms",
            annotation_position="top right",
        )
    if tpot is not None and not result.queue:
        fig.add_vline(
            x=1.0 / tpot,
            line=dict(color=CHOSEN, dash="dash"),
            annotation_text=f"TPOT p99 {tpot * 1e3:g} ms: {1 / tpot:,.0f} tok/s/user",
            annotation_position="top left",
        )


def _workload(result: SearchResult) -> str:
    s = result.spec
    return "requests served whole" if result.queue else f"{s.prompt_tokens} prompt / {s.output_tokens} output tokens"


def _hover(p) -> str:
    verdict = "meets the SLA" if p.feasible else html.escape(p.failure)
    return (
        f"{html.escape(p.label)}<br>{p.tokens_per_s_per_device:,.0f} tok/s/device,"
        f" {p.tokens_per_s_per_user:,.1f} tok/s/user<br>TTFT p99 {p.ttft_p99_s * 1e3:,.0f} ms,"
        f" TPOT p99 {p.tpot_p99_s * 1e3:.1f} ms, request p99 {p.latency_p99_s * 1e3:,.1f} ms,"
        f" {p.energy_per_token_j:.3g} J/token<br>{verdict}"
    )
