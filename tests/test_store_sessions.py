"""Sessions never meet in the run store (issue 31): a session reads only the runs it recorded, the team's only
where the operator shares them, and a link's run id is random, not a row number. A v1 store upgrades in place
(its runs become the team's). A hostile store or run id is one line: exit 2 from the CLI, one line in the page;
a row that does not read back is skipped and counted, never the end of every trend."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

import mapper
from mapper.core.errors import MapperError
from mapper.store import schema
from mapper.store.owners import EVERY_RUN, RunScope, new_session_token, owner_of, public_run_id
from mapper.store.record import record, run_sheet
from mapper.store.trend import load_trends, read_trends
from tests.conftest import APP
from tests.security.bounded import assert_one_line, run_cli
from tests.store_writer import doc

ROOT = Path(__file__).resolve().parents[1]
SHEET = (b"PK" + b"1" * 64, "xlsx")
STORE_BOUND_BYTES = 256 << 20  # a refused store: the process, SQLAlchemy and a driver (threat-model page)


@pytest.fixture
def store_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'runs.sqlite'}"


# ---- ownership, the team view, public ids ---------------------------------------------------------------
def test_a_session_reads_only_its_own_runs_and_the_team_only_where_shared(store_url):
    alice, bob = new_session_token(), new_session_token()
    record(store_url, doc(1.0, model="alice-secret"), command="dashboard", owner=owner_of(alice), sheet=SHEET)
    record(store_url, doc(1.0, model="bob-secret"), command="dashboard", owner=owner_of(bob), sheet=SHEET)
    record(store_url, doc(1.0, model="ci-model"), command="map", revision="r1", sheet=SHEET)  # CLI/CI: no owner

    def models(scope: RunScope) -> set[str]:
        return {t.model_name for t in load_trends(store_url, scope=scope)}

    assert models(RunScope.of_session(alice)) == {"alice-secret"}
    assert models(RunScope.of_session(bob)) == {"bob-secret"}
    assert models(RunScope.of_session(alice, team=True)) == {"alice-secret", "ci-model"}
    assert models(RunScope.team_only()) == {"ci-model"}
    assert models(EVERY_RUN) == {"alice-secret", "bob-secret", "ci-model"}  # the CLI holds the database
    with schema.open_engine(store_url).connect() as conn:  # the store keeps the token's hash, never the token
        owners = set(conn.execute(sa.select(schema.runs.c.owner)).scalars())
    assert owners == {owner_of(alice), owner_of(bob), None} and alice not in owners


def test_a_sheet_opens_only_for_its_session_and_only_by_its_public_id(store_url):
    alice, bob = new_session_token(), new_session_token()
    record(store_url, doc(1.0, model="alice-secret"), command="dashboard", owner=owner_of(alice), sheet=SHEET)
    record(store_url, doc(1.0, model="ci-model"), command="map", sheet=SHEET)
    ((a_point,),) = [t.points for t in load_trends(store_url, scope=RunScope.of_session(alice))]
    ((team_point,),) = [t.points for t in load_trends(store_url, scope=RunScope.team_only())]
    assert run_sheet(store_url, a_point.public_id, RunScope.of_session(alice)) == (SHEET[0], "xlsx")
    assert run_sheet(store_url, a_point.public_id, RunScope.of_session(bob, team=True)) is None  # reads as absent
    assert run_sheet(store_url, team_point.public_id, RunScope.of_session(bob)) is None  # team view off
    assert run_sheet(store_url, team_point.public_id, RunScope.of_session(bob, team=True)) == (SHEET[0], "xlsx")
    with pytest.raises(MapperError, match="32-hex-digit"):  # the row number a link used to carry opens nothing
        run_sheet(store_url, str(a_point.run_id), RunScope.of_session(alice))


def test_public_ids_are_128_random_bits_not_a_count(store_url):
    engine = schema.open_engine(store_url)
    for i in range(50):
        record(engine, doc(1.0, dims={"batch": i}), command="map")
    ids = [p.public_id for t in load_trends(engine) for p in t.points]
    assert len(set(ids)) == 50 and all(public_run_id(i) == i for i in ids)
    assert sorted(ids) != ids or sorted(ids, reverse=True) != ids  # not in recording order
    assert len({i[:8] for i in ids}) == 50  # no shared prefix, as a counter's would have


@pytest.mark.parametrize("text", ["²", "1" * 30, "2", "0" * 31, "A" * 32, "../" * 20, "x" * 100_000, "", "１" * 32])
def test_a_malformed_run_id_is_one_bounded_line(text):
    with pytest.raises(MapperError) as caught:
        public_run_id(text)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 200


def test_a_v1_store_upgrades_in_place_and_its_runs_become_the_teams(store_url, tmp_path):
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:  # a store exactly as version 1 left it, with one run
        schema._create_v1(conn)
        schema.schema_version.create(conn)
        conn.execute(schema.schema_version.insert().values(version=1))
        row = {c: "x" for c in ("recorded_utc", "command", "revision", "slice_key", "model_name", "model_sha256")}
        row |= {"hardware_name": "h", "hardware_sha256": "s", "engine_version": "v", "document": "{}"}
        conn.execute(
            sa.text(
                "INSERT INTO runs (uid, dims, options, p99_s, sheet, sheet_format, " + ", ".join(row) + ") VALUES "
                "('u1', '{\"batch\": 1}', '{}', 0.5, NULL, NULL, " + ", ".join(f":{k}" for k in row) + ")"
            ),
            row,
        )
        assert "owner" not in {c["name"] for c in sa.inspect(conn).get_columns("runs")}
    upgraded = schema.open_engine(store_url)
    assert schema.migrate(upgraded) == schema.MIGRATIONS[-1][0]
    (trend,) = load_trends(upgraded, scope=RunScope.team_only())
    (point,) = trend.points
    assert public_run_id(point.public_id) and point.kpis["p99_s"] == 0.5
    assert load_trends(upgraded, scope=RunScope.of_session(new_session_token())) == []


# ---- hostile stores from the CLI: one line, exit 2 --------------------------------------------------------
def _corrupt(tmp_path: Path) -> str:
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(bytes(range(256)) * 64)  # 16 kB that is no SQLite file
    return str(path)


def _lacking_columns(tmp_path: Path) -> str:
    path = tmp_path / "lacking.sqlite"
    with sqlite3.connect(path) as conn:  # says it is current, but its table was made by hand
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (?)", (schema.MIGRATIONS[-1][0],))
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, uid TEXT, dims TEXT)")
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "command", "needles"),
    [
        (_corrupt, "trend", ("cannot open the store", "not a database")),
        (_corrupt, "map", ("cannot open the store", "not a database")),
        (lambda _: "mysql://user:secret@localhost/runs", "trend", ("mysql is not supported",)),
        (lambda _: "mysql://user:secret@localhost/runs", "map", ("mysql is not supported",)),
        (lambda _: "nosuchdialect://x/y", "trend", ("not supported",)),
        (_lacking_columns, "trend", ("lacks", "not a mapper store")),
        (_lacking_columns, "map", ("lacks", "not a mapper store")),
    ],
)
def test_a_hostile_store_is_one_line_and_exit_2(tmp_path, make, command, needles):
    store = make(tmp_path)
    args = ["trend", "--store", store] if command == "trend" else ["map", "resnet50", "--store", store]
    line = assert_one_line(run_cli(args, extra_bytes=STORE_BOUND_BYTES, cwd=ROOT), *needles)
    assert "secret" not in line  # a URL's password is never printed


def test_a_row_that_does_not_read_back_is_skipped_and_counted(store_url, tmp_path):
    record(store_url, doc(1.0), command="map", revision="r1")
    record(store_url, doc(1.1), command="map", revision="r2")
    copy = sa.text(  # the first run again, as revision r3, under its own uid and public id
        "INSERT INTO runs (uid, public_id, recorded_utc, command, revision, slice_key, model_name, model_sha256, dims,"
        " hardware_name, hardware_sha256, options, engine_version, document, p99_s) SELECT :uid, :pid, recorded_utc,"
        " command, 'r3', slice_key, model_name, model_sha256, dims, hardware_name, hardware_sha256, options,"
        " engine_version, document, p99_s FROM runs WHERE id = 1"
    )
    with schema.open_engine(store_url).begin() as conn:  # three damaged copies of the first run
        for n, (column, value) in enumerate((("dims", "{not json"), ("options", "[1, 2"), ("p99_s", "lots"))):
            conn.execute(copy, {"uid": f"bad-{column}", "pid": f"{n:032x}"})
            conn.execute(
                sa.text(f"UPDATE runs SET {column} = :v WHERE uid = :uid"), {"v": value, "uid": f"bad-{column}"}
            )
    trends = read_trends(store_url)
    assert trends.skipped_runs == 3
    (good,) = trends.slices
    assert [p.revision for p in good.points] == ["r1", "r2"]
    outcome = run_cli(["trend", "--store", store_url.removeprefix("sqlite:///"), "--json"], extra_bytes=0, cwd=ROOT)
    assert outcome.returncode == 0, outcome.stderr
    (warning,) = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert warning.startswith("warning: skipped 3 recorded run(s)")
    assert json.loads(outcome.stdout)["skipped_runs"] == 3


# ---- the dashboard: two sessions, the team view, hostile links ------------------------------------------
def _app(monkeypatch, store_url: str, team: str | None) -> AppTest:
    from app_pages import cache

    monkeypatch.setattr(cache, "STORE", store_url)
    monkeypatch.setattr(cache, "TEAM_VIEW", team)
    return AppTest.from_file(APP, default_timeout=120)


def _page_text(at: AppTest) -> str:
    """What the page's main area says (the sidebar lists every built-in model), its filters' options too."""
    kinds = ("title", "header", "subheader", "caption", "markdown", "warning", "error", "success", "info")
    parts = [e.value for kind in kinds for e in at.main.get(kind)]
    parts += [str(option) for box in at.main.selectbox for option in box.options]
    return "\n".join(str(p) for p in parts)


@pytest.mark.slow
def test_two_dashboard_sessions_never_see_each_others_runs(store_url, monkeypatch):
    from app_pages import cache

    cache.recorded.clear()
    record(store_url, doc(1.0, model="ci-model"), command="map", revision="r1", sheet=SHEET)
    alice = _app(monkeypatch, store_url, None).run()  # maps the default model: recorded as Alice's
    assert not alice.exception
    alice.switch_page("app_pages/trends.py").run()
    (own,) = load_trends(store_url, scope=RunScope(owner=owner_of(alice.session_state["dashboard"].token)))
    assert "resnet50" in _page_text(alice) and "ci\\-model" not in _page_text(alice)  # team view off
    bob = _app(monkeypatch, store_url, None)
    bob.session_state["model"] = "bert-base"
    bob.run()
    bob.switch_page("app_pages/trends.py").run()
    assert not bob.exception
    assert "resnet50" not in _page_text(bob) and "bert\\-base" in _page_text(bob)  # names shown escaped
    bob.query_params["run"] = own.points[0].public_id  # Alice's link, pasted into Bob's browser
    bob.run()
    assert not bob.exception and not bob.get("download_button")
    assert any("No run" in w.value for w in bob.warning)
    alice.query_params["run"] = own.points[0].public_id
    alice.run()
    assert any("its sheet" in s.value for s in alice.success) and alice.get("download_button")


def test_the_team_view_is_labelled_shared(store_url, monkeypatch):
    record(store_url, doc(1.0, model="ci-model"), command="map", revision="r1", sheet=SHEET)
    at = _app(monkeypatch, store_url, "Inference perf").run()
    at.switch_page("app_pages/trends.py").run()
    assert not at.exception
    assert [h.value for h in at.header][-1] == "Shared with the team: Inference perf"
    assert "ci\\-model" in _page_text(at)


@pytest.mark.parametrize("run", ["²", "9" * 30, "1", "<b>x</b>" * 500, "f" * 31, "0123456789abcdef" * 2])
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_a_hostile_run_link_is_one_line_in_the_page(store_url, monkeypatch, run):
    record(store_url, doc(1.0), command="map", sheet=SHEET)
    at = _app(monkeypatch, store_url, "team")
    at.query_params["run"] = run
    at.run()
    at.switch_page("app_pages/trends.py").run()
    assert not at.exception
    said = [m.value for m in [*at.warning, *at.error] if "run" in m.value.lower()]
    assert len(said) == 1 and "\n" not in said[0] and len(said[0]) < 400, said
    assert not at.get("download_button")


def test_the_page_skips_a_damaged_row_and_says_so(store_url, monkeypatch):
    record(store_url, doc(1.0, model="good"), command="map", revision="r1")
    with schema.open_engine(store_url).begin() as conn:
        conn.execute(sa.text("UPDATE runs SET dims = '{oops' WHERE id = 1"))
    record(store_url, doc(1.0, model="good"), command="map", revision="r2")
    at = _app(monkeypatch, store_url, "team").run()
    at.switch_page("app_pages/trends.py").run()
    assert not at.exception
    assert any("1 recorded run(s) were skipped" in w.value for w in at.warning)
    assert [c.key.split("_")[1] for c in at.get("plotly_chart")] == ["own", "team"]  # this mapping; the good one
    assert any("map: good" in h.value for h in at.subheader)


def test_mapper_exports_what_the_pages_call():
    for name in ("RunScope", "read_trends", "session_owner", "new_session_token", "team_view_from_env"):
        assert name in mapper.__all__ and getattr(mapper, name)
