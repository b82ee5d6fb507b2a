"""The run store against SQLite (tests/test_store_postgres.py runs these same tests against PostgreSQL):
recording a real mapping from the CLI, trends across revisions, the regression exit code, the versioned
schema, 8 concurrent writers x 200 runs with none lost, and the dashboard's recording and Trends page."""

from __future__ import annotations

import io
import json
import multiprocessing
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from mapper.cli.main import main
from mapper.core.errors import MapperError
from mapper.store import schema
from mapper.store.record import record, run_sheet
from mapper.store.trend import load_trends, regressions
from tests.conftest import APP
from tests.store_writer import RUNS_EACH, doc, write_runs

WRITERS = 8  # the acceptance figure (RUNS_EACH runs each)


@pytest.fixture
def store_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'runs.sqlite'}"


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(list(argv))
    return rc, out.getvalue()


def test_cli_records_a_real_mapping_with_its_sheet_and_trend_reads_it(store_url, tmp_path):
    for revision, fusion in (("rev-a", "default"), ("rev-b", "default")):
        rc, text = cli(
            "map", "resnet50", "--fusion", fusion, "--rate=1000", "--store", store_url, "--revision", revision, "--json"
        )
        assert rc == 0
    mapped = json.loads(text)
    rc, text = cli("trend", "--store", store_url, "--model", "resnet50", "--json")
    assert rc == 0
    (only,) = json.loads(text)["slices"]
    assert only["primary_metric"] == "p99"
    assert [p["revision"] for p in only["points"]] == ["rev-a", "rev-b"]
    latest = only["points"][-1]
    assert latest["kpis"]["latency_s"] == mapped["totals"]["latency_s"]
    assert latest["kpis"]["p99_s"] == mapped["serving"]["p99_s"]
    assert latest["kpis"]["mfu"] == mapped["totals"]["mfu"]
    assert latest["kpis"]["memory_per_device_bytes"] == mapped["memory"]["per_device_bytes"]
    assert latest["model_sha256"] == mapped["model"]["sha256"] and latest["first_failure"]
    data, fmt = run_sheet(store_url, latest["public_id"])
    assert fmt == "xlsx" and data[:2] == b"PK"  # the workbook itself, read back whole
    assert not only["regressions"]  # the same mapping twice moved nothing


def test_the_slice_key_separates_slices_and_filters_select_them(store_url):
    record(store_url, doc(1.0), command="map", revision="r1")
    record(store_url, doc(1.0, dims={"batch": 8}), command="map", revision="r1")
    record(store_url, doc(1.0, model="other"), command="map", revision="r1")
    assert len(load_trends(store_url)) == 3
    assert [t.dims for t in load_trends(store_url, model="net", dims={"batch": 8})] == [{"batch": 8}]
    assert load_trends(store_url, hw="no-such-device") == []


def test_trend_titles_name_options_dims_and_hardware_so_slices_read_apart(store_url):
    """Slices that differ only in their options print different headers: each names the options away from the
    defaults (a comparison its two plans, a value no option takes as JSON), the dims and the profile."""
    tuned = {"dtype": "bf16", "fusion": "aggressive", "tp": 2, "attention_fusion": None, "overlap_collectives": True}
    sides = (("baseline", "dtype=bf16"), ("candidate", "dtype=fp8"))  # a comparison's record: both plans
    plans = {side: {"options": {}, "describe": f"net on h100-sxm ({text})"} for side, text in sides}
    for options in ({"dtype": "bf16"}, tuned, {}, {"attention_fusion": "maybe", "retired_knob": 3}, plans):
        record(store_url, doc(1.0) | {"options": options}, command="map", revision="r1")
    rc, text = cli("trend", "--store", store_url)
    assert rc == 0
    assert [line for line in text.splitlines() if not line.startswith(" ")] == [
        "map net on h100-sxm, batch=1, dtype=bf16: p99 by revision",
        "map net on h100-sxm, batch=1, dtype=bf16 fusion=aggressive tp=2 overlap_collectives=on: p99 by revision",
        "map net on h100-sxm, batch=1, default options: p99 by revision",
        'map net on h100-sxm, batch=1, attention_fusion="maybe" retired_knob=3: p99 by revision',
        (
            "map net on h100-sxm, batch=1, baseline (net on h100-sxm (dtype=bf16)) vs candidate (net on h100-sxm"
            " (dtype=fp8)): p99 by revision"
        ),
    ]
    rc, text = cli("trend", "--store", store_url, "--json")
    assert json.loads(text)["slices"][0]["slice"]["title"] == "map net on h100-sxm, batch=1, dtype=bf16"


@pytest.mark.parametrize(
    ("threshold", "p99_after", "mfu_after", "rc"),
    [
        ("p99=0.05", 1.10, 0.5, 1),  # p99 10% worse than the previous revision: CI fails
        ("p99=0.20", 1.10, 0.5, 0),  # within the threshold
        ("p99=0.05", 0.90, 0.5, 0),  # p99 better is not a regression
        ("mfu=0.05", 1.00, 0.4, 1),  # MFU down is worse
        ("mfu=0.05", 1.00, 0.6, 0),  # MFU up is not
    ],
)
def test_fail_on_regression_exit_code(store_url, threshold, p99_after, mfu_after, rc):
    record(store_url, doc(1.0), command="map", revision="r1")
    record(store_url, doc(p99_after, mfu_after), command="map", revision="r2")
    got, text = cli("trend", "--store", store_url, "--fail-on-regression", threshold)
    assert got == rc, text
    assert ("REGRESSION" in text) == (rc == 1)


def test_a_rerun_of_one_revision_is_not_compared_with_itself(store_url):
    record(store_url, doc(1.0), command="map", revision="r1")
    record(store_url, doc(1.5), command="map", revision="r2")
    record(store_url, doc(1.6), command="map", revision="r2")  # r2's re-run: 60% worse than r1, not 7% than r2
    (trend,) = load_trends(store_url)
    (flag,) = regressions(trend, {"p99": 0.05})
    assert (flag.previous_revision, flag.latest_revision) == ("r1", "r2")
    assert flag.change == pytest.approx(0.6)


def test_bad_threshold_and_missing_store_are_one_line_errors(store_url, monkeypatch, capsys):
    monkeypatch.delenv("MAPPER_STORE", raising=False)
    assert main(["trend"]) == 2
    assert main(["trend", "--store", store_url, "--fail-on-regression", "p99=lots"]) == 2
    assert main(["trend", "--store", "nosuchdialect://x/y"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(line.startswith("error: ") for line in errors)


def test_mapper_store_env_records_and_without_it_nothing_is(tmp_path, monkeypatch):
    target = tmp_path / "env.sqlite"
    monkeypatch.delenv("MAPPER_STORE", raising=False)
    assert cli("map", "resnet50")[0] == 0
    assert not target.exists()
    monkeypatch.setenv("MAPPER_STORE", str(target))
    assert cli("map", "resnet50", "--revision", "from-env")[0] == 0
    assert [p.revision for t in load_trends(str(target)) for p in t.points] == ["from-env"]


def test_schema_version_is_checked_and_migrations_upgrade_in_place(store_url, monkeypatch):
    engine = schema.open_engine(store_url)
    record(engine, doc(1.0), command="map", revision="r1")
    latest = schema.MIGRATIONS[-1][0]
    assert schema.migrate(engine) == latest

    def add_note(conn):
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN note TEXT"))

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (latest + 1, add_note)])
    assert schema.migrate(schema.open_engine(store_url)) == latest + 1
    with engine.connect() as conn:  # the old row is still there, with the new column
        assert conn.execute(sa.text("SELECT count(*), max(note) FROM runs")).one() == (1, None)
        assert conn.execute(sa.select(schema.schema_version.c.version)).scalars().all() == [latest + 1]
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:latest])
    with pytest.raises(MapperError, match="newer than this mapper"):
        schema.open_engine(store_url)


@pytest.mark.slow  # writer processes racing on one store, ~14 s
def test_concurrent_writers_lose_no_run(store_url):
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per writer, as CI jobs are
    procs = [ctx.Process(target=write_runs, args=(store_url, w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * WRITERS
    with schema.open_engine(store_url).connect() as conn:
        rows = conn.execute(sa.select(schema.runs.c.dims, schema.runs.c.revision, schema.runs.c.p99_s)).all()
    got = {(json.loads(r.dims)["writer"], json.loads(r.dims)["i"]) for r in rows}
    assert len(rows) == WRITERS * RUNS_EACH
    assert got == {(w, i) for w in range(WRITERS) for i in range(RUNS_EACH)}
    assert all(
        r.p99_s == 1.0 + json.loads(r.dims)["i"] and r.revision == f"w{json.loads(r.dims)['writer']}" for r in rows
    )


def test_dashboard_records_once_and_the_trends_page_shows_the_store(store_url, monkeypatch):
    from app_pages import cache

    monkeypatch.setattr(cache, "STORE", store_url)
    monkeypatch.setattr(cache, "TEAM_VIEW", "the team")  # the CLI's runs below are shared (owned by no session)
    cache.recorded.clear()
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.run()  # a rerun of the same selection is the same mapping: recorded once
    assert not at.exception
    (trend,) = load_trends(store_url)
    assert trend.command == "dashboard" and len(trend.points) == 1
    record(store_url, doc(1.0, model="evil <b>*net*</b>"), command="map", revision="r1")
    record(store_url, doc(2.0, model="evil <b>*net*</b>"), command="map", revision="r2")
    at.switch_page("app_pages/trends.py").run()
    assert not at.exception and at.title[0].value == "Trends"
    assert any("Regression: p99 +100.0% worse" in e.value for e in at.error)
    assert len(at.get("plotly_chart")) == 2
    assert any(r"evil \<b\>\*net\*\</b\>" in s.value for s in at.subheader)  # the name escaped, shown verbatim
    at.query_params["run"] = trend.points[0].public_id
    at.run()
    assert any("its sheet" in s.value for s in at.success)


def test_trends_page_without_a_store_says_how_to_configure_one(monkeypatch):
    from app_pages import cache

    monkeypatch.setattr(cache, "STORE", None)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("app_pages/trends.py").run()
    assert not at.exception
    assert any("MAPPER_STORE" in i.value for i in at.info)


def test_measure_records_the_measured_kpis_beside_the_predicted(store_url):
    """`mapper measure --profile TRACE --store` keeps the run's measured MFU, memory stall, error and matched share in
    their own columns, beside the predicted ones of the same row."""
    trace = Path(__file__).resolve().parents[1] / "data" / "evidence" / "torch_cpu" / "resnet50.json.gz"
    rc, _ = cli("measure", "resnet50", "--hw", "cpu-x86", "--profile", str(trace), "--store", store_url)
    assert rc == 0
    (trend,) = load_trends(store_url, model="resnet50")
    kpis = trend.points[-1].kpis
    assert kpis["mfu"] > 0 and kpis["latency_s"] > 0  # the prediction
    assert 0 < kpis["measured_mfu"] < 1 and 0 <= kpis["measured_memory_stall_fraction"] <= 1
    assert kpis["measured_matched_share"] == 1.0 and kpis["measured_error"] == pytest.approx(-0.0235, abs=0.01)
