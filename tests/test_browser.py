"""One real-browser pass over the dashboard: upload a real model through the file uploader, switch the
profile, open a kernel's drill-down, download the XLSX and read it back, screenshot every page.

Needs /usr/bin/chromium (scripts/install_browser.sh) and the playwright package; skipped otherwise.
Screenshots go to a tmp folder, and to $SCREENSHOT_DIR when it is set.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench.load_dashboard import ARGS, start_server  # one Chromium command line for the benches and tests

pytestmark = pytest.mark.slow  # a real browser (headless Chromium) per test, 7-22 s each

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
BERT_TINY = ROOT / "tests" / "models" / "hf_bert_tiny.onnx"
PAGES = [
    "Overview",
    "Layers",
    "Kernels",
    "Roofline",
    "Timeline",
    "Serving",
    "Power",
    "Devices",
    "Validation",
    "Sweep",
    "Compare",
    "Hardware",
    "Export",
]

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} missing: run scripts/install_browser.sh", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright package missing: pip install playwright")


@pytest.fixture(scope="module")
def server():
    """The dashboard's server, started as the load and render benches start it (one copy: bench/load_dashboard)."""
    proc, url = start_server()
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def page(server):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1600, "height": 1000}, accept_downloads=True)
        pg.set_default_timeout(60_000)
        pg.goto(server)
        yield pg
        browser.close()


def settle(page) -> None:
    """Wait until the script run finishes (the status widget's running indicator is gone)."""
    page.wait_for_timeout(400)
    page.wait_for_function(  # the run is over, and no element still waits for its content (a skeleton)
        '!document.querySelector(\'[data-testid="stStatusWidget"], [data-testid^="stSkeleton"]\')', timeout=60_000
    )
    page.wait_for_timeout(300)


def no_exception(page, where: str) -> None:
    boxes = page.locator("[data-testid='stException']")
    assert boxes.count() == 0, f"{where}: {boxes.first.inner_text()[:500]}"


NAV_LINK = "[data-testid='stTopNavLink'], [data-testid='stTopNavDropdownLink']"  # app.py's navigation along the top


def open_page(page, name: str) -> None:
    """Click the page's link by its text, opening the top navigation's menus (Analysis, ...) until it shows."""
    link = page.locator(NAV_LINK, has_text=name).first
    sections = page.locator("[data-testid='stTopNavSection']")
    for i in range(sections.count()):
        if link.is_visible():
            break
        sections.nth(i).click()
    link.click()
    page.get_by_role("heading", name=name, level=1).wait_for()
    settle(page)


def pick(page, index: int, option: str) -> None:
    """Choose an option in the sidebar's index-th selectbox."""
    box = page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").nth(index)
    box.scroll_into_view_if_needed()
    box.click()
    page.keyboard.type(option)
    page.keyboard.press("Enter")
    settle(page)


def shots() -> list[Path]:
    dirs = [Path(os.environ.get("PYTEST_TMP_SHOTS", "/tmp")) / f"mapper_shots_{os.getpid()}"]
    if os.environ.get("SCREENSHOT_DIR"):
        dirs.append(Path(os.environ["SCREENSHOT_DIR"]))
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def test_dashboard_in_a_real_browser(page, tmp_path):
    page.get_by_text("Verdict.").wait_for()
    settle(page)
    no_exception(page, "opening view")

    page.locator("[data-testid='stSidebar'] input[type='file']").first.set_input_files(str(BERT_TINY))
    page.locator("[data-testid='stSidebar']").get_by_label("seq").wait_for()  # its symbolic dims appear
    settle(page)
    assert "seq=128" in page.locator("[data-testid='stMain'] [data-testid='stCaptionContainer']").first.inner_text()

    pick(page, 1, "h200-sxm")
    page.locator("[data-testid='stMain'] [data-testid='stCaptionContainer']", has_text="on h200-sxm").first.wait_for()
    no_exception(page, "after upload and profile switch")

    open_page(page, "Kernels")
    grid = page.locator("[data-testid='stMain'] [data-testid='stDataFrame']").first
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)  # the first row's selection cell
    page.get_by_text("Tiling assumptions").wait_for()
    settle(page)
    no_exception(page, "drill-down")

    open_page(page, "Export")
    with page.expect_download() as info:
        page.get_by_role("button", name="Excel workbook (.xlsx)").click()
    xlsx = tmp_path / "sheet.xlsx"
    info.value.save_as(xlsx)
    sheets = pd.read_excel(xlsx, sheet_name=None)
    assert "Kernels" in sheets and len(sheets["Kernels"]) > 0

    dirs = shots()
    for name in PAGES:
        open_page(page, name)
        no_exception(page, name)
        path = tmp_path / f"{name.lower()}.png"
        page.screenshot(path=str(path), full_page=True)
        for d in dirs:
            shutil.copy(path, d / path.name)


SHARED_SCREEN = {"width": 1280, "height": 720}  # a shared screen in a review meeting


@pytest.fixture()
def screen(page):
    """A second tab of the module's browser (one playwright per process) at the shared screen's size."""
    pg = page.context.browser.new_page(viewport=SHARED_SCREEN)
    pg.set_default_timeout(120_000)
    yield pg
    pg.close()


def open_view(page, server: str, query: str) -> str:
    """A fresh session on a shared link; the Verdict's text once the page has settled."""
    page.goto(f"{server}/?{query}")
    page.get_by_text("Verdict.").wait_for()
    settle(page)
    no_exception(page, query)
    return page.locator(".st-key-verdict").inner_text()


def tile_value(page, label: str) -> str:
    tile = page.locator("[data-testid='stMetric']", has=page.get_by_text(label, exact=True)).first
    return tile.locator("[data-testid='stMetricValue']").inner_text()


def above_the_fold(page) -> None:
    """The Overview at 1280x720 in presentation mode: the verdict, the six KPI tiles and the table's header
    with its first rows inside the viewport, without scrolling; each tile's value on one line."""
    fold = SHARED_SCREEN["height"]
    main = "[data-testid='stMain'] "
    verdict = page.locator(".st-key-verdict").bounding_box()
    assert verdict["y"] + verdict["height"] <= fold, verdict
    metrics = page.locator(main + "[data-testid='stMetric']")
    assert metrics.count() == 6
    for i in range(6):
        box = metrics.nth(i).bounding_box()
        assert box["y"] + box["height"] <= fold, (i, box)
        value = metrics.nth(i).locator("[data-testid='stMetricValue']")
        line = float(value.evaluate("e => parseFloat(getComputedStyle(e).lineHeight) || e.offsetHeight"))
        assert value.bounding_box()["height"] < 1.6 * line, (i, value.inner_text())  # one line, not wrapped
    table = page.locator(main + "[data-testid='stDataFrame']").first.bounding_box()
    assert table["y"] + 3 * ROW_PX <= fold, table  # the header and two rows at least


ROW_PX = 35  # st.dataframe's row height


def sidebar_first(page) -> None:
    """The navigation runs along the top: the sidebar starts with the model, Export is a link of its own,
    and the profile editor's value column shows in the sidebar."""
    model = page.locator("[data-testid='stSidebar']").get_by_role("heading", name="Model").bounding_box()
    assert model["y"] < SHARED_SCREEN["height"] / 4, model
    assert page.locator("[data-testid='stTopNavLink']", has_text="Export").is_visible()
    page.locator("[data-testid='stSidebar']").get_by_text("Your own profile (upload or edit)").click()
    editor = page.locator("[data-testid='stSidebar'] [data-testid='stDataFrame']").first
    editor.scroll_into_view_if_needed()
    box, side = editor.bounding_box(), page.locator("[data-testid='stSidebar']").bounding_box()
    assert box["height"] > 3 * ROW_PX and box["x"] + box["width"] <= side["x"] + side["width"] + 1, (box, side)
    page.locator("[data-testid='stSidebar']").get_by_text("Your own profile (upload or edit)").click()


def test_review_agenda_at_a_shared_screen(screen, server):
    """The review meeting's agenda (issue 17) as a person reads it at 1280x720: Llama-2-70B on one H100 fails
    capacity first and names the smallest tensor-parallel degree that fits; ResNet-50's percentiles are the
    assessment's at the given rate, dynamic batching up to the mapped batch; then every page in presentation mode,
    screenshotted above the fold."""
    verdict = open_view(screen, server, "model=llama2-70b&dtype=bf16")
    assert "does not fit: short by" in verdict and "smallest fit TP 2" in verdict, verdict
    assert "First failure: capacity; owner: runtime systems engineer" in verdict
    assert "(unreachable)" in screen.locator("[data-testid='stMain']").inner_text()

    percentiles = {}
    for batch in (1, 256):
        open_view(screen, server, f"model=resnet50&batch={batch}&rate_per_s=500")
        percentiles[batch] = tile_value(screen, "request latency p99")
        assert "500 req/s, given" in screen.locator("[data-testid='stMain']").inner_text()
    assert percentiles[1] != percentiles[256], percentiles

    screen.get_by_text("Presentation mode").click()
    settle(screen)
    above_the_fold(screen)
    sidebar_first(screen)
    dirs = shots()
    for name in PAGES:
        open_page(screen, name)
        no_exception(screen, f"presentation / {name}")
        for d in dirs:
            screen.screenshot(path=str(d / f"{name.lower()}.png"))


def test_compare_and_a_pasted_link_in_a_real_browser(screen, server):
    """The agenda's other two cases as a person meets them (issue 17): bf16 against fp8 on BERT-base in
    Compare reads 'improved' with the precision caveat; a pasted link with TP 8 and int4 weights opens with
    both in the sidebar and in the page's reproduce command."""
    open_view(screen, server, "model=llama2-70b&dtype=bf16&tp=8&weight_dtype=int4")
    sidebar = screen.locator("[data-testid='stSidebar']")
    assert sidebar.get_by_label("TP", exact=True).input_value() == "8"
    main = screen.locator("[data-testid='stMain']").inner_text()
    assert "--tp 8" in main and "--weight-dtype int4" in main, main[:2000]  # the numbers shown are of this plan

    open_view(screen, server, "model=bert-base&dtype=bf16")
    open_page(screen, "Compare")
    differs = screen.locator("[data-testid='stMain'] [data-testid='stSelectbox']").first
    differs.click()
    screen.keyboard.type("dtype")
    screen.keyboard.press("Enter")
    settle(screen)
    screen.get_by_role("button", name="Compare").click()
    screen.get_by_text("Quality caveat:").first.wait_for()
    settle(screen)
    no_exception(screen, "compare bf16 -> fp8")
    text = screen.locator("[data-testid='stMain']").inner_text()
    assert "improved: adopt the candidate" in text, text[:2000]
    assert "Fallback:" in text


SEARCH_VIEW = "model=gpt2-small&tpot_p99_ms=50&ttft_p99_ms=500&prompt_tokens=128&output_tokens=16"


def test_search_page_in_a_real_browser(screen, server, tmp_path):
    """The Search page on a small case (GPT-2 on two H100s, a few configurations): the frontier chart with its
    chosen point and the table render; a click on a point opens its plan in the Overview."""
    screen.set_viewport_size({"width": 1600, "height": 1000})
    screen.goto(f"{server}/search?{SEARCH_VIEW}")
    screen.get_by_role("heading", name="Search", level=1).wait_for()
    settle(screen)
    screen.get_by_role("button", name="Search", exact=True).click()
    screen.get_by_text("Chosen:").wait_for()
    settle(screen)
    no_exception(screen, "search")
    chart = screen.locator("[data-testid='stMain'] .js-plotly-plot").first
    chart.wait_for()
    assert "tokens/s per user" in chart.inner_text() and "chosen" in chart.inner_text()
    assert chart.locator(".scatterlayer .trace").first.locator(".points path").count() >= 2
    assert screen.locator("[data-testid='stMain'] [data-testid='stDataFrame']").count() >= 1
    shot = tmp_path / "search.png"
    screen.screenshot(path=str(shot), full_page=True)
    for d in shots():
        shutil.copy(shot, d / shot.name)
    chart.scroll_into_view_if_needed()
    point = chart.locator(".scatterlayer .trace").first.locator(".points path").first
    box = point.bounding_box()
    screen.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    screen.get_by_text("Picked:").wait_for()
    settle(screen)
    picked = screen.locator(
        "[data-testid='stMain'] [data-testid='stMarkdownContainer']", has_text="Picked:"
    ).inner_text()
    screen.get_by_role("button", name="Open in Overview").click()
    screen.get_by_text("Verdict.").wait_for()
    settle(screen)
    no_exception(screen, "search -> overview")
    tp = picked.split("TP ")[1].split(" ")[0]
    assert screen.locator("[data-testid='stSidebar']").get_by_label("TP", exact=True).input_value() == tp
