"""People's units everywhere (issue 32): every page and chart, the CLI's text views and the XLSX sheet's people
tabs, read as a person reads them, fail on 4.99e+03, a raw byte count, None, a Python repr, a snake_case label,
a time axis running to 120,000 µs and a log axis stretched to 10^32 (tests/people_units.py says how)."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import replace

import openpyxl
import pytest
from streamlit.testing.v1 import AppTest

from app_pages import session
from mapper.cli.main import main
from tests.conftest import APP
from tests.people_units import (
    app_findings,
    assert_people_label,
    assert_people_lines,
    assert_people_text,
    figure_findings,
    label_findings,
    text_findings,
)

TIMEOUT = 300  # two shared cores: a sweep of a decoder at long sequences takes a while
# (model, its slice): a CNN whose batch is a few ms, and a decoder whose batch runs past 100 ms
SLICES = {"resnet50-b64": {"model": "resnet50", "batch": 64}, "llama2-7b": {"model": "llama2-7b", "dtype": "bf16"}}
OWN_PAGES = ("layers", "roofline", "timeline", "power", "devices", "hardware", "validation", "trends", "export")
OTHER_PAGES = ("overview", "review", "serving", "kernels")


def start(**query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({k: str(v) for k, v in query.items()})
    return at.run()


def page_findings(at: AppTest, page: str, where: str) -> list[str]:
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, f"{where}: {[e.value for e in at.exception]}"
    return app_findings(at, where)


@pytest.fixture(scope="module", params=list(SLICES))
def slice_app(request):
    return request.param, start(**SLICES[request.param])


@pytest.mark.parametrize("page", OWN_PAGES)
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_page_shows_peoples_units(slice_app, page):
    name, at = slice_app
    found = page_findings(at, page, f"{page} ({name})")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("page", OTHER_PAGES)
def test_rewritten_page_shows_peoples_units(slice_app, page):
    name, at = slice_app
    found = page_findings(at, page, f"{page} ({name})")
    assert not found, "\n".join(found)


@pytest.mark.slow
@pytest.mark.parametrize(
    "query", [{"model": "llama2-7b", "dtype": "bf16", "seq": 1, "past": 1024}, {"model": "resnet50"}]
)
def test_each_review_step_reads_in_units(query):
    """The Review page's five steps after a run (issue 32 saw 7.04e+04, 2148532224.0, None and ['Transpose'])."""
    at = start(**query, page="review")
    next(b for b in at.button if b.label == "Run review").click().run()
    assert not at.exception, [e.value for e in at.exception]
    found = []
    for step in at.radio(key="review_step").options:
        at.radio(key="review_step").set_value(step).run()
        found += app_findings(at, f"review {query['model']} step {step!r}")
    assert not found, "\n".join(found)


def test_sweep_heatmaps_and_tables_read_in_units():
    """A decoder's fp32 sweep out to a batch of 128 at 4,096 tokens: its slowest slice takes seconds (the heatmap
    said 4.99e+03 ms), its table's keys are words and its FLOPs, bytes and seconds carry their units."""
    at = start(model="gpt2-small", page="sweep")
    at.multiselect(key="sweep_batches").set_value([1, 128]).run()
    at.multiselect(key="sweep_seqs").set_value([128, 4096]).run()
    at.multiselect(key="sweep_dtypes").set_value(["fp32"]).run()
    at.multiselect(key="sweep_fusions").set_value(["aggressive"]).run()
    at.button[0].click().run()
    assert not at.exception and len(at.get("plotly_chart")) == 3
    found = app_findings(at, "sweep")
    assert not found, "\n".join(found)
    latency = next(c for c in at.get("plotly_chart") if "Latency" in c.proto.spec)
    assert "Latency (s)" in latency.proto.spec  # the slowest slice sets the unit


def test_the_kernel_drilldown_reads_in_units():
    """The drill-down (app_pages/ui.py) of the longest tiled kernel: stages 2 and waves 9, not 2.00 and 9.00."""
    at = start(model="resnet50", batch=64, page="roofline")
    doc = at.session_state[session.KEY].doc
    kernel = max((k for k in doc["kernels"] if k["alternatives"]), key=lambda k: k["time_s"])
    at.session_state[session.KEY] = replace(at.session_state[session.KEY], picked_kernel=kernel["name"])
    at.run()
    tiling = next(t.value for t in at.table if "stages" in t.value.index)
    assert tiling.loc["stages", "value"] == f"{kernel['stages']}" and "." not in tiling.loc["waves", "value"]
    found = app_findings(at, "drill-down")
    assert not found, "\n".join(found)


def test_compare_reads_in_units():
    at = start(model="resnet50", page="compare")
    next(b for b in at.button if b.label == "Compare").click().run()
    assert not at.exception
    found = app_findings(at, "compare")
    assert not found, "\n".join(found)


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_devices_of_a_pipeline_read_in_units():
    """Two pipeline stages and tensor parallelism: stage times, collectives' messages and memory in units."""
    at = start(model="llama2-7b", dtype="bf16", tp=2, pp=2, page="devices")
    assert not at.exception
    found = app_findings(at, "devices tp2 pp2")
    assert not found, "\n".join(found)


def test_the_perf_per_watt_axis_stops_at_the_largest_batch():
    """The batch axis is log: the current batch's marker was an annotation at x=32, which plotly reads on a log
    axis as 10^32, so the axis ran to 10^32 and every point sat at its left edge."""
    at = start(model="resnet50", batch=32, page="power")
    chart = next(c for c in at.get("plotly_chart") if "Perf per watt" in c.proto.spec)
    spec = json.loads(chart.proto.spec)
    assert not figure_findings(spec, "perf per watt")
    assert not spec["layout"].get("annotations")
    assert any(s.get("x0") == 32 for s in spec["layout"]["shapes"])  # the line stands at batch 32 itself


# --- the checker itself: each pattern fails on what issue 32 saw, and passes people's units ------------------


@pytest.mark.parametrize(
    "text",
    ["4.99e+03 ms", "2148532224.0", "2,148,532,224 bytes", "None", "['Transpose']", "{'batch': 1}", "1,269.0 us"],
)
def test_the_checker_fails_what_people_should_not_read(text):
    assert text_findings(text, "seen"), text


@pytest.mark.parametrize(
    "text", ["4.99 s", "2.15 GB", "Transpose", "batch=1", "model sha 1234567890ab", "1,977 /s", "120 ms", "100,000"]
)
def test_the_checker_passes_peoples_units(text):
    assert_people_text(text, "fine")
    assert_people_label(text, "fine")


def test_the_checker_fails_a_key_as_a_label_and_an_absurd_axis():
    assert label_findings("perf_per_watt", "header") and not label_findings("perf per watt", "header")
    timeline = {"data": [{"type": "bar", "orientation": "h", "base": [119_000.0], "x": [1_000.0]}]}
    timeline["layout"] = {"xaxis": {"title": {"text": "time (µs)"}}}
    assert figure_findings(timeline, "timeline")
    stretched = {"data": [{"x": [1, 64], "y": [7.4, 9.6]}], "layout": {"xaxis": {"type": "log", "title": "batch"}}}
    stretched["layout"]["annotations"] = [{"x": 32, "xref": "x", "text": "batch 32"}]
    assert len(figure_findings(stretched, "power")) == 2  # unlabelled log, and stretched to 10^32


# --- the CLI's text views and the XLSX sheet's people tabs ---------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["map", "resnet50"],
        ["map", "llama2-7b", "--dtype", "bf16"],
        ["serve", "resnet50"],
        ["serve", "gpt2-small"],
        ["review", "resnet50"],
    ],
    ids=lambda a: " ".join(a),
)
def test_cli_text_reads_in_units(args, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `mapper review` writes its packet here
    assert main(args) == 0
    assert_people_lines(capsys.readouterr().out, f"mapper {' '.join(args)}")


def sheet_cells(book, tab: str) -> list[str]:
    """What a person reads in a tab: every text cell, header cells and names as labels, and every number
    shown through a number format (General shows 2148532224 or 7.04E+04)."""
    found = []
    for row in book[tab].iter_rows():
        for cell in row:
            where = f"{tab}!{cell.coordinate}"
            if isinstance(cell.value, str):
                section = book[tab].cell(row=cell.row, column=1).value
                named = section in ("top bottleneck", "candidate")  # a kernel's module path, a fix's own name
                check = label_findings if cell.row == 1 or (cell.column == 2 and not named) else text_findings
                found += check(cell.value, where)
            elif _raw_number(cell):
                found.append(f"{where}: {cell.value!r} in the General format (no unit, no people's form)")
    return found


def _raw_number(cell) -> bool:
    """A number too large or too small to read in Excel's General format (2148532224, 7.04E-05)."""
    number = isinstance(cell.value, int | float) and not isinstance(cell.value, bool) and cell.value
    return bool(number) and cell.number_format == "General" and not 1e-3 <= abs(cell.value) < 1e6


@pytest.mark.slow
def test_xlsx_summary_reads_in_units(tmp_path):
    out = tmp_path / "sheet.xlsx"
    assert main(["map", "llama2-7b", "--dtype", "bf16", "--out", str(out)]) == 0
    found = sheet_cells(openpyxl.load_workbook(out), "Summary")
    assert not found, "\n".join(found)


def test_xlsx_review_tab_reads_in_units(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["review", "resnet50", "--out", str(tmp_path / "packet.zip")]) == 0
    with zipfile.ZipFile(tmp_path / "packet.zip") as packet:
        books = [openpyxl.load_workbook(io.BytesIO(packet.read(n))) for n in packet.namelist() if n.endswith(".xlsx")]
    with_review = [b for b in books if "Review" in b.sheetnames]
    assert with_review, "no sheet in the packet has a Review tab"
    found = [f for b in with_review for tab in ("Summary", "Review") for f in sheet_cells(b, tab)]
    assert not found, "\n".join(found)
