"""Dashboard under concurrent load: N browser sessions each upload a different model and page through it.

    .venv/bin/python bench/load_dashboard.py --sessions 6 --rounds 3

Starts `streamlit run app.py` on a free loopback port (127.0.0.1 only), opens N pages in one headless
/usr/bin/chromium (Playwright, async), and in every session: uploads its own model (onnx's light
models, each with its own graph name), waits for the caption to name it, then visits pages in turn.
Bounded: N x rounds actions and a wall-clock deadline; the server is stopped at the end. Prints
render-latency percentiles, whether the server stayed up, and any session that saw another's model.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = (
    "bvlc_alexnet",
    "zfnet512",
    "vgg19",
    "squeezenet",
    "resnet50",
    "shufflenet",
    "inception_v1",
    "inception_v2",
    "densenet121",
)
GRAPH_NAMES = {"squeezenet": "squeezenet_old"}  # the caption shows the graph's own name
PAGES = ("Layers", "Kernels", "Overview", "Roofline")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CAPTION = "[data-testid='stMain'] [data-testid='stCaptionContainer']"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200
    except OSError:
        return False


def start_server(timeout_s: float = 90) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if healthy(url):
            return proc, url
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("streamlit did not start")


async def settle(page) -> None:
    await page.wait_for_timeout(300)
    await page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)


NAV_LINK = "[data-testid='stTopNavLink'], [data-testid='stTopNavDropdownLink']"  # app.py's navigation along the top


async def open_link(page, name: str) -> None:
    """Click the page's link by its text, opening the top navigation's menus until it shows."""
    link = page.locator(NAV_LINK, has_text=name).first
    sections = page.locator("[data-testid='stTopNavSection']")
    for i in range(await sections.count()):
        if await link.is_visible():
            break
        await sections.nth(i).click()
    await link.click()


async def session(
    browser,
    url: str,
    model: str,
    rounds: int,
    latencies: list,
    problems: list,
    ready: asyncio.Event,
    all_uploaded: asyncio.Barrier,
) -> None:
    page = await browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(120_000)
    graph_name = GRAPH_NAMES.get(model, model)
    try:
        t = time.perf_counter()
        await page.goto(url)
        await page.get_by_text("Verdict.").wait_for()
        await settle(page)
        latencies.append(("open", time.perf_counter() - t))
        t = time.perf_counter()
        await page.locator("[data-testid='stSidebar'] input[type='file']").first.set_input_files(
            str(LIGHT_DIR / f"light_{model}.onnx")
        )
        await page.locator(CAPTION, has_text=f"{graph_name} (").first.wait_for()
        await settle(page)
        latencies.append(("upload+map", time.perf_counter() - t))
        await all_uploaded.wait()  # every session has its own upload in place: now look for leaks
        for r in range(rounds):
            name = PAGES[r % len(PAGES)]
            t = time.perf_counter()
            await open_link(page, name)
            await page.get_by_role("heading", name=name, level=1).wait_for()
            await settle(page)
            latencies.append(("page", time.perf_counter() - t))
            caption = await page.locator(CAPTION).first.inner_text()
            if not caption.startswith(f"{graph_name} ("):
                problems.append(f"session {model} on {name} shows {caption[:80]!r}")
            if await page.locator("[data-testid='stException']").count():
                problems.append(f"session {model} on {name}: an exception box")
    except Exception as exc:  # noqa: BLE001 - a failed session is a finding of the load test, reported below
        problems.append(f"session {model}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        if not all_uploaded.broken:
            await all_uploaded.abort()
    finally:
        await page.close()


async def drive(url: str, sessions: int, rounds: int, deadline_s: float) -> tuple[list, list]:
    from playwright.async_api import async_playwright

    latencies: list = []
    problems: list = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        barrier = asyncio.Barrier(sessions)
        tasks = [
            session(browser, url, MODELS[i % len(MODELS)], rounds, latencies, problems, asyncio.Event(), barrier)
            for i in range(sessions)
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=deadline_s)
        except TimeoutError:
            problems.append(f"deadline of {deadline_s:.0f} s reached")
        await browser.close()
    return latencies, problems


def run(sessions: int, rounds: int, deadline_s: float) -> dict:
    proc, url = start_server()
    try:
        t = time.perf_counter()
        latencies, problems = asyncio.run(drive(url, sessions, rounds, deadline_s))
        wall = time.perf_counter() - t
        up = healthy(url) and proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    figures = {
        "sessions": sessions,
        "rounds": rounds,
        "actions": len(latencies),
        "wall_s": wall,
        "server_up": up,
        "problems": problems,
    }
    for kind in ("open", "upload+map", "page", "all"):
        xs = np.array([s for k, s in latencies if kind in (k, "all")])
        if len(xs):
            figures[kind] = {q: float(np.percentile(xs, p)) for q, p in (("p50", 50), ("p95", 95), ("max", 100))}
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=4, help="page visits per session after its upload")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds for the whole run")
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} missing: run scripts/install_browser.sh")
    f = run(max(1, min(args.sessions, 32)), max(0, min(args.rounds, 50)), args.deadline)
    print(
        f"{f['sessions']} concurrent sessions x {f['rounds']} page visits, {f['actions']} timed actions"
        f" in {f['wall_s']:.1f} s; server up after: {f['server_up']}"
    )
    for kind in ("open", "upload+map", "page", "all"):
        if kind in f:
            print(f"  {kind:11s} p50 {f[kind]['p50']:.2f} s  p95 {f[kind]['p95']:.2f} s  max {f[kind]['max']:.2f} s")
    print(f"  cross-session leaks / errors: {len(f['problems'])}")
    for p in f["problems"]:
        print("   ", p)


if __name__ == "__main__":
    main()
