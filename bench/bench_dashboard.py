"""Dashboard re-render: change the batch on Llama-2-70B and on ResNet-50 N times, time each Overview re-render.

    .venv/bin/python bench/bench_dashboard.py --changes 10

Starts the app with `load_dashboard.start_server` (127.0.0.1 only), opens one headless Chromium page per
model at `?model=<name>`, then N times types a new batch into the sidebar and presses Enter. The re-render
is timed in the page, on its own clock (performance.now): from the Enter key's keydown to the DOM mutation
after which the caption names the new batch and the script run has finished (Streamlit's status widget
gone). Beside it the harness's round trip (Enter sent to both conditions seen by Playwright's polling,
which adds its own ~0.05-0.1 s), and the server's share: the script run and the collector's full passes,
from the timing log the app writes where MAPPER_APP_TIMING names a file (app_pages/ui.py's `timed`).
Goals (issue 16): Llama-2-70B < 0.5 s p95, ResNet-50 < 0.2 s p95.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright import sync_api

from bench.load_dashboard import ARGS, CAPTION, CHROMIUM, start_server

GOALS_S = {"llama2-70b": 0.5, "resnet50": 0.2}
IDLE = "!document.querySelector('[data-testid=\"stStatusWidget\"]')"
# Loaded: every element drawn. Streamlit loads an element's code on first use and shows a skeleton until then
# (30 of them when the verdict first shows); timing a change before that timed the page's load instead.
LOADED = "!document.querySelector('[data-testid=\"stSkeleton\"]')"
# Installed before each change: stamps the Enter key's keydown and the first DOM mutation after which the
# Overview is redrawn at the new batch (the caption names it, and the script run has finished).
WATCH = """(batch) => {
  window.__rerender = {start: null, end: null};
  const drawn = () => !document.querySelector('[data-testid="stStatusWidget"]') &&
    [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stCaptionContainer']")]
      .some((c) => c.textContent.includes('batch=' + batch));
  window.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && window.__rerender.start === null) window.__rerender.start = performance.now();
  }, {capture: true, once: true});
  const seen = new MutationObserver(() => {
    const r = window.__rerender;
    if (r.start !== null && r.end === null && drawn()) { r.end = performance.now(); seen.disconnect(); }
  });
  seen.observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
}"""


def server_seconds(log: Path, since: int) -> tuple[float, float]:
    """(script run, full gc passes) in seconds from the timing log's lines after line `since`."""
    lines = [line.split("\t")[:2] for line in log.read_text(encoding="utf-8").splitlines()[since:]]
    script = sum(float(s) for name, s in lines if name == "script run")
    return script, sum(float(s) for name, s in lines if name == "full gc pass")


def line_count(log: Path) -> int:
    return len(log.read_text(encoding="utf-8").splitlines()) if log.exists() else 0


def rerender_times(page, url: str, model: str, changes: int, log: Path) -> list[tuple[float, float, float, float]]:
    """(re-render in the page, harness round trip, script run, full gc passes) seconds of each batch change."""
    page.goto(f"{url}/?model={model}")
    page.get_by_text("Verdict.").wait_for()
    page.wait_for_function(IDLE)
    page.wait_for_function(LOADED)
    box = page.locator("[data-testid='stSidebar']").get_by_label("batch", exact=True).first
    times = []
    for i in range(changes):
        batch = 2 + i % 7
        box.fill(str(batch))
        page.evaluate(WATCH, batch)
        since = line_count(log)
        t = time.perf_counter()
        box.press("Enter")
        page.locator(CAPTION, has_text=f"batch={batch}").first.wait_for()
        page.wait_for_function(IDLE)
        harness = time.perf_counter() - t
        page.wait_for_function("window.__rerender.end !== null")
        seen = page.evaluate("window.__rerender.end - window.__rerender.start") / 1e3
        times.append((seen, harness, *server_seconds(log, since)))
    return times


def p50_p95(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return statistics.median(values), values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=10)
    args = ap.parse_args()
    log = Path(tempfile.mkdtemp()) / "timing.log"
    os.environ["MAPPER_APP_TIMING"] = str(log)  # the server inherits it
    proc, url = start_server()
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(120_000)
            for model, goal in GOALS_S.items():
                seen, harness, script, passes = zip(*rerender_times(page, url, model, args.changes, log), strict=True)
                (p50, p95), (h50, h95), (s50, s95) = (p50_p95(list(x)) for x in (seen, harness, script))
                print(
                    f"{model:11s} {len(seen)} batch changes: Overview re-render in the page p50 {p50:.3f} s,"
                    f" p95 {p95:.3f} s (goal p95 < {goal} s); harness round trip p50 {h50:.3f} s, p95 {h95:.3f} s;"
                    f" server script run p50 {s50:.3f} s, p95 {s95:.3f} s; full gc passes {sum(passes):.3f} s in all"
                )
            browser.close()
        print(f"timing log (every timed section of every run): {log}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
