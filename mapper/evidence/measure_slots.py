"""Turns at running a model: at most MEASURE_CONCURRENT measure children at once on the machine, the rest in line.

Every dashboard session and every `mapper measure` of one user shares a directory of slot files (MAPPER_MEASURE_SLOTS
names another); holding a slot is holding an exclusive flock on one of MEASURE_CONCURRENT files in it. flock locks
belong to an open file, so two sessions (threads) of one server exclude each other as two processes do, and a
process that dies lets go of its slot and its place. A measurement that finds every slot taken takes a ticket (a
locked file named by the time it came) and waits, told its place in line, until a slot frees or
MEASURE_QUEUE_SECONDS pass: then it is refused in one line. Only the first MEASURE_CONCURRENT in line try the
slots, so the line is served in order.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mapper.core.errors import MapperError
from mapper.core.settings import setting, setting_text

SLOTS_ENV = "MAPPER_MEASURE_SLOTS"  # the directory of slot files (default: one per user in the temp directory)
POLL_S = 0.2  # how often a waiting measurement looks at the slots and its place again


def slots_dir() -> Path:
    """The shared directory, created private to this user; one planted by someone else is refused."""
    path = Path(os.environ.get(SLOTS_ENV) or Path(tempfile.gettempdir()) / f"mapper-measure-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise MapperError(
            f"measure: {str(path)[:120]} (where measurements take turns) is not a directory of this user's that "
            f"only it can write; remove it, or set {SLOTS_ENV} to another"
        )
    (path / "line").mkdir(mode=0o700, exist_ok=True)
    return path


def _try_lock(path: Path, mode: int = fcntl.LOCK_EX) -> int | None:
    """An open descriptor holding a lock on `path` (created if need be), or None where another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _free_slot(folder: Path, count: int) -> int | None:
    for i in range(count):
        if (fd := _try_lock(folder / f"slot-{i}")) is not None:
            return fd
    return None


def _ahead(line: Path, ticket: str) -> int:
    """Live tickets older than `ticket`; a ticket whose holder died (its lock free) is cleared on the way."""
    ahead = 0
    for name in sorted(os.listdir(line)):
        if name >= ticket:
            break
        if name.startswith("."):  # a ticket being drawn (_ticket): not in line yet
            continue
        fd = _try_lock(line / name, fcntl.LOCK_SH)
        if fd is None:
            ahead += 1
            continue
        with contextlib.suppress(FileNotFoundError):
            (line / name).unlink()
        os.close(fd)
    return ahead


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")  # noqa: PLR2004
    return f"{n}{suffix}"


@contextlib.contextmanager
def measure_slot(label: str, on_wait: Callable[[int], None] | None = None) -> Iterator[None]:
    """Hold one of the MEASURE_CONCURRENT slots while the body runs; wait in line for one first if need be,
    calling on_wait(place) (1: next) whenever the place changes. MapperError (one line) past MEASURE_QUEUE_SECONDS."""
    count, patience = setting("MEASURE_CONCURRENT"), setting("MEASURE_QUEUE_SECONDS")
    fd = _take_turn(slots_dir(), count, patience, label, on_wait)
    try:
        yield
    finally:
        os.close(fd)  # lets go of the slot


def _ticket(line: Path) -> tuple[str, int]:
    """A place at the end of the line: a file named by the time, locked before it shows (renamed into place),
    so that no one takes it for a dead one's."""
    name = f"{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
    draft = line / f".{name}"
    fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(draft, line / name)
    return name, fd


def _take_turn(folder: Path, count: int, patience: int, label: str, on_wait) -> int:
    """A slot's locked descriptor, once this measurement is among the first `count` in line and a slot is free."""
    line = folder / "line"
    ticket, mine = _ticket(line)
    deadline, place = time.monotonic() + patience, 0
    try:
        while True:
            ahead = _ahead(line, ticket)
            if ahead < count and (fd := _free_slot(folder, count)) is not None:
                return fd
            if time.monotonic() >= deadline:
                raise MapperError(
                    f"measure {label}: still {ordinal(ahead + 1)} in line after "
                    f"{setting_text('MEASURE_QUEUE_SECONDS')}, as runs at once are limited to "
                    f"{setting_text('MEASURE_CONCURRENT')}; try again later"
                )
            if ahead + 1 != place:
                place = ahead + 1
                if on_wait is not None:
                    on_wait(place)
            time.sleep(POLL_S)
    finally:
        with contextlib.suppress(FileNotFoundError):
            (line / ticket).unlink()
        os.close(mine)
