"""The one writer of tables to spreadsheets and CSV: every .xlsx and .csv the engine writes
(the mapping sheet, `mapper compare`, `mapper sweep`, the dashboard's downloads) goes through here.

Names in a table come from the model (node, graph and file names), so a cell can hold anything.
A spreadsheet runs a cell that starts with = + - @ (or a tab / CR before one) as a formula
(`=HYPERLINK(...)`, DDE `=cmd|' /C calc'!A0`). Following OWASP's CSV-injection advice, such a
string is written with a leading single quote, which spreadsheets show as text; numbers are never
touched, so a negative number stays a number. Control characters, which openpyxl refuses
(IllegalCharacterError) and a terminal runs as escapes, become U+FFFD.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from mapper.core.errors import MapperError, path_text

if TYPE_CHECKING:
    import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")  # ＝＋－＠ too
# The C0 controls but tab, LF and CR (openpyxl's own ILLEGAL_CHARACTERS_RE), DEL and the C1 controls.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def safe_cell(value):
    """A cell value a spreadsheet shows as written: strings quoted when they would run, controls replaced."""
    if not isinstance(value, str):
        return value
    value = CONTROL_CHARACTERS.sub(REPLACEMENT, value)
    return "'" + value if value.startswith(FORMULA_START) else value


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every string cell, and every column name, through safe_cell."""
    import pandas as pd  # lazy: `import mapper` and the CLI's --help start without pandas

    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = out[column].map(safe_cell)
    out.columns = [safe_cell(c) if isinstance(c, str) else c for c in out.columns]
    return out


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """One table as CSV, formulas neutralised. Lines end in CRLF (RFC 4180), which also makes the
    writer quote a field holding a bare CR: unquoted, a spreadsheet starts a new row there, and
    "name\r=1" would put a live =1 in the next one."""
    return safe_frame(frame).to_csv(index=False, lineterminator="\r\n").encode()


SheetHook = Callable[[object, "pd.DataFrame"], None]


def xlsx_bytes(frames: dict[str, pd.DataFrame], hook: SheetHook | None = None) -> bytes:
    """Sheet name -> frame as one workbook, formulas neutralised; `hook(worksheet, frame)` styles a
    sheet (freeze panes, widths, fills) after it is written."""
    import pandas as pd  # lazy: `import mapper` and the CLI's --help start without pandas

    buffer = io.BytesIO()
    used: set[str] = set()
    with pd.ExcelWriter(buffer, engine="openpyxl") as writer:
        for name, frame in frames.items():
            sheet = sheet_name(name, used)
            frame.pipe(safe_frame).to_excel(writer, sheet_name=sheet, index=False)
            ws = writer.sheets[sheet]
            for row in ws.iter_rows():
                for cell in row:
                    if cell.data_type == "f":  # belt and braces: nothing written here is a formula
                        cell.data_type = "s"
            if hook is not None:
                hook(ws, frame)
    return buffer.getvalue()


def sheet_name(name: str, used: set[str]) -> str:
    """Excel allows 31 characters and none of []:*?/\\ in a sheet name, unique ignoring case."""
    base = CONTROL_CHARACTERS.sub("-", re.sub(r"[\[\]:*?/\\]", "-", name))[:31] or "Sheet"
    candidate, i = base, 2
    while candidate.lower() in used:
        candidate = f"{base[:28]} {i}"
        i += 1
    used.add(candidate.lower())
    return candidate


def write_bytes(path: str | os.PathLike, data: bytes, what: str) -> None:
    """Write a finished file; a path the system refuses (too long, no such folder) is one MapperError."""
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise MapperError(f"cannot write {what} to {path_text(path)}: {exc.strerror or exc}") from None
