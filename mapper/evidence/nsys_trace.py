"""Nsight Systems exports (`nsys export --type sqlite`): kernels, their launches and NVTX ranges, read within bounds.

An export's tables (schema: https://docs.nvidia.com/nsight-systems/2021.5/nsys-exporter/exported_data.html; columns
as Nsight Systems 2022.2 and 2024 write them, e.g. hpcgroup/pipit's test exports): CUPTI_ACTIVITY_KIND_KERNEL (start,
end in ns; correlationId; shortName / demangledName as StringIds ids; deviceId, streamId, globalPid),
CUPTI_ACTIVITY_KIND_RUNTIME (the CUDA runtime call of each correlationId, on its thread: globalTid), NVTX_EVENTS
(ranges: eventType 59 push/pop, 60 start/end; text, or textId into StringIds; globalTid). A serialized global id
holds the process in bits 24-47 and the thread in bits 0-23 (the exporter's "Serialized process and thread
identifiers" example). Each row becomes an event in Kineto's vocabulary (a kernel, a "cuda_runtime" launch, a
"user_annotation" module range or a "cpu_op" op range, as torch.autograd.profiler.emit_nvtx names them:
"aten::conv2d, seq = 12, ...") and torch_trace.trace_of_events ties kernels to launches (process and correlation
id) and launches to the ranges open on their thread at their start, as it does for a Kineto trace.

Bounds: the file at most MAX_TRACE_BYTES, opened read-only (a path as an immutable `file:` URI; an upload's bytes
deserialized into memory, queries only); at most MAX_TRACE_EVENTS rows in all; each value at most
MAX_TRACE_EVENT_BYTES; every query interrupted at TRACE_SQL_SECONDS. Anything else is one line.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.evidence.profiles import MAX_DUR_US
from mapper.evidence.torch_trace import MAX_NAME, MODULE_PATH, Event, TorchTrace, trace_of_events
from mapper.model.sandbox import open_regular_file

SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database (sqlite.org/fileformat.html)
KERNELS, RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
COPIES = {
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("gpu_memcpy", "Memcpy"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("gpu_memset", "Memset"),
}
NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange (ENUM_NSYS_EVENT_TYPE); marks and domains are not ranges
ID_BITS = 24  # a serialized global id: process in bits 24-47, thread in bits 0-23
ID_MASK = (1 << ID_BITS) - 1
CHECK_EVERY = 10_000  # SQLite virtual-machine steps between looks at the clock


def is_nsys_export(head: bytes) -> bool:
    """Whether the bytes open a SQLite database (an Nsight Systems export is one)."""
    return head.startswith(SQLITE_MAGIC)


def is_nsys_file(path: str | os.PathLike) -> bool:
    """Whether the file opens a SQLite database (False where it cannot be read: the reader that reads it says why)."""
    try:
        with open_regular_file(Path(path)) as f:
            return is_nsys_export(f.read(len(SQLITE_MAGIC)))
    except (OSError, MapperError):
        return False


def _one_line(label: str, exc: sqlite3.Error) -> MapperError:
    text = str(exc)[:120]
    if "interrupted" in text:
        return MapperError(f"{label}: reading it took past {limits.limit_text('TRACE_SQL_SECONDS')}; export fewer runs")
    if "too big" in text:
        return MapperError(
            f"{label}: a value is longer than {limits.limit_text('MAX_TRACE_EVENT_BYTES')}; give the export as written"
        )
    return MapperError(
        f"{label}: not a readable Nsight Systems export ({text}); give `nsys export --type sqlite`'s file"
    )


@contextmanager
def _connection(source: bytes | Path, label: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection whose queries stop at the time budget and whose values stop at the value limit."""
    try:
        if isinstance(source, bytes):
            conn = sqlite3.connect(":memory:")
            conn.deserialize(source)
        else:
            conn = sqlite3.connect(f"file:{quote(str(source.resolve()))}?mode=ro&immutable=1", uri=True)
    except (sqlite3.Error, OverflowError) as exc:
        raise _one_line(label, exc) if isinstance(exc, sqlite3.Error) else MapperError(f"{label}: too large") from None
    deadline = time.monotonic() + limits.TRACE_SQL_SECONDS
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), CHECK_EVERY)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.MAX_TRACE_EVENT_BYTES)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA trusted_schema = OFF")  # no function a hostile schema names runs
        yield conn
    except sqlite3.Error as exc:
        raise _one_line(label, exc) from None
    finally:
        conn.close()


class _Rows:
    """Rows of the export's tables, counted against MAX_TRACE_EVENTS in all."""

    def __init__(self, conn: sqlite3.Connection, label: str):
        self.conn, self.label, self.left = conn, label, limits.MAX_TRACE_EVENTS
        found = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 100000").fetchall()
        self.tables = {str(name) for (name,) in found}
        self.columns: dict[str, set[str]] = {}

    def has(self, table: str, *columns: str) -> bool:
        if table not in self.tables:
            return False
        if table not in self.columns:
            info = self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            self.columns[table] = {str(row[1]) for row in info}
        return set(columns) <= self.columns[table]

    def query(self, sql: str) -> Iterator[tuple]:
        for row in self.conn.execute(f"{sql} LIMIT {self.left + 1}"):
            self.left -= 1
            if self.left < 0:
                raise MapperError(
                    f"{self.label}: more than {limits.limit_text('MAX_TRACE_EVENTS')} rows of kernels, launches and"
                    " NVTX ranges; export fewer runs (nsys profile --capture-range)"
                )
            yield row


# Each row is checked and its ids unpacked by SQLite (a Python look at every value cost ~60 us a row): a usable row
# has integer start and end, end not before start, a duration under MAX_TRACE_EVENT_SECONDS; the rest are counted.
MAX_DUR_NS = int(MAX_DUR_US * 1e3)


def _usable(t: str) -> str:
    """The SQL condition a usable row of table alias `t` meets."""
    return (
        f"typeof({t}.start) = 'integer' AND typeof({t}.end) = 'integer' AND {t}.end >= {t}.start"
        f" AND {t}.end - {t}.start <= {MAX_DUR_NS}"
    )


def _process(column: str) -> str:
    """A serialized global id's process (bits 24-47), 0 where the value is not an integer."""
    return f"(CASE WHEN typeof({column}) = 'integer' THEN ({column} >> {ID_BITS}) & {ID_MASK} ELSE 0 END)"


def _thread(column: str) -> str:
    """A serialized global id as "process/thread"."""
    return (
        f"({_process(column)} || '/' || (CASE WHEN typeof({column}) = 'integer' THEN {column} & {ID_MASK} ELSE 0 END))"
    )


def _key(process: str, correlation: str) -> str:
    """One correlation id per process (CUPTI numbers each process's calls from 1): process << 32 | id, -1 where the
    id is not a 32-bit integer."""
    return (
        f"(CASE WHEN typeof({correlation}) = 'integer' AND {correlation} BETWEEN 0 AND 4294967295"
        f" THEN ({process} << 32) | {correlation} ELSE -1 END)"
    )


def _skipped(rows: _Rows, table: str, alias: str, where: str = "1") -> int:
    """Rows of the table (those `where` selects) that are not usable: counted, not read."""
    query = f"SELECT count(*) FROM {table} AS {alias} WHERE ({where}) AND NOT ({_usable(alias)})"
    return int(rows.conn.execute(query).fetchone()[0])


def _range(text: str) -> tuple[str, str]:
    """(category, name) of an NVTX range in Kineto's words: emit_nvtx's "aten::addmm, seq = 4, op_id = 9" is the
    op "aten::addmm"; a dotted module path (record_function("layer1.0.conv1")) is a scope; the rest are kept as
    annotations that name no module."""
    name = text.split(", ", 1)[0].strip()[:MAX_NAME]
    if "::" in name and not name.startswith("ProfilerStep#"):
        return "cpu_op", name
    return "user_annotation", name if MODULE_PATH.fullmatch(name) or name.startswith("ProfilerStep#") else text


def _gpu_events(rows: _Rows, share) -> tuple[list[Event], int]:
    events, skipped = [], 0
    located = (
        "'/gpu' || substr(CAST(k.deviceId AS TEXT), 1, 16) || '/stream' || substr(CAST(k.streamId AS TEXT), 1, 16)"
    )
    columns = (
        f"k.start * 1e-3, (k.end - k.start) * 1e-3, {_process('k.globalPid')} || {located},"
        f" {_key(_process('k.globalPid'), 'k.correlationId')}"
    )
    name = "COALESCE(substr(s.value, 1, 512), substr(d.value, 1, 512), '')"
    queries = []
    if rows.has("StringIds", "id", "value"):
        sql = (
            f"SELECT {columns}, {name} FROM {KERNELS} AS k LEFT JOIN StringIds AS s ON s.id = k.shortName"
            f" LEFT JOIN StringIds AS d ON d.id = k.demangledName WHERE {_usable('k')}"
        )
        queries.append((sql, "kernel", KERNELS))
    for table, (cat, what) in COPIES.items():
        if rows.has(table, "start", "end", "correlationId", "deviceId", "streamId", "globalPid"):
            queries.append((f"SELECT {columns}, '{what}' FROM {table} AS k WHERE {_usable('k')}", cat, table))
    for query, cat, table in queries:
        skipped += _skipped(rows, table, "k")
        for ts_us, dur_us, thread, key, text in rows.query(query):
            events.append(Event(cat, share(str(text)[:MAX_NAME]), ts_us, dur_us, share(str(thread)), int(key)))
    return events, skipped


def _host_events(rows: _Rows, share) -> tuple[list[Event], int]:
    events: list[Event] = []
    skipped = 0
    if rows.has(RUNTIME, "start", "end", "globalTid", "correlationId", "nameId"):
        # some versions write a call twice (cudaLaunchKernel and _v7000 inside it): the first of each id is kept
        first: dict[int, Event] = {}
        key = _key(_process("r.globalTid"), "r.correlationId")
        where = f"{_usable('r')} AND {key} >= 0"
        skipped += _skipped(rows, RUNTIME, "r", "r.correlationId IS NOT NULL") + int(
            rows.conn.execute(f"SELECT count(*) FROM {RUNTIME} AS r WHERE {_usable('r')} AND {key} < 0").fetchone()[0]
        )
        for ts_us, dur_us, thread, corr, text in rows.query(
            f"SELECT r.start * 1e-3, (r.end - r.start) * 1e-3, {_thread('r.globalTid')}, {key},"
            f" substr(s.value, 1, 512) FROM {RUNTIME} AS r LEFT JOIN StringIds AS s ON s.id = r.nameId WHERE {where}"
        ):
            event = Event("cuda_runtime", share(str(text or "")[:MAX_NAME]), ts_us, dur_us, share(str(thread)), corr)
            if corr not in first or ts_us < first[corr].ts_us:
                first[corr] = event
        events += first.values()
    if rows.has(NVTX, "start", "end", "eventType", "text", "textId", "globalTid"):
        text = "COALESCE(substr(n.text, 1, 512), substr(s.value, 1, 512), '')"
        ranges = f"n.eventType IN {NVTX_RANGES} AND n.end IS NOT NULL"
        skipped += _skipped(rows, NVTX, "n", ranges)
        for ts_us, dur_us, thread, name in rows.query(
            f"SELECT n.start * 1e-3, (n.end - n.start) * 1e-3, {_thread('n.globalTid')}, {text} FROM {NVTX} AS n"
            f" LEFT JOIN StringIds AS s ON s.id = n.textId WHERE {ranges} AND {_usable('n')}"
        ):
            cat, kept = _range(str(name))
            events.append(Event(cat, share(kept), ts_us, dur_us, share(str(thread)), -1))
    return events, skipped


def _source(profile: bytes | str | os.PathLike, label: str) -> bytes | Path:
    if isinstance(profile, bytes):
        if len(profile) > limits.MAX_TRACE_BYTES:
            raise MapperError(f"{label}: larger than {limits.limit_text('MAX_TRACE_BYTES')}; export fewer runs")
        return profile
    path = Path(profile)
    try:
        if not path.is_file():
            raise MapperError(f"{label}: not a regular file; give the .sqlite file nsys export wrote")
        if path.stat().st_size > limits.MAX_TRACE_BYTES:
            raise MapperError(f"{label}: larger than {limits.limit_text('MAX_TRACE_BYTES')}; export fewer runs")
    except OSError as exc:
        raise MapperError(f"{label}: cannot read it ({exc.strerror}); check the path") from None
    return path


def read_nsys_export(profile: bytes | str | os.PathLike, label: str = "export") -> TorchTrace:
    """An Nsight Systems SQLite export (a path, or an upload's bytes) -> its kernels, each with its launching op and
    module scope from the NVTX ranges open on the launching thread, and its launch costs."""
    source = _source(profile, label)
    strings: dict[str, str] = {}
    share = lambda text: strings.setdefault(text, text)  # kernel and range names repeat per step: held once
    with _connection(source, label) as conn:
        rows = _Rows(conn, label)
        if not rows.has(KERNELS, "start", "end", "correlationId", "deviceId", "streamId", "globalPid"):
            raise MapperError(
                f"{label}: a SQLite file without the {KERNELS} table nsys writes; profile with --trace=cuda,nvtx"
                " and give `nsys export --type sqlite`'s file"
            )
        gpu, skipped_gpu = _gpu_events(rows, share)
        host, skipped_host = _host_events(rows, share)
    if not gpu:
        raise MapperError(f"{label}: an Nsight Systems export with no kernel that ran; profile with --trace=cuda")
    return trace_of_events(gpu + host, skipped_gpu + skipped_host, label, tool="Nsight Systems")
