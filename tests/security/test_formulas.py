"""Red team, issue 15 item 4: no formula in any spreadsheet or CSV the tool writes.

A model whose graph name, node names, op type and file name carry every formula start
(`=HYPERLINK(...)`, DDE `=cmd|' /C calc'!A0`, + - @, a tab or CR before =) and control characters
(BEL, an ANSI escape) goes through every exported table: `map --out` in each format, `compare --out`,
`sweep --out`, and the dashboard's Export and Sweep downloads. Each is read back: no formula cell,
no text cell that a spreadsheet would run, the payload still there (quoted, not dropped), and
negative numbers still numbers.
"""

import csv
import gc
import io
import json

import openpyxl
import pandas as pd
import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest

from mapper.cli.main import main
from mapper.report.tables import csv_bytes, safe_cell, xlsx_bytes
from tests.security.hostile_names import FORMULA_START, OVERLAY, formula_model, hostile_model
from tests.security.test_render import APP, hand_upload

FILE_NAME = "=cmd|' -C calc'!A0.onnx"  # no '/' in a file name; the sweep names a model by its file


def xlsx_cells(data: bytes) -> list:
    book = openpyxl.load_workbook(io.BytesIO(data))
    return [cell for ws in book.worksheets for row in ws.iter_rows() for cell in row]


def assert_inert_xlsx(data: bytes) -> list:
    cells = xlsx_cells(data)
    formulas = [(c.coordinate, c.value) for c in cells if c.data_type == "f"]
    assert not formulas, formulas[:5]
    live = [c.value for c in cells if isinstance(c.value, str) and c.value.startswith(FORMULA_START)]
    assert not live, live[:5]
    assert any(isinstance(c.value, str) and "HYPERLINK" in c.value for c in cells) or any(
        isinstance(c.value, str) and "calc" in c.value for c in cells
    ), "the payload vanished"
    return cells


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def assert_inert_csv(data: bytes) -> None:
    fields = [f for row in csv.reader(io.StringIO(data.decode(), newline="")) for f in row]
    live = [f for f in fields if f.startswith(FORMULA_START) and not _number(f)]
    assert not live, live[:5]
    assert not any(c in f for f in fields for c in ("\x07", "\x1b")), "control characters in the CSV"
    assert any("HYPERLINK" in f or "calc" in f for f in fields), "the payload vanished"


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("formulas") / FILE_NAME
    path.write_bytes(formula_model())
    return path


@pytest.mark.parametrize("fmt", ["xlsx", "csv", "json", "html"])
def test_map_out_writes_no_formula(model_path, tmp_path, fmt):
    out = tmp_path / f"sheet.{fmt}"
    assert main(["map", str(model_path), "--dim", "batch=2", "--out", str(out)]) == 0
    data = out.read_bytes()
    if fmt == "xlsx":
        assert_inert_xlsx(data)
    elif fmt == "csv":
        assert_inert_csv(data)
    elif fmt == "json":
        assert "HYPERLINK" in json.loads(data)["model"]["name"]  # JSON carries the name as data
    else:  # a report, not a table: it must still be written, names as escaped text (next test)
        assert "HYPERLINK(&quot;" in data.decode()


def test_map_html_escapes_model_names(tmp_path):
    path = tmp_path / "overlay.onnx"
    path.write_bytes(hostile_model())
    out = tmp_path / "sheet.html"
    assert main(["map", str(path), "--dim", "batch=2", "--out", str(out)]) == 0
    assert OVERLAY not in out.read_text() and "&lt;div style=position:fixed" in out.read_text()


def test_compare_out_writes_no_formula(model_path, tmp_path):
    out = tmp_path / "comparison.xlsx"
    assert (
        main(
            [
                "compare",
                str(model_path),
                "--batch",
                "1,4",
                "--baseline",
                "fusion=none",
                "--candidate",
                "fusion=aggressive",
                "--requests",
                "500",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    cells = assert_inert_xlsx(out.read_bytes())
    assert any(isinstance(c.value, float) and c.value < 0 for c in cells), "a negative change became text"


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
def test_sweep_out_writes_no_formula(model_path, tmp_path, fmt):
    out = tmp_path / f"sweep.{fmt}"
    assert main(["sweep", str(model_path), "--batch", "1,2", "--no-progress", "--out", str(out)]) == 0
    (assert_inert_csv if fmt == "csv" else assert_inert_xlsx)(out.read_bytes())


def test_the_one_writer_quotes_strings_and_keeps_numbers():
    frame = pd.DataFrame(
        {
            "name": ["=1+1", "-1+2", "@SUM(A1)", "\t=1", "\r=1", "ok", "bell\x07\x1b[31m"],
            "value": [-1.5, -2, 0, 1, 2, 3, 4],
        }
    )
    cells = xlsx_cells(xlsx_bytes({"t": frame}))
    values = [c.value for c in cells[3::2]]
    assert values == [-1.5, -2, 0, 1, 2, 3, 4] and all(not isinstance(v, str) for v in values)
    names = [c.value for c in cells[2::2]]
    assert all(not n.startswith(FORMULA_START) for n in names) and names[5] == "ok"
    assert not any("\x1b" in n or "\x07" in n for n in names)
    assert list(pd.read_csv(io.BytesIO(csv_bytes(frame)))["value"]) == [-1.5, -2, 0, 1, 2, 3, 4]
    assert safe_cell(-3) == -3 and safe_cell("-3") == "'-3"


def downloads(at: AppTest) -> dict[str, bytes]:
    """label -> the bytes behind each download button (AppTest keeps them in its in-memory media store)."""
    gc.unfreeze()  # the dashboard freezes what it holds (app_pages/cache.kept); get_objects skips frozen objects
    stores = [o for o in gc.get_objects() if isinstance(o, MemoryMediaFileStorage)]
    out = {}
    for button in at.get("download_button"):
        file_id = button.proto.url.rsplit("/", 1)[-1].split(".")[0]
        out[button.proto.label] = next(s._files_by_id[file_id].content for s in stores if file_id in s._files_by_id)
    return out


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_dashboard_downloads_write_no_formula():
    at = AppTest.from_file(APP, default_timeout=120)
    hand_upload(at, FILE_NAME, formula_model())
    at.run()
    assert at.session_state["model"] == "(uploaded model)", [e.value for e in at.error]
    at.switch_page("app_pages/export.py").run()
    assert not at.exception, [e.value for e in at.exception]  # a control character in a name: no crash
    files = downloads(at)
    assert_inert_xlsx(files["Excel workbook (.xlsx)"])
    assert_inert_csv(files["Kernels table (.csv)"])
    at.switch_page("app_pages/sweep.py").run()
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert_inert_csv(downloads(at)["Download the table (CSV)"])
