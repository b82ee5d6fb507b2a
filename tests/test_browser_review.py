"""The Review page in a real browser at a shared screen (1280x720, presentation mode): run the review of a
Llama-2-7B decode step, download the root-cause packet and unzip it, then show each of the five steps as
one screen (screenshots in docs/screenshots/review-step-N.png when SCREENSHOT_DIR is that folder).

The server is bench/load_dashboard's start_server; the page helpers are test_browser's (one copy of each).
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from bench.load_dashboard import start_server
from tests.test_browser import ARGS, CHROMIUM, SHARED_SCREEN, no_exception, settle, shots, sync_api

STEPS = ("1 Workload and KPI", "2 First failure", "3 Proving artifact", "4 Fix and owner", "5 Validation")
LINK = "page=review&model=llama2-7b&dtype=bf16&batch=1&seq=1&past=1024"
PACKET = {
    "review.json", "README.md", "reproduce.sh", "profiles/h100-sxm.json", "baseline.xlsx", "baseline.html",
    "fix.xlsx", "fix.html", "validation_matrix.csv", "validation_verdicts.csv", "rollback_boundary.csv",
}  # fmt: skip


@pytest.fixture(scope="module")
def screen():
    proc, url = start_server()
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport=SHARED_SCREEN, accept_downloads=True)
            page.set_default_timeout(180_000)
            page.goto(f"{url}/?{LINK}")
            page.get_by_role("heading", name="Review", level=1).wait_for()
            settle(page)
            yield page
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def below_the_fold(page) -> list[str]:
    """The main column's blocks whose bottom lies below the screen (what a meeting would have to scroll to)."""
    return page.evaluate(
        """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stElementContainer']")]
            .filter(e => e.checkVisibility() && e.getBoundingClientRect().height > 0
                    && e.getBoundingClientRect().bottom > window.innerHeight)
            .map(e => e.innerText.slice(0, 80))"""
    )


def test_review_packet_downloads_and_each_step_fits_one_screen(screen):
    screen.get_by_text("Presentation mode").click()
    settle(screen)
    screen.get_by_role("button", name="Run review").click()
    screen.get_by_role("button", name="Download packet (zip)").wait_for()
    settle(screen)
    no_exception(screen, "review")
    with screen.expect_download() as download:
        screen.get_by_role("button", name="Download packet (zip)").click()
    data = download.value.path().read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        files = {n: z.read(n) for n in z.namelist()}
    assert set(files) == PACKET
    doc = json.loads(files["review.json"])
    assert doc["slice"]["dims"] == {"batch": 1, "past": 1024, "seq": 1} and doc["slice"]["model"] == "llama2-7b"
    assert doc["first_failure"]["dominant_class"] == "memory-bound"
    assert doc["chosen_fix"]["plan_options"] == {"weight_dtype": "int4"}
    assert doc["chosen_fix"]["chosen_because"].startswith("chosen because")
    assert (
        files["reproduce.sh"].startswith(b"#!/bin/sh")
        and b"mapper review " in files["reproduce.sh"]
        and b" -- llama2-7b\n" in files["reproduce.sh"]
    )
    assert files["baseline.xlsx"][:2] == b"PK" and b"<html" in files["fix.html"][:500].lower()
    assert "# Review: `llama2-7b` on" in files["README.md"].decode()

    dirs, overflow = shots(), {}
    for n, step in enumerate(STEPS, start=1):
        screen.get_by_text(step, exact=True).click()
        settle(screen)
        no_exception(screen, step)
        screen.mouse.wheel(0, -10_000)  # the step as it opens: from the top of the page
        for d in dirs:
            screen.screenshot(path=str(d / f"review-step-{n}.png"))
        if below := below_the_fold(screen):
            overflow[step] = below
    assert not overflow, overflow
