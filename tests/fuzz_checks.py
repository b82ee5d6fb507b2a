"""The extra checks `run_case` makes on attack cases (tests/fuzz_attacks.py): files opened, external
references left after stripping, live formulas and raw markup in the written sheets."""

from __future__ import annotations

import csv
import io
import os
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto

from tests.fuzz_attacks import HOSTILE


def all_tensors(m: onnx.ModelProto):
    """Every TensorProto in the model: initializers, sparse parts, attribute tensors, in every subgraph."""
    graphs = [m.graph]
    while graphs:
        g = graphs.pop()
        yield from g.initializer
        for s in g.sparse_initializer:
            yield from (s.values, s.indices)
        for n in g.node:
            for a in n.attribute:
                yield from ([a.t] if a.HasField("t") else [])
                yield from a.tensors
                for s in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                    yield from (s.values, s.indices)
                graphs += ([a.g] if a.HasField("g") else []) + list(a.graphs)


def external_references(m: onnx.ModelProto) -> list[str]:
    """Names of the tensors that still point at a file."""
    return [t.name for t in all_tensors(m) if t.data_location == TensorProto.EXTERNAL or len(t.external_data)]


_OPENED: list[list[str]] = []  # a stack: audit hooks cannot be removed, so one hook serves every case


def _audit(event, args):
    if (
        _OPENED
        and event in ("open", "os.listdir", "os.scandir", "shutil.copyfile")
        and args
        and isinstance(args[0], (str, bytes, os.PathLike))
    ):
        _OPENED[-1].append(os.fsdecode(args[0]))


def files_opened(fn) -> list[str]:
    """Paths opened while fn() runs, less the interpreter's own (lazy imports) and the profile data."""
    if not getattr(files_opened, "hooked", False):
        sys.addaudithook(_audit)
        files_opened.hooked = True
    _OPENED.append([])
    try:
        fn()
    finally:
        seen = _OPENED.pop()
    return [
        p
        for p in seen
        if not p.endswith((".py", ".pyc", ".so", ".pth"))
        and "site-packages" not in p
        and "__pycache__" not in p
        and not p.startswith((sys.prefix, sys.base_prefix))
    ]


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def live_formulas_in_csv(data: bytes) -> list[str]:
    """Cells a spreadsheet would run as a formula: a leading = + - @ tab or CR (numbers aside)."""
    rows = csv.reader(io.StringIO(data.decode("utf-8", "replace"), newline=""))
    return [c for row in rows for c in row if c.startswith(FORMULA_START) and not _is_number(c)]


def live_formulas_in_xlsx(data: bytes) -> list[str]:
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data))
    return [f"{ws.title}!{c.coordinate}" for ws in book for row in ws.iter_rows() for c in row if c.data_type == "f"]


def raw_markup_in_html(data: bytes, model: bytes) -> list[str]:
    """Hostile markup of HOSTILE that an upload carried and the HTML sheet passes through unescaped."""
    html = data.decode("utf-8", "replace")
    return [h for h in HOSTILE if h.startswith("<") and h.encode() in model and h in html]


def check_sheets(result, model: bytes) -> None:
    """Write the sheet as the CLI's --out does (.xlsx, .csv, .html): no live formula, no raw markup."""
    from mapper.report.sheet import write_sheet

    with tempfile.TemporaryDirectory() as tmp:
        found = {}
        for fmt, check in (
            ("xlsx", live_formulas_in_xlsx),
            ("csv", live_formulas_in_csv),
            ("html", lambda data: raw_markup_in_html(data, model)),
        ):
            path = write_sheet(result, Path(tmp) / f"sheet.{fmt}")
            found[fmt] = check(path.read_bytes())
    bad = {fmt: cells[:3] for fmt, cells in found.items() if cells}
    if bad:
        raise AssertionError(f"live formulas or markup written from model names: {bad}")


def check_no_external_reference(data: bytes) -> None:
    """The copy that ONNX Runtime is given (ort_shapes.without_external_data) names no file."""
    from mapper.model.ort_shapes import without_external_data

    m = onnx.ModelProto()
    m.ParseFromString(data)
    left = external_references(without_external_data(m))
    if left:
        raise AssertionError(f"external references left after stripping: {left[:3]}")
