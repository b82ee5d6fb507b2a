"""Trends: the run store's slices across revisions (predicted against measured), the regression flag, and
each point's sheet. Reads the store the operator configured with $MAPPER_STORE at server start.

A session sees the runs it recorded (its token, app_pages/session.py) and, when the operator named a team view
($MAPPER_TEAM_VIEW), the runs the CLI and CI recorded, under a heading that says they are shared. A run's link
carries its public id; the store answers only runs this session may read, whatever id a link names."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, session, ui

MAX_SLICES = 20  # charts drawn at once per section; the filters narrow a larger store

st.title("Trends")
if cache.STORE is None:
    st.info(
        "No run store configured: start the dashboard with MAPPER_STORE set (a database URL or a SQLite file),"
        " e.g. `MAPPER_STORE=sqlite:///runs.sqlite streamlit run app.py`. Mappings are then recorded there."
    )
    st.stop()
mine = mapper.RunScope.of_session(session.token())
team = mapper.RunScope.team_only() if cache.TEAM_VIEW else None
readable = mapper.RunScope.of_session(session.token(), team=team is not None)  # what a link may open


@st.cache_data(ttl=5, show_spinner=False)
def slices(store: str, model: str | None, hw: str | None, scope: mapper.RunScope):
    """The store's trends in `scope` (part of the key: one session's never answer another's)."""
    return mapper.read_trends(store, model, hw, scope=scope)


def sheet_of_run(text: str) -> None:
    """The sheet a chart point links to (`?run=<public id>`), as a download, when this session may read it."""
    try:
        found = mapper.run_sheet(cache.STORE, text, readable)
    except mapper.MapperError as e:
        ui.show_error("Cannot open this run's sheet", e)
        return
    if found is None:
        st.warning(f"No run {ui.md(text)} with a sheet that this session may open.")
        return
    data, fmt = found
    st.success(f"Run {ui.md(text[:12])}: its sheet ({len(data) / 1024:,.0f} KiB, {ui.md(fmt)}).")
    st.download_button(
        f"Download the sheet of run {text[:12]}", data, file_name=f"run-{text[:12]}.{fmt}", key=f"run_sheet_{text}"
    )


def section(trends, threshold: float, where: str) -> None:
    """Each slice's chart, regression flag and run table; `where` keeps two sections' widget keys apart."""
    for trend in trends[:MAX_SLICES]:
        metric = trend.primary_metric() or "latency"
        dims = ", ".join(f"{k}={v}" for k, v in trend.dims.items())
        st.subheader(
            f"{ui.md(trend.command)}: {ui.md(trend.model_name)} ({ui.md(dims)}) on {ui.md(trend.hardware_name)}"
        )
        for r in mapper.trend_regressions(trend, {metric: threshold}):
            st.error(
                f"Regression: {metric} {r.change:+.1%} worse from {ui.md(r.previous_revision)} to"
                f" {ui.md(r.latest_revision)} (threshold {threshold:.0%})."
            )
        event = st.plotly_chart(
            mapper.trend_figure(trend, metric),
            key=f"trend_{where}_{trend.key}",
            on_select="rerun",
            selection_mode="points",
        )
        for point in event.selection.points[:1]:  # a click on a point: that run's sheet
            sheet_of_run(str(point["customdata"]))
        rows = [
            {"run": p.public_id, "sheet": f"?run={p.public_id}" if p.has_sheet and p.public_id else None}
            | {"revision": p.revision, "recorded (UTC)": p.recorded_utc, **p.kpis}
            for p in trend.points
        ]
        sheet_link = st.column_config.LinkColumn("sheet", display_text="open")  # the page at ?run=ID: its sheet
        runs = pd.DataFrame(rows)  # each KPI under its key (p99_s, mfu): in its unit and in words for people
        config = ui.people_config(runs) | {"sheet": sheet_link}
        st.dataframe(ui.people_table(runs), hide_index=True, column_config=config)


run = st.query_params.get("run")
if run:
    sheet_of_run(run)
own_all = slices(cache.STORE, None, None, mine)
team_all = slices(cache.STORE, None, None, team) if team else None
everything = list(own_all.slices) + list(team_all.slices if team_all else ())
skipped = own_all.skipped_runs + (team_all.skipped_runs if team_all else 0)
if skipped:
    st.warning(
        f"{skipped} recorded run(s) were skipped: their stored fields do not read back (dims or options not JSON,"
        " or a KPI not a number). The store was written by hand or is damaged; the rest is shown."
    )
if not everything:
    st.info(
        "No recorded runs yet: each mapping this browser makes is recorded here."
        + ("" if team else " Runs recorded by the CLI and CI are not shared on this server (no team view set).")
    )
    st.stop()
left, middle, right = st.columns(3)
model = left.selectbox("Model", ["all", *sorted({t.model_name for t in everything})], format_func=ui.md)
hw = middle.selectbox("Hardware", ["all", *sorted({t.hardware_name for t in everything})], format_func=ui.md)
threshold = right.number_input("Regression threshold", 0.0, 10.0, mapper.DEFAULT_TREND_THRESHOLD, 0.01)
filters = (None if model == "all" else model, None if hw == "all" else hw)
own = slices(cache.STORE, *filters, mine).slices
st.header("Your runs")
st.caption(
    f"{len(own)} slices recorded from this browser; no other session sees them. Click a point (or a run's link"
    " in its table) for that run's sheet."
)
section(own, threshold, "own")
if team:
    shared = slices(cache.STORE, *filters, team).slices
    st.header(f"Shared with the team: {ui.md(cache.TEAM_VIEW)}")
    st.caption(f"{len(shared)} slices recorded by the CLI and CI (`--store`): every session on this server sees these.")
    section(shared, threshold, "team")
