"""The Review page in a real browser at a shared screen (1280x720, presentation mode): run the review of a
Llama-2-7B decode step on an A100 (batch 32, 2048 cached tokens, its released fp16: it fits, it is
memory-bound, and the chosen fix is feasible), download the root-cause packet and unzip it, then show each
of the five steps as one screen (screenshots in docs/screenshots/review-step-N.png when SCREENSHOT_DIR is that
folder). Then BERT at batch 8, seq 384 with a 20 ms p99 target: the same first failure on the Overview, the
Review and the downloaded XLSX.

The server is bench/load_dashboard's start_server; the page helpers are test_browser's (one copy of each).
"""

from __future__ import annotations

import io
import json
import zipfile
from urllib.parse import urlsplit

import openpyxl
import pytest

from bench.load_dashboard import start_server
from tests.test_browser import ARGS, CHROMIUM, SHARED_SCREEN, no_exception, settle, shots, sync_api

pytestmark = pytest.mark.slow  # a real browser (headless Chromium) per test, 5-11 s each

STEPS = ("1 Workload and KPI", "2 First failure", "3 Proving artifact", "4 Fix and owner", "5 Validation")
LINK = "page=review&model=llama2-7b&hw=a100-sxm-80gb&batch=32&seq=1&past=2048"
BERT = "model=bert-base&batch=8&seq=384&p99_target_ms=20"
PACKET = {
    "review.json", "README.md", "reproduce.sh", "profiles/a100-sxm-80gb.json", "baseline.xlsx", "baseline.html",
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
    assert doc["slice"]["dims"] == {"batch": 32, "past": 2048, "seq": 1} and doc["slice"]["model"] == "llama2-7b"
    assert doc["slice"]["options"]["dtype"] == "auto" and doc["first_failure"]["check"] == "dominant bottleneck"
    assert doc["first_failure"]["dominant_class"] == "memory-bound"  # it fits at its released fp16
    chosen = doc["chosen_fix"]
    assert chosen["fits"] and chosen["fixes"] and not chosen["rejected"]  # a feasible fix, never one that misfits
    assert chosen["chosen_because"].startswith("chosen because")
    misfits = [c for c in doc["candidates"] if not c["fits"]]
    assert misfits and all(c["rejected"].startswith("does not fit") for c in misfits)  # 2x batch: 84 GB of 80
    assert (
        files["reproduce.sh"].startswith(b"#!/bin/sh")
        and b" review " in files["reproduce.sh"]
        and b"llama2-7b" in files["reproduce.sh"]
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


def summary_failure(xlsx: bytes) -> str:
    rows = openpyxl.load_workbook(io.BytesIO(xlsx))["Summary"].iter_rows(min_row=2, values_only=True)
    return next(r[2] for r in rows if r[0] == "verdict" and r[1] == "verdict")


def test_bert_with_a_p99_target_reads_the_same_first_failure_everywhere(screen):
    """BERT at batch 8, seq 384, a 20 ms p99 target: the Overview's verdict, the Review's step 2 and the
    downloaded sheet's Summary say the same first failure, word for word."""
    parts = urlsplit(screen.url)
    url = f"{parts.scheme}://{parts.netloc}/"  # the server's root: the Overview
    screen.goto(f"{url}?{BERT}")
    settle(screen)
    no_exception(screen, "bert overview")
    verdict = screen.locator(".st-key-verdict").inner_text()
    assert verdict.startswith("Verdict. bert-base on h100-sxm")
    sentence = verdict.removeprefix("Verdict. ").split(" First failure:")[0]
    screen.goto(f"{url}?{BERT}&page=review")
    screen.get_by_role("heading", name="Review", level=1).wait_for()
    settle(screen)
    screen.get_by_role("button", name="Run review").click()
    screen.get_by_role("button", name="Download packet (zip)").wait_for()
    settle(screen)
    screen.get_by_text(STEPS[1], exact=True).click()
    settle(screen)
    check = verdict.split("First failure: ")[1].split(";")[0]
    assert screen.get_by_text(f"First mechanism failure: {check}").count() == 1
    with screen.expect_download() as download:
        screen.get_by_role("button", name="Download packet (zip)").click()
    with zipfile.ZipFile(io.BytesIO(download.value.path().read_bytes())) as z:
        review = json.loads(z.read("review.json"))
        assert summary_failure(z.read("baseline.xlsx")) == sentence
    assert review["first_failure"]["check"] == check
