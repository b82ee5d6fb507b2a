"""The Trends page in a real browser, reading a run store this test filled: a dashboard started with
MAPPER_STORE, the slice's chart with its regression flag, and a chart point's link opening that run's sheet.

Needs /usr/bin/chromium and playwright, as tests/test_browser.py (skipped there and here alike)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mapper.store.record import record
from mapper.store.trend import load_trends
from tests import test_browser
from tests.store_writer import doc
from tests.test_browser import ARGS, CHROMIUM, no_exception, settle, sync_api

pytestmark = pytest.mark.slow  # a real browser (headless Chromium), ~6 s

server = test_browser.server  # the dashboard fixture, started here with MAPPER_STORE (store_env, autouse)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'runs.sqlite'}"
    for revision, p99_s in (("r1", 0.010), ("r2", 0.011), ("r3", 0.015)):  # r3: 36% worse than r2
        record(url, doc(p99_s, model="trend-net"), command="map", revision=revision, sheet=(b"PK" + b"0" * 64, "xlsx"))
    return url


@pytest.fixture(scope="module", autouse=True)
def store_env(store_url):
    """MAPPER_STORE for the dashboard tests/test_browser.py's `server` starts (autouse: set before it), and a team
    view: the runs recorded here are the CLI's, shared with every session only under one."""
    yield from server_environment(MAPPER_STORE=store_url, MAPPER_TEAM_VIEW="the team")


def server_environment(**variables: str):
    """Set `variables` in this process's environment (a server the module starts inherits them), then restore."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_trends_page_reads_the_store_and_links_each_point_to_its_sheet(server, store_url, tmp_path):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000}, accept_downloads=True)
        page.set_default_timeout(60_000)
        page.goto(f"{server}/trends")
        page.get_by_role("heading", name="Trends", level=1).wait_for()
        settle(page)
        no_exception(page, "Trends")
        body = page.locator("[data-testid='stMain']")
        assert "trend-net" in body.inner_text()
        assert "Regression: p99 +36.4% worse from r2 to r3" in body.inner_text()
        chart = page.locator(".js-plotly-plot").filter(has_text="trend-net").first
        chart.wait_for()
        points = chart.locator(".scatterlayer .trace").first.locator(".points path")
        assert points.count() == 3  # one per revision
        page.screenshot(path=str(tmp_path / "trends.png"), full_page=True)
        chart.scroll_into_view_if_needed()  # below the session's own runs: the team's section
        box = points.nth(1).bounding_box()  # r2's point: a click selects it (the drag layer above takes the click)
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        r2 = next(t for t in load_trends(store_url) if t.model_name == "trend-net").points[1].public_id[:12]
        page.get_by_text(f"Run {r2}: its sheet").wait_for()  # links name a run by its public id
        settle(page)
        with page.expect_download() as download:
            page.get_by_role("button", name=f"Download the sheet of run {r2}").click()
        assert Path(download.value.path()).read_bytes().startswith(b"PK")
        browser.close()
