"""Recording runs: a mapping, serving, measurement, comparison or review document -> one row of the store.

`record(store, document, command=...)` is the one writer every command (and the dashboard) calls. The
slice key is what a trend follows across revisions: the model's and the profile's names, the dims and
the options, not their hashes or the engine version (those are what a revision changes; each row keeps them).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import subprocess
import time
import uuid
import zlib
from datetime import UTC, datetime

import sqlalchemy as sa

from mapper.core.errors import MapperError
from mapper.report.verdict import assessed_failure
from mapper.store.owners import EVERY_RUN, RunScope, new_public_id, public_run_id
from mapper.store.schema import first_line, open_engine, read_scoped, runs

WRITE_ATTEMPTS = 8  # SQLite 'database is locked' past the busy timeout, a PostgreSQL serialization failure
RETRY_BASE_S = 0.05  # backoff doubles from here, jittered, between attempts
GIT_TIMEOUT_S = 5  # `git rev-parse` for the default revision label
UNLABELLED = "unlabelled"  # the revision of a run outside a git work tree and without --revision


def default_revision(cwd: str | None = None) -> str:
    """The git commit of the current directory (12 hex digits), or 'unlabelled' outside a work tree."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            check=False,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return UNLABELLED
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else UNLABELLED


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def slice_key(command: str, model_name: str, hardware_name: str, dims: dict, options: dict) -> str:
    return hashlib.sha256(_canonical([command, model_name, hardware_name, dims, options]).encode()).hexdigest()


def _first(section: dict, *keys: str) -> float | None:
    for key in keys:
        if isinstance(section.get(key), int | float) and not isinstance(section.get(key), bool):
            return float(section[key])
    return None


def kpis_of(document: dict) -> dict:
    """The KPIs a document carries (None where it has none): totals, the serving section (request
    percentiles or TTFT/TPOT), memory per device, the first failure, and what a measured run says beside them:
    its percentiles, MFU, memory-stall fraction, error and, for a trace, the share of it the mapping matched."""
    totals, serving = document.get("totals") or {}, document.get("serving") or {}
    measured = (document.get("measured") or {}).get("model") or {}
    trace = ((document.get("measured") or {}).get("measurement") or {}).get("trace") or {}
    kpis = {
        "latency_s": _first(totals, "latency_s") or _first(serving, "latency_p50_s"),
        "p50_s": _first(serving, "p50_s", "latency_p50_s"),
        "p95_s": _first(serving, "p95_s"),
        "p99_s": _first(serving, "p99_s", "latency_p99_s"),
        "ttft_p99_s": _first(serving, "ttft_p99_s"),
        "tpot_p99_s": _first(serving, "tpot_p99_s"),
        "throughput_per_s": _first(serving, "throughput_per_s", "throughput_requests_per_s")
        or _first(totals, "throughput_per_s"),
        "mfu": _first(totals, "mfu"),
        "memory_stall_fraction": _first(totals, "memory_stall_fraction"),
        "perf_per_watt": _first(totals, "perf_per_watt"),
        "memory_per_device_bytes": _first(document.get("memory") or {}, "per_device_bytes"),
        "measured_p50_s": _first(measured, "measured_p50_s"),
        "measured_p99_s": _first(measured, "measured_p99_s"),
        "measured_mfu": _first(measured, "measured_mfu"),
        "measured_memory_stall_fraction": _first(measured, "measured_memory_stall_fraction"),
        "measured_error": _first(measured, "error"),
        "measured_matched_share": _first(trace, "matched_share"),
    }
    failure = None
    if totals and document.get("kernels") is not None:
        finding = assessed_failure(document)
        failure = f"{finding.check}: {finding.sentence}"
    return {**kpis, "first_failure": failure}


def _row(document: dict, command: str, revision: str | None, model_name: str | None, owner: str | None) -> dict:
    model, hardware = document.get("model") or {}, document.get("hardware") or {}
    dims, options = dict(model.get("dims") or {}), dict(document.get("options") or {})
    names = (str(model_name or model.get("name") or "?"), str(hardware.get("name") or "?"))
    found = kpis_of(document)
    return {
        "uid": uuid.uuid4().hex,
        "public_id": new_public_id(),
        "owner": owner,
        "recorded_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "command": command,
        "revision": revision or default_revision(),
        "slice_key": slice_key(command, *names, dims, options),
        "model_name": names[0],
        "model_sha256": str(model.get("sha256") or ""),
        "dims": _canonical(dims),
        "hardware_name": names[1],
        "hardware_sha256": str(hardware.get("sha256") or ""),
        "options": _canonical(options),
        "engine_version": str(document.get("engine_version") or ""),
        **found,
        "document": json.dumps(document, sort_keys=True, allow_nan=False),
    }


def _transient(exc: sa.exc.DBAPIError) -> bool:
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text or "serializ" in text or "deadlock" in text


def record(
    store: str | sa.Engine,
    document: dict,
    *,
    command: str,
    revision: str | None = None,
    sheet: tuple[bytes, str] | None = None,
    model_name: str | None = None,
    owner: str | None = None,
) -> int:
    """Write one run; its row id. `sheet`: (bytes, format: xlsx, json...); the KPIs are `kpis_of(document)`'s.
    `model_name` the document's model name (the CLI passes the file's stem: two exports may share a graph name).
    `owner`: the recording session's `owners.owner_of(token)` (the dashboard's); None: a team run (CLI, CI).
    A transient lock is retried; the row's uid makes a retry after a lost reply a no-op, never a double."""
    engine = open_engine(store) if isinstance(store, str) else store
    row = _row(document, command, revision, model_name, owner)
    data, fmt = sheet or (None, None)
    row.update(sheet=gzip.compress(data, mtime=0) if data is not None else None, sheet_format=fmt)
    attempt = 0
    while True:  # until a write commits or fails for good
        attempt += 1
        try:
            with engine.begin() as conn:
                return conn.execute(runs.insert().values(**row).returning(runs.c.id)).scalar_one()
        except sa.exc.IntegrityError as exc:
            found = _run_id(engine, row["uid"])
            if found is None:
                raise MapperError(f"--store: cannot record the run: {str(exc.orig).strip()}") from None
            return found  # the uid is there: an earlier attempt committed
        except sa.exc.OperationalError as exc:
            if not _transient(exc) or attempt >= WRITE_ATTEMPTS:
                raise MapperError(f"--store: cannot record the run: {str(exc.orig).strip()}") from None
            time.sleep(RETRY_BASE_S * 2**attempt * (1 + random.random()))
        except sa.exc.SQLAlchemyError as exc:  # a store damaged since it was opened
            raise MapperError(f"--store: cannot record the run: {first_line(exc)}") from None


def _run_id(engine: sa.Engine, uid: str) -> int | None:
    with engine.connect() as conn:
        return conn.execute(sa.select(runs.c.id).where(runs.c.uid == uid)).scalar()


def run_sheet(store: str | sa.Engine, public_id: str, scope: RunScope = EVERY_RUN) -> tuple[bytes, str] | None:
    """(sheet bytes, format) of the run whose link carries `public_id`, when `scope` may read it; None when it has
    no sheet, there is no such run, or it is another session's (the three read alike: an id says nothing).
    A malformed id or a damaged sheet: one-line MapperError."""
    public_id = public_run_id(public_id)
    rows = read_scoped(store, sa.select(runs.c.sheet, runs.c.sheet_format).where(runs.c.public_id == public_id), scope)
    got = rows[0] if rows else None
    if got is None or got.sheet is None:
        return None
    try:
        return gzip.decompress(got.sheet), str(got.sheet_format or "bin")
    except (OSError, EOFError, zlib.error):
        raise MapperError(f"run {public_id}: its sheet in the store is damaged (not gzip data)") from None
