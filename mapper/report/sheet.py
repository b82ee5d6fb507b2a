"""The mapping sheet, the last stage: a result -> DataFrames -> .xlsx, .csv, .json or .html.

Every frame is built from the mapping document (`mapper.report.document`), so the sheet,
`--json` and the dashboard show the same numbers. Numbers stay numbers (SI
units in the column names); display formatting happens only in the HTML.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from mapper.core.errors import MapperError
from mapper.core.result import MappingResult
from mapper.report import tables
from mapper.report.document import mapping_document, streamed_document
from mapper.report.groups import group_kernels
from mapper.report.html import render_html
from mapper.report.json_text import json_bytes
from mapper.report.summary import review_frame, summary_frame
from mapper.report.verdict import verdict_sentence

FORMATS = ("xlsx", "csv", "json", "html")
# Sections of the document that have their own sheet; any other key is an extra section (serving...).
CORE_KEYS = {
    "reproduce",
    "model",
    "hardware",
    "options",
    "engine_version",
    "created_utc",
    "totals",
    "layer_types",
    "kernels",
    "nodes",
    "unmodeled",
    "caveats",
    "assumptions",
    "assessment",  # the Review tab, in people's words (report.summary.review_frame); JSON keeps the section
}

# Kernel record fields that are numbers (None -> NaN); the others are text or flags.
KERNEL_NUMERIC = (
    "stages",
    "split_k",
    "tiles",
    "waves",
    "wave_efficiency",
    "padding_efficiency",
    "sram_bytes",
    "block_size",
    "query_heads_per_kv",
    "passes",
    "grid_syncs",
    "flops",
    "matrix_flops",
    "dram_bytes",
    "l2_bytes",
    "weight_bytes",
    "time_s",
    "start_s",
    "compute_time_s",
    "memory_time_s",
    "overhead_s",
    "sync_s",
    "intensity_flop_per_byte",
    "achieved_flops_per_s",
    "stall_fraction",
    "energy_j",
    "avg_power_w",
    "roofline_time_s",
    "speedup_if_removed",
)
# Number formats a person reads in Excel (the cells stay numbers): shares as percent, counts with
# thousands separators, times in seconds to the nanosecond, ratios to two decimals.
PERCENT_COLUMNS = {"share", "stall_fraction", "wave_efficiency", "padding_efficiency", "mfu"}
COUNT_COLUMNS = {"flops", "matrix_flops", "dram_bytes", "l2_bytes", "weight_bytes", "sram_bytes", "tiles"}
COLUMN_FORMATS = (
    (lambda c: c in PERCENT_COLUMNS, "0.0%"),
    (lambda c: c in COUNT_COLUMNS, "#,##0"),
    (lambda c: c.endswith("_s"), "0.000000000"),
    (lambda c: c == "speedup_if_removed", '0.00"x"'),
)


def _alternatives_text(alternatives: list[dict]) -> str:
    """The runner-up tiles, short enough for one cell: '128x128x64 split-k 1, 2 waves at 88%, 12.3 us; ...'."""
    return "; ".join(
        f"{a['tile']} split-k {a['split_k']}, {a['waves']} waves at {a['wave_efficiency']:.0%},"
        f" {a['time_s'] * 1e6:.1f} us"
        for a in alternatives
    )


def kernels_frame(doc: dict) -> pd.DataFrame:
    latency = doc["totals"]["latency_s"] or 1.0
    rows = [
        {
            **k,
            "ops": " ".join(k["ops"]),
            "nodes": " ".join(k["nodes"]),
            "share": k["time_s"] / latency,
            "alternatives": _alternatives_text(k["alternatives"]),
        }
        for k in doc["kernels"]
    ]
    columns = [
        "name",
        "layer_type",
        "engine",
        "rule",
        "ops",
        "dtype",
        "layout",
        "tile",
        "bottleneck",
        "share",
        *KERNEL_NUMERIC,
        "throttled",
        "evidence",
        "owner",
        "alternatives",
        "note",
        "nodes",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    for col in KERNEL_NUMERIC:
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["share"] = frame["share"].astype(float)
    frame["throttled"] = frame["throttled"].astype(bool)
    return frame


def _number_or_text(value):
    """Assumption values arrive as text; a number reads back as a number."""
    if isinstance(value, str):
        try:
            return int(value) if re.fullmatch(r"[+-]?\d+", value.strip()) else float(value)
        except ValueError:
            return value
    return value


def provenance_frame(doc: dict) -> pd.DataFrame:
    rows = [
        ("model.name", doc["model"]["name"]),
        ("model.sha256", doc["model"]["sha256"]),
        ("model.nodes", doc["model"].get("nodes")),
        ("hardware.name", doc["hardware"]["name"]),
        ("hardware.sha256", doc["hardware"]["sha256"]),
        ("engine_version", doc["engine_version"]),
        ("created_utc", doc["created_utc"]),
        ("reproduce", doc.get("reproduce", "")),  # the command line that maps this slice again
    ]
    rows += [(f"option.{k}", "" if v is None else v) for k, v in doc["options"].items()]
    rows += [(f"dim.{k}", v) for k, v in doc["model"].get("dims", {}).items()]
    return pd.DataFrame(rows, columns=["name", "value"])


def _cell(value):
    return json.dumps(value) if isinstance(value, (dict, list, tuple)) else value


def _flatten(prefix: str, value, rows: list, tables: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, rows, tables)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        tables[prefix] = value
    else:
        rows.append((prefix, _cell(value)))


def section_frames(key: str, value) -> dict[str, pd.DataFrame]:
    """Any extra document section as frames: a dict -> name/value rows (nested lists of records get their
    own sheet), a list of records -> a table, a list of scalars -> one column."""
    title = key.replace("_", " ").capitalize()
    if isinstance(value, list):
        if all(isinstance(v, dict) for v in value):
            return {title: pd.DataFrame([{c: _cell(x) for c, x in v.items()} for v in value])}
        return {title: pd.DataFrame({"value": [_cell(v) for v in value]})}
    rows: list = []
    tables: dict = {}
    _flatten("" if isinstance(value, dict) else key, value, rows, tables)
    frames = {title: pd.DataFrame(rows, columns=["name", "value"])} if rows or not tables else {}
    for sub, records in tables.items():
        frames[f"{title} {sub}"] = pd.DataFrame([{c: _cell(x) for c, x in v.items()} for v in records])
    return frames


def kernel_groups_frame(doc: dict) -> pd.DataFrame:
    """Repeated layers as one row ("model.layers.*.mlp.up_proj x 32"), their count, total time and share."""
    rows = [{**g, "ops": " ".join(g["ops"])} for g in group_kernels(doc["kernels"], doc["totals"]["latency_s"])]
    columns = ["kernel", "count", "time_s", "share", "ops", "bottleneck", "evidence", "owner", "first"]
    return pd.DataFrame(rows, columns=columns).rename(columns={"first": "first_kernel"})


def frames_from_document(doc: dict) -> dict[str, pd.DataFrame]:
    """Sheet name -> frame, for a mapping document (the dashboard may hold only the document)."""
    kernels = kernels_frame(doc)
    frames = {
        "Summary": summary_frame(doc),
        **({"Review": review_frame(doc)} if doc.get("assessment") else {}),
        "Kernels": kernels,
        "Kernel groups": kernel_groups_frame(doc),
        "Layer types": pd.DataFrame(
            doc["layer_types"], columns=["layer_type", "kernels", "time_s", "share", "flops", "mfu", "stall_fraction"]
        ),
        "Fusion plan": kernels[["name", "rule", "ops", "nodes", "engine", "layout", "note"]].rename(
            columns={"name": "kernel"}
        ),
        "Assumptions": pd.DataFrame(
            [{**a, "value": _number_or_text(a["value"])} for a in doc["assumptions"]],
            columns=["name", "value", "source"],
        ),
        "Provenance": provenance_frame(doc),
        "Unmodeled": pd.DataFrame(doc["unmodeled"], columns=["name", "op_type", "reason"]),
    }
    for key, value in doc.items():
        if key not in CORE_KEYS:
            for name, frame in section_frames(key, value).items():
                frames[name if name not in frames else f"{name} (extra)"] = frame
    return frames


def sheet_frames(result: MappingResult) -> dict[str, pd.DataFrame]:
    """Sheet name -> frame: Summary, Kernels, Layer types, Fusion plan, Assumptions, Provenance, Unmodeled, extras."""
    return frames_from_document(mapping_document(result))


def _column_width(frame: pd.DataFrame, column: str) -> float:
    sample = frame[column].head(200)
    longest = max((len(str(v)) if isinstance(v, str) else 12 for v in sample), default=0)
    return min(60, max(len(str(column)), longest, 8) + 2)


def _style_sheet(ws, frame: pd.DataFrame) -> None:
    """Header frozen, a filter over the table, columns as wide as their text; a people's tab (one with a "format"
    column: the Summary) shows each value through its row's number format, the format column itself hidden."""
    ws.freeze_panes = "A2"
    if len(frame.columns) and len(frame):
        ws.auto_filter.ref = ws.dimensions
    for i, column in enumerate(frame.columns, 1):
        letter = ws.cell(row=1, column=i).column_letter
        ws.column_dimensions[letter].width = _column_width(frame, column)
        fmt = next((f for matches, f in COLUMN_FORMATS if matches(str(column))), None)
        if fmt is not None:
            for (cell,) in ws.iter_rows(min_row=2, min_col=i, max_col=i):
                cell.number_format = fmt
    if "format" in frame.columns and "value" in frame.columns:
        value_at = list(frame.columns).index("value") + 1
        for row, fmt in enumerate(frame["format"], 2):
            ws.cell(row=row, column=value_at).number_format = fmt
        ws.column_dimensions[ws.cell(row=1, column=list(frame.columns).index("format") + 1).column_letter].hidden = True


def xlsx_bytes(frames: dict[str, pd.DataFrame]) -> bytes:
    """The workbook, through the one table writer (mapper.report.tables: no formula, no control character)."""
    return tables.xlsx_bytes(frames, _style_sheet)


def _check_format(fmt: str, what: str) -> str:
    fmt = fmt.lower().lstrip(".")
    if fmt not in FORMATS:
        raise MapperError(f"cannot write a mapping sheet as {what!r}: use .xlsx, .csv, .json or .html")
    return fmt


def sheet_bytes(result: MappingResult, fmt: str) -> bytes:
    """The sheet in one format (xlsx | csv | json | html), e.g. for a download button."""
    fmt = _check_format(fmt, fmt)
    if fmt == "json":  # written as it is read: the rows are never all held as records
        return json_bytes(streamed_document(result))
    doc = mapping_document(result)
    frames = frames_from_document(doc)
    if fmt == "csv":
        return tables.csv_bytes(frames["Kernels"])
    if fmt == "xlsx":
        return xlsx_bytes(frames)
    return render_html(doc, frames, verdict_sentence(doc)).encode()


def write_sheet(result: MappingResult, path: str | os.PathLike) -> Path:
    """Write the sheet in the format the suffix names (.xlsx .csv .json .html); returns the path."""
    path = Path(path)
    fmt = _check_format(path.suffix, path.suffix or path.name)
    tables.write_bytes(path, sheet_bytes(result, fmt), "the mapping sheet")
    return path
