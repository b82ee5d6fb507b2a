"""Dashboard re-render: change the batch on Llama-2-70B and on ResNet-50 N times, time each Overview re-render.

    .venv/bin/python bench/bench_dashboard.py --changes 10

Starts the app with `load_dashboard.start_server` (127.0.0.1 only), opens one headless Chromium page per
model at `?model=<name>`, then N times types a new batch into the sidebar and times from Enter until the
caption names the new batch and the script run has finished. Prints p50/p95 per model.
Goals (issue 16): Llama-2-70B < 0.5 s p95, ResNet-50 < 0.2 s p95.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright import sync_api

from bench.load_dashboard import ARGS, CAPTION, CHROMIUM, start_server

GOALS_S = {"llama2-70b": 0.5, "resnet50": 0.2}
IDLE = "!document.querySelector('[data-testid=\"stStatusWidget\"]')"


def rerender_times(page, url: str, model: str, changes: int) -> list[float]:
    page.goto(f"{url}/?model={model}")
    page.get_by_text("Verdict.").wait_for()
    page.wait_for_function(IDLE)
    box = page.locator("[data-testid='stSidebar']").get_by_label("batch", exact=True).first
    times = []
    for i in range(changes):
        batch = 2 + i % 7
        box.fill(str(batch))
        t = time.perf_counter()
        box.press("Enter")
        page.locator(CAPTION, has_text=f"batch={batch}").first.wait_for()
        page.wait_for_function(IDLE)
        times.append(time.perf_counter() - t)
    return times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=10)
    args = ap.parse_args()
    proc, url = start_server()
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(120_000)
            for model, goal in GOALS_S.items():
                times = sorted(rerender_times(page, url, model, args.changes))
                p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
                print(
                    f"{model:11s} {len(times)} batch changes: Overview re-render p50 {statistics.median(times):.3f} s,"
                    f" p95 {p95:.3f} s (goal p95 < {goal} s)"
                )
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
