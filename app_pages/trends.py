"""Trends: the run store's slices across revisions (predicted against measured), the regression flag, and
each point's sheet. Reads the store the operator configured with $MAPPER_STORE at server start."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, ui

MAX_SLICES = 20  # charts drawn at once; the filters narrow a larger store

st.title("Trends")
if cache.STORE is None:
    st.info(
        "No run store configured: start the dashboard with MAPPER_STORE set (a database URL or a SQLite file),"
        " e.g. `MAPPER_STORE=sqlite:///runs.sqlite streamlit run app.py`. Mappings are then recorded there."
    )
    st.stop()


@st.cache_data(ttl=5, show_spinner=False)
def slices(model: str | None, hw: str | None) -> list:
    return mapper.load_trends(cache.STORE, model, hw)


def sheet_of_run(text: str) -> None:
    """The sheet a chart point links to (`?run=ID`), as a download."""
    if not text.isdigit():
        st.warning(f"No run {ui.md(text)}.")
        return
    found = mapper.run_sheet(cache.STORE, int(text))
    if found is None:
        st.warning(f"Run {text} has no sheet in the store.")
        return
    data, fmt = found
    st.success(f"Run {text}: its sheet ({len(data) / 1024:,.0f} KiB, {ui.md(fmt)}).")
    st.download_button(
        f"Download the sheet of run {text}", data, file_name=f"run-{text}.{fmt}", key=f"run_sheet_{text}"
    )


run = st.query_params.get("run")
if run:
    sheet_of_run(run)
everything = slices(None, None)
if not everything:
    st.info("The store has no recorded runs yet.")
    st.stop()
left, middle, right = st.columns(3)
model = left.selectbox("Model", ["all", *sorted({t.model_name for t in everything})], format_func=ui.md)
hw = middle.selectbox("Hardware", ["all", *sorted({t.hardware_name for t in everything})], format_func=ui.md)
threshold = right.number_input("Regression threshold", 0.0, 10.0, mapper.DEFAULT_TREND_THRESHOLD, 0.01)
chosen = slices(None if model == "all" else model, None if hw == "all" else hw)
st.caption(f"{len(chosen)} slices; click a point (or a run's link in its table) for that run's sheet.")
for trend in chosen[:MAX_SLICES]:
    metric = trend.primary_metric() or "latency"
    dims = ", ".join(f"{k}={v}" for k, v in trend.dims.items())
    st.subheader(f"{ui.md(trend.command)}: {ui.md(trend.model_name)} ({ui.md(dims)}) on {ui.md(trend.hardware_name)}")
    for r in mapper.trend_regressions(trend, {metric: threshold}):
        st.error(
            f"Regression: {metric} {r.change:+.1%} worse from {ui.md(r.previous_revision)} to"
            f" {ui.md(r.latest_revision)} (threshold {threshold:.0%})."
        )
    event = st.plotly_chart(
        mapper.trend_figure(trend, metric), key=f"trend_{trend.key}", on_select="rerun", selection_mode="points"
    )
    for point in event.selection.points[:1]:  # a click on a point: that run's sheet
        sheet_of_run(str(point["customdata"]))
    rows = [
        {"run": p.run_id, "sheet": f"?run={p.run_id}" if p.has_sheet else None, "revision": p.revision}
        | {"recorded (UTC)": p.recorded_utc, **p.kpis}
        for p in trend.points
    ]
    sheet_link = st.column_config.LinkColumn("sheet", display_text="open")  # the page at ?run=ID: its sheet
    st.dataframe(pd.DataFrame(rows), hide_index=True, column_config={"sheet": sheet_link})
