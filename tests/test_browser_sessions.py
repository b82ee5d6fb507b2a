"""Two browsers against one dashboard with a run store (issue 31): neither sees the other's upload, run or sheet.

One server, started with MAPPER_STORE and a team view; two browser contexts (two cookie jars: two browsers).
Alice uploads a model under a name of her own; Bob's Trends page does not list it, and Alice's link to its
sheet opens nothing for him. Alice still finds her run, and downloads its sheet, after a reload (her token is in
her browser's cookie). The CLI's run is in both, under the heading that says it is shared.

Needs /usr/bin/chromium and playwright, as tests/test_browser.py (skipped there and here alike)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from mapper.store import schema
from mapper.store.owners import EVERY_RUN, owner_of
from mapper.store.record import record
from mapper.store.trend import load_trends
from tests import test_browser
from tests.store_writer import doc
from tests.test_browser import ARGS, BERT_TINY, CHROMIUM, no_exception, open_page, settle, sync_api
from tests.test_browser_trends import server_environment

pytestmark = pytest.mark.slow  # two real browsers side by side, ~15 s

server = test_browser.server  # the dashboard fixture, started here with MAPPER_STORE (store_env, autouse)
SECRET = "alice-secret-model"  # Alice's file name: her model's name in her runs
TEAM = "Perf team"
COOKIE = "mapper_session"
RECORD_WAIT_MS, RECORD_POLL_MS = 60_000, 250


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'runs.sqlite'}"
    record(url, doc(0.010, model="ci-model"), command="map", revision="r1", sheet=(b"PK" + b"0" * 64, "xlsx"))
    return url


@pytest.fixture(scope="module", autouse=True)
def store_env(store_url):
    """MAPPER_STORE and MAPPER_TEAM_VIEW for the server tests/test_browser.py's `server` starts."""
    yield from server_environment(MAPPER_STORE=store_url, MAPPER_TEAM_VIEW=TEAM)


def new_browser(browser):
    """A fresh browser context (its own cookies) with one page on the dashboard's default view."""
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(90_000)
    return context, page


def main_text(page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def token_of(context) -> str:
    (token,) = [c["value"] for c in context.cookies() if c["name"] == COOKIE]
    return token


def runs_of(store_url: str, token: str) -> set[str]:
    """The models of the runs the store holds as this browser's."""
    with schema.open_engine(store_url).connect() as conn:
        query = sa.select(schema.runs.c.model_name).where(schema.runs.c.owner == owner_of(token))
        return set(conn.execute(query).scalars())


def recorded_runs(page, store_url: str, token: str, model: str) -> set[str]:
    """The browser's runs once `model` is among them, or after RECORD_WAIT_MS: the page records a mapping at the
    end of its script run, which a loaded machine may not have reached when the page first looks settled."""
    for _ in range(RECORD_WAIT_MS // RECORD_POLL_MS):
        if model in (got := runs_of(store_url, token)):
            return got
        page.wait_for_timeout(RECORD_POLL_MS)
    return runs_of(store_url, token)


def public_id_of(store_url: str, model: str) -> str:
    (trend,) = [t for t in load_trends(store_url, scope=EVERY_RUN) if t.model_name == model]
    return trend.points[-1].public_id


def test_two_browsers_never_see_each_others_upload_run_or_sheet(server, store_url, tmp_path):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        alice_context, alice = new_browser(browser)
        alice.goto(server)
        alice.get_by_text("Verdict.").wait_for()
        settle(alice)
        upload = {"name": f"{SECRET}.onnx", "mimeType": "application/octet-stream", "buffer": BERT_TINY.read_bytes()}
        alice.locator("[data-testid='stSidebar'] input[type='file']").first.set_input_files(upload)
        alice.locator("[data-testid='stSidebar']").get_by_label("seq").wait_for()  # mapped: recorded as hers
        settle(alice)
        no_exception(alice, "Alice's upload")
        alice_token = token_of(alice_context)  # the page wrote her token into her browser
        assert SECRET in recorded_runs(alice, store_url, alice_token, SECRET)
        secret_run = public_id_of(store_url, SECRET)

        bob_context, bob = new_browser(browser)
        bob.goto(server)
        bob.get_by_text("Verdict.").wait_for()
        settle(bob)
        bob_token = token_of(bob_context)
        assert bob_token != alice_token and SECRET not in runs_of(store_url, bob_token)
        assert SECRET not in bob.locator("[data-testid='stSidebar']").inner_text()  # not her upload either
        open_page(bob, "Trends")
        no_exception(bob, "Bob's Trends")
        text = main_text(bob)
        assert SECRET not in text and "resnet50" in text  # his own run, not hers
        assert f"Shared with the team: {TEAM}" in text and "ci-model" in text
        bob.goto(f"{server}/trends?run={secret_run}")  # Alice's link, pasted into Bob's browser
        bob.get_by_role("heading", name="Trends", level=1).wait_for()
        settle(bob)
        assert "with a sheet that this session may open" in main_text(bob)
        assert bob.get_by_role("button", name="Download the sheet").count() == 0
        bob.screenshot(path=str(tmp_path / "bob.png"), full_page=True)

        alice.reload()  # her cookie brings her session's token back
        alice.get_by_text("Verdict.").wait_for()
        settle(alice)
        assert token_of(alice_context) == alice_token
        open_page(alice, "Trends")
        assert SECRET in main_text(alice)
        alice.goto(f"{server}/trends?run={secret_run}")
        alice.get_by_role("heading", name="Trends", level=1).wait_for()
        alice.get_by_text(f"Run {secret_run[:12]}: its sheet").wait_for()
        settle(alice)
        with alice.expect_download() as download:
            alice.get_by_role("button", name=f"Download the sheet of run {secret_run[:12]}").click()
        assert Path(download.value.path()).read_bytes().startswith(b"PK")
        browser.close()
