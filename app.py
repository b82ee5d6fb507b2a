"""The dashboard's router: pages via st.navigation along the top, the shared sidebar, and the cached mapping
of the current selection (app_pages/cache.py). No math here; pages format units at the edge.

    streamlit run app.py
"""

import streamlit as st

import mapper
from app_pages import cache, link, session, state, ui

st.set_page_config(page_title="mapper: workload mapping", page_icon=":material/memory:", layout="wide")

REVIEW = st.Page("app_pages/review.py", title="Review", icon=":material/rule:")  # the meeting's agenda
OVERVIEW = st.Page("app_pages/overview.py", title="Overview", icon=":material/dashboard:", default=True)
HARDWARE = st.Page("app_pages/hardware.py", title="Hardware", icon=":material/developer_board:")
EXPORT = st.Page("app_pages/export.py", title="Export", icon=":material/download:")
# Along the top (the sidebar starts with the model and hardware): the meeting's pages as links, the rest in
# three menus, so every page is one or two clicks away and none sits behind "more" on a 1280 px screen.
SECTIONS = {
    "": [REVIEW, OVERVIEW, HARDWARE, EXPORT],
    "Analysis": [
        st.Page("app_pages/layers.py", title="Layers", icon=":material/stacked_bar_chart:"),
        st.Page("app_pages/kernels.py", title="Kernels", icon=":material/table_rows:"),
        st.Page("app_pages/roofline.py", title="Roofline", icon=":material/show_chart:"),
        st.Page("app_pages/timeline.py", title="Timeline", icon=":material/view_timeline:"),
    ],
    "Deployment": [
        st.Page("app_pages/serving.py", title="Serving", icon=":material/speed:"),
        st.Page("app_pages/power.py", title="Power", icon=":material/bolt:"),
        st.Page("app_pages/devices.py", title="Devices", icon=":material/lan:"),
    ],
    "Explore": [
        st.Page("app_pages/validation.py", title="Validation", icon=":material/fact_check:"),
        st.Page("app_pages/search.py", title="Search", icon=":material/travel_explore:"),
        st.Page("app_pages/sweep.py", title="Sweep", icon=":material/grid_on:"),
        st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page("app_pages/trends.py", title="Trends", icon=":material/trending_up:"),
    ],
}
PAGES = [p for pages in SECTIONS.values() for p in pages]
page = st.navigation(SECTIONS, position="top")


def run() -> None:
    first_run = not session.get().initialised
    with ui.timed("sidebar"):
        selection = state.sidebar()  # reads the link's query params into the widgets on the first run
    if cache.STORE is not None:  # the browser keeps its session token, below the sidebar (what it records is its own)
        with st.sidebar:
            session.remember_token()
    wanted = st.query_params.get("page")
    if first_run and wanted and wanted != page.url_path:
        target = next((p for p in PAGES if p.url_path == wanted), None)
        if target is not None:
            st.switch_page(target)
    if selection is not None:
        with ui.timed("mapping"):
            map_selection(selection)
    with ui.timed(f"page {page.title}"):
        page.run()


def map_training(selection: state.Selection) -> None:
    """The training mode's step (`mapper train`), beside the slice's mapping; None when the mode is off."""
    if selection.training is None:
        session.update(training=None, training_error=None)
        return
    try:
        with st.spinner(f"Mapping a training step of {ui.md(selection.model_label)} ..."):
            doc = cache.training(
                selection.model_key, selection.training, selection.hw.sha256, selection.source, selection.hw,
                selection.model_label,
            )  # fmt: skip
        session.update(training=doc, training_error=None)
    except mapper.MapperError as e:
        session.update(training=None, training_error=f"Cannot map this training step: {mapper.error_line(e)}")


def map_selection(selection: state.Selection) -> None:
    session.update(selection=selection)
    try:
        with st.spinner(f"Mapping {ui.md(selection.model_label)} onto {ui.md(selection.hw.display_name)} ..."):
            result, doc, assessment = cache.mapping(
                *selection.key, selection.source, selection.hw, selection.model_label
            )
        session.update(result=result, doc=doc, assessment=assessment, map_error=None)
    except mapper.MapperError as e:
        session.update(map_error=f"Cannot map this selection: {mapper.error_line(e)}")
        result = None
    map_training(selection)
    if result is not None and cache.STORE is not None:  # the operator configured a store: record what is mapped
        try:  # as this browser's run (its token's hash): only it reads the run back
            owner = mapper.session_owner(session.token())
            cache.recorded((*selection.key, selection.model_label), owner, result, doc)
        except mapper.MapperError as e:
            ui.show_error("Not recorded in the run store", e)
    link.write_query_params(selection, page.url_path)


with ui.timed("script run"):
    ui.guarded(run)  # every page inside the one failure wrapper: one line in the page, the traceback in the log
