"""Red team, issue 15 item 6 (the output side): every failure is one bounded line, nothing from a
model drives the terminal, and the dashboard never shows a traceback.

CLI: a 5,000-character path (ENAMETOOLONG) wherever a path is opened, an error that quotes a huge
name with an ANSI escape in it, and a model whose names carry ESC, BEL and CR. Dashboard: a link
with `?batch=²` (str.isdigit accepts it, int() does not), and a page that raises something nobody
expected.
"""

import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import mapper.report.charts
from mapper.cli.main import main
from mapper.core.limits import MAX_ERROR_LINE_CHARS
from tests.security.hostile_names import formula_model
from tests.security.test_render import dashboard

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
LONG = "a" * 5000
CONTROLS = ("\x1b", "\x07", "\r")


def one_error_line(capsys, argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err[-300:])
    assert err.startswith("error: ") and err.count("\n") == 1, err[-500:]
    assert "Traceback" not in err and not any(c in err + out for c in CONTROLS)
    assert len(err.rstrip("\n")) <= len("error: ") + MAX_ERROR_LINE_CHARS
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["map", f"{LONG}.onnx"],
        ["map", "resnet50", "--hw", f"{LONG}.toml"],
        ["serve", "resnet50", "--trace", f"{LONG}.csv", "--requests", "100"],
        ["measure", "resnet50", "--hw", "h100-sxm", "--profile", f"{LONG}.json"],
    ],
    ids=["model", "profile", "trace", "ort-profile"],
)
def test_a_path_too_long_to_open_is_one_line(capsys, argv):
    one_error_line(capsys, argv)


@pytest.mark.parametrize("command", [["map", "resnet50"], ["sweep", "resnet50", "--no-progress"]], ids=["map", "sweep"])
@pytest.mark.parametrize("suffix", [".xlsx", ".csv", ".parquet"])
def test_an_output_path_too_long_to_write_is_one_line(capsys, tmp_path, command, suffix):
    if command[0] == "map" and suffix == ".parquet":
        pytest.skip("the mapping sheet has no parquet form")
    one_error_line(capsys, [*command, "--out", str(tmp_path / f"{LONG}{suffix}")])


def test_an_error_quoting_a_huge_hostile_name_is_bounded_and_escaped(capsys):
    one_error_line(capsys, ["map", "resnet50", "--dtype", "\x1b[31m" + "x" * 20_000 + "\x07\r"])


def test_names_with_control_characters_do_not_reach_the_terminal(capsys, tmp_path):
    model = tmp_path / "bell\x07\x1b[31mred\r.onnx"  # the sweep names a model by its file
    model.write_bytes(formula_model())
    for argv in (["map", str(model), "--dim", "batch=2"], ["sweep", str(model), "--batch", "1,2", "--no-progress"]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert "bell" in out, out[:500]  # the names are printed ...
        assert not any(c in out + err for c in CONTROLS), repr(out[:500])  # ... with their controls written out
        assert "\\x1b" in out


def test_the_dashboard_shows_no_error_details():
    client = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["client"]
    assert client.get("showErrorDetails") == "none"


def test_a_link_with_a_superscript_digit_opens_the_page():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["batch"] = "²"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert dashboard(at).doc["model"]["name"] == "resnet50"
    assert any("batch" in w.value and "ignored" in w.value for w in at.warning), [w.value for w in at.warning]
    at.run()  # and the next run is not stuck either
    assert not at.exception and at.title[0].value == "Overview"


def test_an_unexpected_failure_in_a_page_is_one_line(monkeypatch):
    def broken(doc):
        raise ZeroDivisionError("float division by zero in /srv/secret/path.py")

    monkeypatch.setattr(mapper.report.charts, "timeline_figure", broken)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("app_pages/timeline.py").run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "unexpected error" in errors[0] and "\n" not in errors[0], errors
    assert "/srv" not in errors[0] and "Traceback" not in errors[0]
