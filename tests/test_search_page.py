"""The dashboard's Search page (app_pages/search.py) through AppTest: a small search renders its chosen plan,
frontier and table, its sheet reads back as numbers, and a queued view (what a click on a point queues) opens
that plan in the sidebar, the Overview's and the Review's slice. The browser test clicks a point in the real
chart (tests/test_browser_trends.py)."""

from __future__ import annotations

import io
from dataclasses import replace

import pandas as pd
from streamlit.testing.v1 import AppTest

import mapper
from app_pages import session
from tests.conftest import APP

QUERY = {"model": "gpt2-small", "tpot_p99_ms": "50", "ttft_p99_ms": "500", "prompt_tokens": "128"}


def searched() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(QUERY | {"output_tokens": "16"})
    at.run()
    at.switch_page("app_pages/search.py").run()
    next(b for b in at.button if b.label == "Search").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    return at


def test_search_page_renders_the_choice_the_table_and_the_sheet():
    at = searched()
    assert at.success and "Chosen:" in at.success[0].value
    table = at.dataframe[0].value
    assert {"configuration", "tok/s per device", "J per token", "why it misses the SLA"} <= set(table.columns)
    assert table["tok/s per device"].is_monotonic_decreasing and (table["J per token"] > 0).all()
    result = at.session_state[session.KEY].runs["search_result"][1]
    sheet = pd.read_excel(io.BytesIO(mapper.search_sheet_bytes(result, "xlsx")), sheet_name=None)
    assert set(sheet) == {"Answer", "Configurations", "Frontier", "Pruned"}
    assert sheet["Configurations"]["tokens_per_s_per_device"].dtype.kind == "f"  # numbers, not text
    assert len(sheet["Configurations"]) == len(result.points)
    chosen = sheet["Answer"].set_index("field").loc["chosen", "value"]
    assert chosen == result.best.label


def test_a_queued_view_opens_the_plan_in_the_sidebar():
    """What a click on a point queues (its plan and serving values) is the sidebar's slice on the next run."""
    at = searched()
    state = at.session_state[session.KEY]
    at.session_state[session.KEY] = replace(state, pending_view={"tp": "2", "max_batch": "8", "kv_dtype": "fp8"})
    at.switch_page("app_pages/overview.py").run()
    assert not at.exception
    after = at.session_state[session.KEY]
    assert after.selection.options.tp == 2 and str(after.selection.options.kv_dtype) == "fp8"
    assert after.selection.serving.serve.serving.max_batch == 8
    assert after.pending_view is None


def test_search_page_for_a_cnn_under_a_request_p99():
    """A model without a KV cache: the page searches precision and batch cap under the sidebar's p99 target and
    names its figures per request."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"model": "resnet50", "p99_target_ms": "5"})
    at.run()
    at.switch_page("app_pages/search.py").run()
    at.selectbox(key="search_max_batch").set_value(8).run()
    next(b for b in at.button if b.label == "Search").click().run()
    assert not at.exception and not at.error
    assert "requests/s per device" in at.success[0].value
    assert {"requests/s per device", "J per request", "request p99 (ms)"} <= set(at.dataframe[0].value.columns)
