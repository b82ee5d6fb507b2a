"""Nsight Systems SQLite exports: read within bounds, kernels tied to launches and NVTX ranges, matched as Kineto is.

data/evidence/nsys_saxpy is a real export (an A100, hpcgroup/pipit's test data, trimmed); data/evidence/nsys_fixture
is the export schema filled from the committed CPU ResNet-50 trace (bench/nsys_schema_fixture.py): not a GPU run.
"""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest

from mapper.cli.main import main
from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.evidence.measure import measurement_from_profile
from mapper.evidence.nsys_trace import read_nsys_export

DATA = Path(__file__).resolve().parents[1] / "data" / "evidence"
SAXPY = DATA / "nsys_saxpy" / "saxpy_a100.sqlite"
FIXTURE = DATA / "nsys_fixture" / "resnet50.sqlite.gz"


def test_the_real_export_reads_kernels_launches_and_nvtx_ranges():
    trace = read_nsys_export(SAXPY)
    kernels = [u for u in trace.units if u.name == "saxpy"]
    assert trace.tool == "Nsight Systems" and trace.device == "GPU"
    assert len(kernels) == 5 and len(trace.units) == 20  # 5 kernels and 15 copies, as the export holds
    assert all(u.scope == "saxpy" for u in kernels)  # the NVTX range open on the launching thread at the launch
    assert trace.launches == 5  # one per kernel though this version writes each launch twice (_v7000 inside it)
    assert kernels[0].dur_us == pytest.approx(17704.808)  # end - start of its row, ns -> us


def test_the_real_export_is_kept_unmatched_with_its_reason():
    m = measurement_from_profile(SAXPY, "resnet50")
    assert m.trace["runtime"] == "Nsight Systems export" and m.trace["matched_share"] == 0.0
    assert all(not n.onnx_nodes for n in m.nodes)
    assert any("outside any op" in why for why in m.trace["unmatched_by_reason"])


def test_the_schema_fixture_matches_resnet50_through_nvtx_ranges(tmp_path):
    m = measurement_from_profile(FIXTURE, "resnet50")
    assert m.trace["tool"] == "Nsight Systems" and m.trace["runs"] == 2 and m.trace["units"] == 350
    assert m.trace["matched_share"] >= 0.99
    by_node = {node for n in m.nodes for node in n.onnx_nodes}
    assert "/conv1/Conv" in by_node and "/layer4.2/conv3/Conv" in by_node
    plain = tmp_path / "resnet50.sqlite"
    plain.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    assert measurement_from_profile(plain, "resnet50").trace["matched_share"] == m.trace["matched_share"]


def test_measure_reads_an_export_and_says_so(capsys):
    assert main(["measure", "resnet50", "--hw", "cpu-x86", "--profile", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "on Nsight Systems export" in out and "matched to mapped kernels 100.0%" in out


def _export(tmp_path, statements: list[str], rows: dict[str, list[tuple]] | None = None) -> Path:
    path = tmp_path / "x.sqlite"
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    for table, values in (rows or {}).items():
        db.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(values[0]))})", values)
    db.commit()
    db.close()
    return path


KERNEL = (
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, correlationId, deviceId, streamId, globalPid,"
    " shortName, demangledName)"
)
STRINGS = "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)"


def _hostile(tmp_path, case: str) -> Path:
    real = SAXPY.read_bytes()
    path = tmp_path / "x.sqlite"
    if case == "truncated":
        path.write_bytes(real[:8192])
    elif case == "text named .sqlite":
        path.write_text("not a database")
    elif case == "not sqlite":
        path.write_bytes(b"SQLite format 3\x00" + b"\x07" * 5000)
    elif case == "no kernel table":
        path = _export(tmp_path, [STRINGS])
    elif case == "a view for the kernel table":
        path = _export(
            tmp_path,
            [
                STRINGS,
                (
                    "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1"
                    " FROM c) SELECT x AS start, x AS end, x AS correlationId, 0 AS deviceId, 0 AS streamId,"
                    " 0 AS globalPid, 1 AS shortName, 1 AS demangledName FROM c"
                ),
            ],
        )
    elif case == "garbage columns":
        path = _export(
            tmp_path,
            [KERNEL, STRINGS],
            {"CUPTI_ACTIVITY_KIND_KERNEL": [("abc", b"\xff", "x", None, 1e300, "y", 99, 99)] * 3},
        )
    elif case == "a huge string":
        path = _export(
            tmp_path,
            [KERNEL, STRINGS],
            {
                "StringIds": [(1, "k" * (limits.MAX_TRACE_EVENT_BYTES + 10))],
                "CUPTI_ACTIVITY_KIND_KERNEL": [(0, 10, 1, 0, 7, 0, 1, 1)],
            },
        )
    return path


@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "text named .sqlite",
        "not sqlite",
        "no kernel table",
        "a view for the kernel table",
        "garbage columns",
        "a huge string",
    ],
)
def test_hostile_exports_are_one_line_exit_2(case, tmp_path, capsys):
    path = _hostile(tmp_path, case)
    with pytest.raises(MapperError):
        measurement_from_profile(path, "resnet50")
    with pytest.raises(MapperError):
        measurement_from_profile(path.read_bytes(), "resnet50")  # an upload's bytes
    assert main(["measure", "resnet50", "--hw", "cpu-x86", "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_the_time_budget_interrupts_a_read(monkeypatch):
    monkeypatch.setattr(limits, "TRACE_SQL_SECONDS", -1)
    with pytest.raises(MapperError, match="TRACE_SQL_SECONDS"):
        read_nsys_export(gzip.decompress(FIXTURE.read_bytes()))


def test_the_row_limit_refuses_a_large_export(monkeypatch):
    monkeypatch.setattr(limits, "MAX_TRACE_EVENTS", 50)
    with pytest.raises(MapperError, match="MAX_TRACE_EVENTS"):
        read_nsys_export(SAXPY)


def test_wrong_correlation_ids_are_kept_with_their_reason(tmp_path):
    path = tmp_path / "wrong.sqlite"
    path.write_bytes(SAXPY.read_bytes())
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = correlationId + 100000")
    db.commit()
    db.close()
    trace = read_nsys_export(path)
    kernels = [u for u in trace.units if u.name == "saxpy"]
    assert len(kernels) == 5 and all("no CPU launch with correlation" in u.why for u in kernels)


def test_deep_and_garbage_range_names_are_read_bounded(tmp_path):
    """An NVTX range named by a 100,000-part module path, one of invalid UTF-8 and one of control characters: read,
    each kept at most MAX_NAME characters, never a crash; the kernel still reaches its launch."""
    path = tmp_path / "x.sqlite"
    path.write_bytes(SAXPY.read_bytes())
    db = sqlite3.connect(path)
    ((start, end, tid),) = db.execute("SELECT start, end, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1")
    rows = [".".join(["a"] * 100_000), b"\xff\xfe layer1.0".decode("latin-1"), "\x00\x1b[2J aten::conv2d, seq = 1"]
    for text in rows:
        db.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
            (start - 10, end + 10, text, tid),
        )
    db.execute("UPDATE NVTX_EVENTS SET text = CAST(x'ff41' AS TEXT) WHERE text LIKE 'ÿþ%'")
    db.commit()
    db.close()
    trace = read_nsys_export(path)
    assert len(trace.units) == 20 and all(len(u.scope) <= 512 and len(u.op) <= 512 for u in trace.units)
