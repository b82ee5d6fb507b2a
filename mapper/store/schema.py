"""The run store's tables and its versioned schema: what `--store URL` writes and `mapper trend` reads.

One row per recorded run (the slice it mapped, the revision label, its KPIs, its document and sheet).
A `schema_version` table says which of MIGRATIONS a store has had; `open_engine` applies the missing
ones in order under a lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock), so two processes
opening a fresh store at once create it once. A store newer than this mapper is refused, not guessed at.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from mapper.core.errors import MapperError
from mapper.store.owners import RunScope, new_public_id

SQLITE_BUSY_TIMEOUT_S = 60  # a writer waits this long for another's lock (8 CI jobs x 200 runs: well under 1 s)
PG_MIGRATION_LOCK = 0x6D617070  # "mapp": the advisory-lock key every mapper process migrates under
MIGRATION_BATCH_ROWS = 1000  # rows given public ids per UPDATE batch when version 2 upgrades a store
# Databases a store may live in: the DDL of MIGRATIONS is written and tested for these two (tests/test_store.py,
# tests/test_store_postgres.py); any other URL is refused before a driver is looked for.
DIALECTS = ("sqlite", "postgresql")
MISSING_COLUMNS_NAMED = 4  # columns a refused store's message names (a table made by hand can lack them all)

metadata = sa.MetaData()

schema_version = sa.Table("schema_version", metadata, sa.Column("version", sa.Integer, nullable=False))

V1_KPI_COLUMNS = (
    "latency_s",
    "p50_s",
    "p95_s",
    "p99_s",
    "ttft_p99_s",
    "tpot_p99_s",
    "throughput_per_s",
    "mfu",
    "memory_stall_fraction",
    "perf_per_watt",
    "memory_per_device_bytes",
    "measured_p50_s",
    "measured_p99_s",
)
# Version 3: what a measured run (`mapper measure`, a review with a trace) says beside the predicted KPIs.
MEASURED_COLUMNS = ("measured_mfu", "measured_memory_stall_fraction", "measured_error", "measured_matched_share")
KPI_COLUMNS = V1_KPI_COLUMNS + MEASURED_COLUMNS


def _v1_columns() -> list[sa.Column]:
    """The columns version 1 created (fresh objects: a Column belongs to one Table)."""
    return [
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("uid", sa.String(32), nullable=False, unique=True),  # a retried insert is recognised, not doubled
        sa.Column("recorded_utc", sa.String(32), nullable=False),
        sa.Column("command", sa.String(32), nullable=False),
        sa.Column("revision", sa.Text, nullable=False),
        sa.Column("slice_key", sa.String(64), nullable=False, index=True),
        sa.Column("model_name", sa.Text, nullable=False),
        sa.Column("model_sha256", sa.String(64), nullable=False),
        sa.Column("dims", sa.Text, nullable=False),  # JSON, keys sorted
        sa.Column("hardware_name", sa.Text, nullable=False),
        sa.Column("hardware_sha256", sa.String(64), nullable=False),
        sa.Column("options", sa.Text, nullable=False),  # JSON, keys sorted
        sa.Column("engine_version", sa.String(64), nullable=False),
        *(sa.Column(name, sa.Float, nullable=True) for name in V1_KPI_COLUMNS),
        sa.Column("first_failure", sa.Text, nullable=True),
        sa.Column("document", sa.Text, nullable=False),
        sa.Column("sheet", sa.LargeBinary, nullable=True),
        sa.Column("sheet_format", sa.String(8), nullable=True),
    ]


# Version 2: who may read a run, and the id its links carry (mapper/store/owners.py).
OWNER = sa.Column("owner", sa.String(64), nullable=True)  # SHA-256 of the recording session's token; NULL: team
PUBLIC_ID = sa.Column("public_id", sa.String(32), nullable=True)  # 128 random bits, hex; set on every row

runs = sa.Table(  # the table as this mapper reads it
    "runs",
    metadata,
    *_v1_columns(),
    OWNER,
    PUBLIC_ID,
    *(sa.Column(name, sa.Float, nullable=True) for name in MEASURED_COLUMNS),
)


def _create_v1(conn: sa.Connection) -> None:
    sa.Table("runs", sa.MetaData(), *_v1_columns()).create(conn)  # as version 1 made it, whatever came after


def _owners_and_public_ids_v2(conn: sa.Connection) -> None:
    """Add `owner` and `public_id`; every run already recorded gets a public id and no owner (a team run)."""
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN owner VARCHAR(64)"))
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN public_id VARCHAR(32)"))
    ids = conn.execute(sa.text("SELECT id FROM runs")).scalars().all()
    update = sa.text("UPDATE runs SET public_id = :public_id WHERE id = :id")
    for start in range(0, len(ids), MIGRATION_BATCH_ROWS):
        conn.execute(
            update, [{"id": i, "public_id": new_public_id()} for i in ids[start : start + MIGRATION_BATCH_ROWS]]
        )
    conn.execute(sa.text("CREATE UNIQUE INDEX ix_runs_public_id ON runs (public_id)"))
    conn.execute(sa.text("CREATE INDEX ix_runs_owner ON runs (owner)"))


def _measured_kpis_v3(conn: sa.Connection) -> None:
    """Add the measured KPIs (MEASURED_COLUMNS); runs recorded before have none (NULL)."""
    for name in MEASURED_COLUMNS:
        conn.execute(sa.text(f"ALTER TABLE runs ADD COLUMN {name} DOUBLE PRECISION"))


# Append only: (version, step). A released step never changes; a new column is a new step.
MIGRATIONS: list[tuple[int, Callable[[sa.Connection], None]]] = [
    (1, _create_v1),
    (2, _owners_and_public_ids_v2),
    (3, _measured_kpis_v3),
]


def default_store_url() -> str:
    """The embedded default: a SQLite file in the user's data directory (platformdirs' when installed)."""
    try:
        import platformdirs

        folder = Path(platformdirs.user_data_dir("mapper", appauthor=False))
    except ImportError:
        folder = Path.home() / ".local" / "share" / "mapper"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'runs.sqlite'}"


def normalize_url(url: str) -> str:
    """'default' (or empty) -> the embedded store; a plain path -> a SQLite file; a URL stays."""
    if not url or url == "default":
        return default_store_url()
    if "://" not in url:
        return f"sqlite:///{os.path.abspath(url)}"
    if url.startswith("postgresql://"):  # the driver this package installs (psycopg 3)
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


def _sqlite_engine(url: str) -> sa.Engine:
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (below), so DDL is transactional too
        dbapi_conn.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor it them
        dbapi_conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # take the write lock up front: no deadlock on upgrade

    return engine


def open_engine(url: str) -> sa.Engine:
    """An engine on the store at `url`, its schema brought up to date and its table checked. A bad URL, an
    unsupported database, a file that is no database, a table that lacks columns: one-line MapperError."""
    url = normalize_url(url)
    try:
        dialect = sa.make_url(url).get_backend_name()
    except sa.exc.ArgumentError:
        raise MapperError(
            f"--store: not a database URL: give a SQLite file or a postgresql:// URL ({url[:80]!r})"
        ) from None
    if dialect not in DIALECTS:
        raise MapperError(f"--store: {dialect} is not supported: give a SQLite file or a postgresql:// URL")
    try:
        engine = _sqlite_engine(url) if dialect == "sqlite" else sa.create_engine(url, pool_pre_ping=True)
        migrate(engine)
        _check_columns(engine)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise MapperError(f"--store: cannot use this URL: {first_line(exc)}") from None
    except sa.exc.SQLAlchemyError as exc:  # OperationalError, DatabaseError ('file is not a database'), ...
        raise MapperError(f"--store: cannot open the store: {first_line(exc)}") from None
    return engine


def first_line(exc: BaseException) -> str:
    """A database error's own first line (the driver's text, without SQLAlchemy's SQL and background link)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_columns(engine: sa.Engine) -> None:
    """A store whose `runs` table lacks a column this mapper reads (made by hand, or damaged) is refused here,
    not by the first query that names it."""
    with engine.connect() as conn:
        have = {c["name"] for c in sa.inspect(conn).get_columns("runs")}
    missing = [c.name for c in runs.columns if c.name not in have]
    if missing:
        named = ", ".join(missing[:MISSING_COLUMNS_NAMED]) + (", ..." if len(missing) > MISSING_COLUMNS_NAMED else "")
        raise MapperError(
            f"--store: its runs table lacks {len(missing)} of mapper's columns ({named}): not a mapper store or damaged"
        )


def migrate(engine: sa.Engine) -> int:
    """Apply the migrations the store lacks, in one transaction under the migration lock; the version."""
    latest = MIGRATIONS[-1][0]
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK})
        schema_version.create(conn, checkfirst=True)
        version = conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar() or 0
        if version > latest:
            raise MapperError(f"the store's schema is version {version}, newer than this mapper's ({latest}): upgrade")
        for step_version, step in MIGRATIONS:
            if step_version > version:
                step(conn)
                conn.execute(schema_version.delete())
                conn.execute(schema_version.insert().values(version=step_version))
        return max(version, latest)


def scoped(query: sa.Select, scope: RunScope) -> sa.Select:
    """Only the rows `scope` may read: a session's own (owner), the team's (no owner) when shared, or every row.
    The one place a reader's scope becomes a filter: the trends and a run's sheet both read through it."""
    if scope.every:
        return query
    allowed: list[sa.ColumnElement[bool]] = [runs.c.owner.is_(None)] if scope.team else []
    if scope.owner is not None:
        allowed.append(runs.c.owner == scope.owner)
    return query.where(sa.or_(*allowed)) if allowed else query.where(sa.false())


def read_scoped(store: str | sa.Engine, query: sa.Select, scope: RunScope) -> list[sa.Row]:
    """The rows of `query` that `scope` may read, from a store URL or an open engine: the one read path of the
    trends and a run's sheet. A store that cannot be read: one-line MapperError."""
    engine = open_engine(store) if isinstance(store, str) else store
    try:
        with engine.connect() as conn:
            return list(conn.execute(scoped(query, scope)).all())
    except sa.exc.SQLAlchemyError as exc:
        raise MapperError(f"--store: cannot read the store: {first_line(exc)}") from None
