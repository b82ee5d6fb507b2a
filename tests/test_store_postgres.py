"""The run store tests of tests/test_store.py against a real PostgreSQL server: a private cluster this
module creates in a temporary folder (initdb, pg_ctl; as the `postgres` user when run as root), one fresh
database per test. scripts/install_postgres.sh installs Debian's `postgresql`; without it, a skip says why."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid

import pytest
import sqlalchemy as sa

from bench.load_dashboard import free_port
from tests.test_store import (  # noqa: F401 (collected here again, with this module's store_url)
    test_a_rerun_of_one_revision_is_not_compared_with_itself,
    test_cli_records_a_real_mapping_with_its_sheet_and_trend_reads_it,
    test_concurrent_writers_lose_no_run,
    test_dashboard_records_once_and_the_trends_page_shows_the_store,
    test_fail_on_regression_exit_code,
    test_schema_version_is_checked_and_migrations_upgrade_in_place,
    test_the_slice_key_separates_slices_and_filters_select_them,
)

pytestmark = pytest.mark.slow  # a PostgreSQL server started for the module

START_TIMEOUT_S = 60


def _bindir() -> str | None:
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1:]), None)
    return os.path.dirname(os.path.realpath(found)) if found else None


def _as_owner(argv: list[str]) -> list[str]:
    """initdb and postgres refuse root: run them as the `postgres` user the Debian package creates."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="module")
def postgres_server():
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (scripts/install_postgres.sh installs Debian's postgresql)")
    if os.geteuid() == 0 and (
        shutil.which("runuser") is None or subprocess.run(["id", "postgres"], check=False).returncode
    ):
        pytest.skip("running as root without a `postgres` user to own the test cluster")
    folder = tempfile.mkdtemp(prefix="mapper-pg-")
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data, port = os.path.join(folder, "data"), free_port()
    run = dict(capture_output=True, timeout=START_TIMEOUT_S)
    subprocess.run(
        _as_owner([f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8"]), check=True, **run
    )
    # fsync off: these tests are about concurrent writers, not power loss
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=50 -c fsync=off"
    pg_ctl = [f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(folder, "log"), "-w", "-o", options]
    subprocess.run(_as_owner([*pg_ctl, "start"]), check=True, **run)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(_as_owner([f"{bindir}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"]), check=False)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def store_url(postgres_server) -> str:
    """A fresh database on the test server for each test."""
    name = f"runs_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(f"{postgres_server.replace('postgresql://', 'postgresql+psycopg://')}/postgres")
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return f"{postgres_server}/{name}"
