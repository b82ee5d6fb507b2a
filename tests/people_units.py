"""People's units, checked (issue 32): what a person reads on a page, a chart, the CLI's text or a sheet never
shows scientific notation, a raw byte count, the text None, a Python repr or, in a header or label, a
snake_case key. Data tabs, CSV and JSON keep their unit-suffixed keys and numbers: check only what people read.

    from tests.people_units import assert_people_text, assert_people_label
    assert_people_text(text, "mapper map resnet50")

`app_findings(at, where)` scans a streamlit AppTest's main area: its prose, metrics, tables and charts.
"""

from __future__ import annotations

import base64
import json
import math
import re

import numpy as np

# (what it is, the pattern) over any text a person reads
TEXT_PATTERNS = (
    ("scientific notation", re.compile(r"\d(\.\d+)?[eE][+-]\d+\b")),
    (
        "a raw count without a unit",
        re.compile(r"(?<![\w.,])\d{1,3}(,\d{3}){2,}(\.0+)?\s*(B|bytes)?(?![\w,]|\s*[A-Za-zµ%/])"),
    ),
    ("a raw count without a unit", re.compile(r"(?<![\w.,])\d{7,}(\.0+)?\s*(B|bytes)?(?![\w,.]|\s*[A-Za-zµ%/])")),
    ("a raw count without a unit", re.compile(r"(?<![\w.,])(\d{7,}|\d{1,3}(,\d{3}){2,})(\.0+)?\s*(B|bytes)\b")),
    ("the text None", re.compile(r"\bNone\b")),
    ("a Python repr", re.compile(r"[\[{(]'")),
    ("microseconds as 'us'", re.compile(r"(\d\s*us\b|\(us\))")),
)
SNAKE_CASE = re.compile(r"(?<![\w.*/\\-])[a-z][a-z0-9]*(_[a-z0-9]+)+(?![\w.*/-])")  # plan_kept, time_s
HASH_AFTER = re.compile(r"\bsha(256)?\s+[0-9a-f]+|\b[0-9a-f]{12,}\b")  # a hash prefix is not a count


def text_findings(text: str, where: str) -> list[str]:
    """What a person should not read in `text` (markdown escapes dropped, hash prefixes skipped)."""
    plain = HASH_AFTER.sub("#", re.sub(r"\\(.)", r"\1", str(text)))
    return [f"{where}: {what} in {str(text)[:160]!r}" for what, pattern in TEXT_PATTERNS if pattern.search(plain)]


def label_findings(label: str, where: str) -> list[str]:
    """A header, axis title, metric or legend label: the text checks, and no snake_case key."""
    found = text_findings(label, where)
    key = SNAKE_CASE.search(re.sub(r"\\(.)", r"\1", str(label)))
    return found + ([f"{where}: the key {key.group(0)!r} in the label {str(label)[:120]!r}"] if key else [])


def assert_people_text(text: str, where: str) -> None:
    found = text_findings(text, where)
    assert not found, "\n".join(found)


def assert_people_label(label: str, where: str) -> None:
    found = label_findings(label, where)
    assert not found, "\n".join(found)


def assert_people_lines(text: str, where: str) -> None:
    """A whole text view (a CLI's output), line by line, so a failure names the line."""
    found = [f for i, line in enumerate(str(text).splitlines(), 1) for f in text_findings(line, f"{where}:{i}")]
    assert not found, "\n".join(found)


# --- a streamlit page (AppTest) --------------------------------------------------------------------------

PROSE = ("title", "header", "subheader", "markdown", "caption", "success", "info", "warning", "error", "text")
UNIT_IN_HEADER = re.compile(r"\(.+\)|%|/s|\bB\b|bytes|FLOP|\bW\b|\bJ\b|count|kernels|nodes|requests|tokens|batch|seq")


def app_findings(at, where: str) -> list[str]:
    """Everything the page's main area shows: prose, metrics, tables (headers, text cells, large numbers
    without a unit) and plotly charts (titles, axes, legends, cell text, number formats, axis ranges)."""
    main = at.main
    found = []
    for kind in PROSE:
        for e in getattr(main, kind):
            found += (label_findings if kind in ("title", "header", "subheader") else text_findings)(
                e.value, f"{where} {kind}"
            )
    for m in main.metric:
        found += label_findings(m.label, f"{where} metric label")
        found += text_findings(f"{m.value} {m.delta or ''}", f"{where} metric {m.label!r}")
    for d in main.dataframe:
        found += _frame_findings(d.value, json.loads(d.proto.columns or "{}"), f"{where} table")
    for t in main.table:
        found += _frame_findings(t.value, {}, f"{where} table")
    for chart in main.get("plotly_chart"):
        found += figure_findings(json.loads(chart.proto.spec), f"{where} chart")
    return found


def _frame_findings(frame, config: dict, where: str) -> list[str]:
    frame = getattr(frame, "data", frame)  # a Styler's frame
    found = []
    for column in frame.columns:
        shown = config.get(str(column), {}).get("label") or str(column)
        found += label_findings(shown, f"{where} header")
        if shown == "source":  # a profile value's citation, quoted as its datasheet or paper writes it
            continue
        values = frame[column].tolist()
        for v in values:  # the column's first bad cell: one line a column
            cell = text_findings(v, f"{where} cell of {shown!r}") if isinstance(v, str) else []
            if isinstance(v, list | tuple | dict):
                cell = [f"{where}: a Python {type(v).__name__} in a cell of {shown!r}: {v!r:.80}"]
            if cell:
                found += cell
                break
        numbers = [abs(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        numbers = [v for v in numbers if math.isfinite(v)]
        fmt = str(config.get(str(column), {}).get("type_config", {}).get("format", ""))
        if fmt in ("engineering", "scientific") or re.search(r"%[^a-z%]*[eEgG]", fmt):
            found.append(f"{where}: {shown!r} shown in the format {fmt!r}, which prints 3.35E12")
        formatted = bool(fmt)
        if numbers and max(numbers) >= 1e6 and not UNIT_IN_HEADER.search(shown) and not formatted:
            found.append(f"{where}: {max(numbers):.0f} under {shown!r}: a large number without a unit")
    return found


# --- a plotly figure (its JSON) --------------------------------------------------------------------------

SCIENTIFIC_D3 = re.compile(r"%\{[^}:]*:[^}]*[eg]\}")  # d3's g and e print 4.99e+3
TIME_TITLE = re.compile(r"\((ns|µs|ms)[,)]")
READABLE_MAX = 1000.0  # past this a time axis in ns, µs or ms reads in the next unit up


def figure_findings(spec: dict, where: str) -> list[str]:
    layout, data = spec.get("layout", {}), spec.get("data", [])
    title = _text(layout.get("title"))
    where = f"{where} {title[:60]!r}" if title else where
    found = label_findings(title, f"{where} title")
    for trace in data:
        if trace.get("name") and trace.get("showlegend", True) is not False:
            found += label_findings(trace["name"], f"{where} legend")
        for key in ("text", "hovertext"):
            cells = trace.get(key)
            cells = cells if isinstance(cells, list) else [cells]
            for cell in _flat(cells):
                if isinstance(cell, str):
                    found += text_findings(cell, f"{where} {key}")
        for key in ("hovertemplate", "texttemplate"):
            for template in _flat(trace.get(key) if isinstance(trace.get(key), list) else [trace.get(key)]):
                if isinstance(template, str) and SCIENTIFIC_D3.search(template):
                    found.append(f"{where}: a number format that prints e+ in {template[:100]!r}")
                if isinstance(template, str):
                    found += text_findings(re.sub(r"%\{[^}]*\}", "", template), f"{where} {key}")
    for name, axis in layout.items():
        if re.fullmatch(r"[xy]axis\d*", name):
            found += _axis_findings(name, axis, data, layout, where)
    return found


def _axis_findings(name: str, axis: dict, data: list, layout: dict, where: str) -> list[str]:
    label = _text(axis.get("title"))
    found = label_findings(label, f"{where} {name} title")
    letter, ref = name[0], name[0] + name[5:]  # xaxis2 -> x2
    values = [v for trace in data if trace.get(f"{letter}axis", letter) == ref for v in _trace_values(trace, letter)]
    values = [abs(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if TIME_TITLE.search(label) and values and max(values) >= READABLE_MAX:
        found.append(f"{where}: {name} {label!r} runs to {max(values):,.0f}: a larger unit reads better")
    if axis.get("type") == "log":
        if "log" not in label:
            found.append(f"{where}: {name} is a log axis whose title {label!r} does not say so")
        positive = [v for v in values if v > 0]
        top = math.log10(max(positive)) if positive else 0.0
        for note in layout.get("annotations", []):  # on a log axis an annotation's position is its log10
            at = note.get(letter)
            if note.get(f"{letter}ref") == ref and isinstance(at, int | float) and at > top + 1:
                found.append(f"{where}: an annotation at 10^{at:g} stretches the log {name} (data to 10^{top:.1f})")
    return found


def _trace_values(trace: dict, letter: str) -> list:
    values = list(_flat(trace.get(letter) if trace.get(letter) is not None else []))
    base = list(_flat(trace["base"])) if trace.get("base") is not None else None
    if letter == ("x" if trace.get("orientation") == "h" else "y") and base:
        values += [b + v for b, v in zip(base, values) if isinstance(b, int | float) and isinstance(v, int | float)]
    return values


def _flat(values):
    """Every scalar of a (nested) array; plotly writes numpy arrays as base64 ({"dtype", "bdata"})."""
    if isinstance(values, dict) and "bdata" in values:
        values = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    for v in values if isinstance(values, list | tuple) else [values]:
        if isinstance(v, list | tuple) or isinstance(v, dict) and "bdata" in v:
            yield from _flat(v)
        else:
            yield v


def _text(title) -> str:
    return str(title.get("text", "")) if isinstance(title, dict) else str(title or "")
