"""Numbers formatted for people on every page (issue 17 item 8): the dashboard visited for two models, as a
person reads it (AppTest), with every rendered text, metric, dataframe cell and column header scanned for the
forms a review meeting should never see: 8.35e+03 ms, 17,386.82 mJ, 1269.0 us, raw seconds, snake_case keys."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import PAGES
from tests.people_units import HASH_AFTER
from tests.test_app import assert_clean, start

# (what it is, the pattern) over every text a person reads: prose, metrics, table cells and headers
TEXT_PATTERNS = (
    ("scientific notation", re.compile(r"\d(\.\d+)?e[+-]?\d+\b")),
    ("a crowded figure", re.compile(r"\d,\d{3}\.\d{2,}\s*(mJ|J|ms|s|µs|us)\b")),  # 17,386.82 mJ
    ("a figure in too small a unit", re.compile(r"\b(\d{4,}|\d{1,3}(,\d{3})+)(\.\d+)?\s*(ns|us|µs|ms|mJ|µJ)\b")),
    ("microseconds as 'us'", re.compile(r"\d\s*us\b")),
    ("raw seconds", re.compile(r"\b0\.\d+\s*s\b")),  # 0.000506 s: a sub-second time left in seconds
)
PROSE_KEY = re.compile(r"\b[a-z0-9]+(_[a-z0-9]+)*_(s|bytes|per_s|fraction|w|j|mfu|watt)\b")  # p99_latency_s in prose
HEADER_KEY = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")  # a column named by its key: plan_kept, measured_s


def texts(at) -> list[tuple[str, str]]:
    """(where, text) for everything the page and the sidebar render as text."""
    out = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "success", "info", "warning", "error"):
        out += [(kind, str(e.value)) for e in getattr(at, kind)]
    for m in at.metric:
        out += [("metric", f"{m.label}: {m.value} ({m.delta or ''})")]
    return out


def table_cells(at) -> list[tuple[str, str]]:
    """(header, cell) of every string cell of every dataframe and table on the page."""
    out = []
    for frame in [d.value for d in at.dataframe] + [t.value for t in at.table]:
        frame = getattr(frame, "data", frame)  # a Styler's frame
        for column in frame.columns:
            if column != "source":  # a profile value's citation, quoted as its datasheet or paper writes it
                out += [(str(column), v) for v in frame[column] if isinstance(v, str)]
    return out


def headers(at) -> list[str]:
    """Every column header as the page shows it: a column_config label where the page gives one."""
    out = []
    for d in at.dataframe:
        labels = json.loads(d.proto.columns or "{}")
        frame = getattr(d.value, "data", d.value)
        out += [str(labels.get(str(c), {}).get("label") or c) for c in frame.columns]
    for t in at.table:
        out += [str(c) for c in t.value.columns]
    return out


def findings(at, page: str) -> list[str]:
    found = []
    for where, text in texts(at) + table_cells(at):
        read = HASH_AFTER.sub("#", text)  # a hash prefix's hex digits, whatever they spell ("sha 314e28e3f4e5")
        found += [f"{page} {where}: {what} in {text[:120]!r}" for what, p in TEXT_PATTERNS if p.search(read)]
    for where, text in texts(at):
        if (key := PROSE_KEY.search(text.replace("\\_", "_"))) and "`" not in text:
            found.append(f"{page} {where}: the key {key.group(0)!r} in {text[:120]!r}")
    found += [f"{page}: column header {h!r}" for h in headers(at) if HEADER_KEY.match(h)]
    return found


def run_compare(at) -> None:
    """Compare's default question (fusion none against aggressive) on one slice, as a person presses it."""
    at.multiselect(key="compare_batches").set_value([1]).run()
    if any(m.key == "compare_seqs" for m in at.multiselect):  # a model with a seq dim
        at.multiselect(key="compare_seqs").set_value([128]).run()
    next(b for b in at.button if b.label == "Compare").click().run()


@pytest.mark.slow
@pytest.mark.parametrize(
    "query", [{"model": "resnet50"}, {"model": "gpt2-small", "tp": 2}], ids=["resnet50", "gpt2-tp2"]
)
def test_every_page_formats_numbers_for_people(query):
    at = start(**query)
    found = []
    for page in PAGES:
        at.switch_page(f"app_pages/{page}.py").run()
        if page == "compare":
            run_compare(at)
        assert_clean(at, page)
        found += findings(at, page)
    assert not found, "\n".join(found)
