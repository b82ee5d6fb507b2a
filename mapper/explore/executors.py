"""Where a sweep's tasks run: in this process, a local process pool, or a Dask cluster.

Each executor runs one plain function over a list of picklable tasks and yields (index, result)
as tasks finish, in whatever order; callers sort by a stable key, so the table never depends on
which executor ran it. Dask is imported only when asked for (it is an optional dependency).
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TypeVar

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.extras import require
from mapper.core.vocab import ExecutorKind, values

KINDS = values(ExecutorKind)
_Task = TypeVar("_Task")
_Result = TypeVar("_Result")
_Shared = TypeVar("_Shared")


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    """What the user asked for: `kind`, how many local workers, or a scheduler address."""

    kind: ExecutorKind = ExecutorKind.INPROCESS
    workers: int | None = None  # processes / dask LocalCluster: worker count (None: CPU count)
    scheduler: str | None = None  # dask: tcp://HOST:PORT of a running scheduler (else a LocalCluster)
    dask_processes: bool = True  # dask LocalCluster: worker processes (False: threads in this process)

    def describe(self) -> str:
        if self.kind == ExecutorKind.DASK:
            return (
                f"dask scheduler {self.scheduler}"
                if self.scheduler
                else f"dask LocalCluster, {self.workers or default_workers()} workers x 1 thread"
            )
        if self.kind == ExecutorKind.PROCESSES:
            return f"process pool, {self.workers or default_workers()} workers"
        return "in-process"


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def executor_spec(
    kind: str | None = None, workers: int | None = None, scheduler: str | None = None, dask_processes: bool = True
) -> ExecutorSpec:
    """Validate once. A scheduler address or a worker count without a kind means Dask."""
    if kind is None:
        kind = ExecutorKind.DASK if scheduler or workers else ExecutorKind.INPROCESS
    if kind not in KINDS:
        raise MapperError(f"executor {kind!r} is not one of {', '.join(KINDS)}")
    if workers is not None and not (isinstance(workers, int) and 1 <= workers <= limits.MAX_WORKERS):
        raise MapperError(f"workers {workers!r} must be an integer from 1 to {limits.limit_text('MAX_WORKERS')}")
    if scheduler is not None and kind != ExecutorKind.DASK:
        raise MapperError("a scheduler address needs the dask executor (--executor dask)")
    if scheduler is not None and "://" not in scheduler:
        raise MapperError(f"scheduler {scheduler!r} must look like tcp://HOST:PORT")
    return ExecutorSpec(ExecutorKind(kind), workers, scheduler, dask_processes)


def run_tasks(
    fn: Callable[[_Shared, _Task], _Result],
    tasks: Sequence[_Task],
    shared: _Shared,
    spec: ExecutorSpec = ExecutorSpec(),
) -> Iterator[tuple[int, _Result]]:
    """Yield (task index, fn(shared, task)) as each task finishes. An exception in a task propagates.

    `shared` (what every task reads: a sweep's parsed models and profiles) goes to each worker once, not with
    each task: a process pool's initializer installs it, Dask scatters it to every worker, and a worker's tasks
    then share one object (its model handles' caches warm from one task to the next)."""
    if not tasks:
        return
    if spec.kind == ExecutorKind.INPROCESS:
        for i, task in enumerate(tasks):
            yield i, fn(shared, task)
    elif spec.kind == ExecutorKind.PROCESSES:
        yield from _run_pool(fn, tasks, spec.workers or default_workers(), shared)
    else:
        yield from _run_dask(fn, tasks, spec, shared)


_installed: dict[str, object] = {}  # a pool worker's `shared`, set once by its initializer (never in the parent)


def _install(shared: object) -> None:
    _installed["shared"] = shared


def _with_installed(fn: Callable[[_Shared, _Task], _Result], task: _Task) -> _Result:
    return fn(_installed["shared"], task)  # type: ignore[arg-type]  # what `_install` put there: the run's shared


def _run_pool(
    fn: Callable[[_Shared, _Task], _Result], tasks: Sequence[_Task], workers: int, shared: _Shared
) -> Iterator[tuple[int, _Result]]:
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_install, initargs=(shared,)) as pool:
        futures = {pool.submit(_with_installed, fn, task): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def _run_dask(
    fn: Callable[[_Shared, _Task], _Result], tasks: Sequence[_Task], spec: ExecutorSpec, shared: _Shared
) -> Iterator[tuple[int, _Result]]:
    require("distributed", "the dask executor")  # absent: the one line naming the `dask` extra
    from distributed import Client, LocalCluster
    from distributed import as_completed as dask_completed

    cluster, started = None, contextlib.ExitStack()
    try:
        if spec.scheduler:
            client = Client(spec.scheduler, timeout="10s")
        else:
            if _forks_workers(spec):
                started.enter_context(_forked_workers(fn))
            cluster = LocalCluster(
                n_workers=spec.workers or default_workers(),
                threads_per_worker=1,
                processes=spec.dask_processes,
                dashboard_address=":0",
            )  # any free port
            client = Client(cluster)
    except OSError as exc:
        raise MapperError(f"cannot reach the Dask scheduler {spec.scheduler}: {exc}") from exc
    try:
        # once to every worker; each task names the one copy its worker holds
        held = client.scatter(shared, broadcast=True, hash=False)
        # pure=False: every task is distinct work; the key carries its index so results map back
        futures = [
            client.submit(fn, held, task, key=f"mapper-task-{i}-{id(tasks)}", pure=False)
            for i, task in enumerate(tasks)
        ]
        index = {f.key: i for i, f in enumerate(futures)}
        for future in dask_completed(futures):
            yield index[future.key], future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        started.close()


# What a local worker imports before its first task: the engine's stages (the task's own module is added)
WORKER_PRELOAD = ("mapper.pipeline", "mapper.explore.sweep")


def _forks_workers(spec: ExecutorSpec) -> bool:
    """Whether `spec` starts a LocalCluster whose worker processes fork from a fork server (`_forked_workers`);
    where the platform has none, Dask's own start method stays."""
    return (
        spec.kind == ExecutorKind.DASK
        and not spec.scheduler
        and spec.dask_processes
        and "forkserver" in multiprocessing.get_all_start_methods()
    )


def _preload(fn: Callable) -> list[str]:
    """The fork server's imports: Dask's distributed first, then the engine's stages and the task's module (once,
    where it is one of the stages: the sweep's task is)."""
    return list(dict.fromkeys(["distributed", *WORKER_PRELOAD, fn.__module__]))


def start_workers_early(spec: ExecutorSpec, fn: Callable) -> None:
    """Start now what `run_tasks(fn, ..., spec)` will start its workers from, where that is a LocalCluster's fork
    server: it imports Dask and the engine (~0.85 s) on the other core while this process imports its own and plans
    the tasks, in place of the cluster waiting for it (its start to the first task: 1.7 s cold, 0.2 s with the server
    up, two workers on this 2-core machine). Anything else starts nothing; a missing Dask is left to `run_tasks`'s
    one line."""
    if not _forks_workers(spec) or importlib.util.find_spec("distributed") is None:
        return
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(_preload(fn))
    forkserver.ensure_running()  # spawns the server and returns; the server imports the preload on its own


@contextlib.contextmanager
def _forked_workers(fn: Callable) -> Iterator[None]:
    """A LocalCluster's worker processes forked from a fork server that imported Dask and the engine once, in place
    of each spawned worker importing them again (spawn: ~0.3 s more to the first task and ~0.3 s to close, two
    workers on this 2-core machine). The fork server is a fresh single-threaded process, so nothing is forked
    beside a running thread (plain `fork` from this process would be)."""
    import dask
    from distributed.utils import get_mp_context

    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        # only a server not yet started reads the list (`start_workers_early` may have started it with the same)
        get_mp_context().set_forkserver_preload(_preload(fn))
        yield
