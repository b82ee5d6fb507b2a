"""What an untrusted model may touch when ONNX Runtime runs it: no file, and bounded time and memory.

Two pieces, used by the shape-inference fallback (ort_shapes) and by `measure_model`:
`model_tensors` finds every tensor anywhere in a model (initializers, sparse initializers, tensor
attributes such as a Constant's `value`, in every If/Loop/Scan body and function), so that a caller
can rewrite or refuse each external-data reference before ONNX Runtime sees the model: ORT resolves
a reference against its working directory and reads the file, whatever the model's origin.
`run_child` runs a Python script in a child process that starts in its own empty scratch directory,
under RLIMIT_AS and RLIMIT_CPU, in its own process group, killed with the group at a wall-clock timeout.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

import onnx

from mapper.core.errors import MapperError
from mapper.core.settings import setting, setting_text


class Found(NamedTuple):
    where: str  # "node 'c' attribute 'value' in graph 'body' (node 'loop')"
    tensor: onnx.TensorProto
    sparse: bool  # the values or indices of a SparseTensorProto


def _tensor_parts(where: str, t) -> Iterator[Found]:
    if isinstance(t, onnx.SparseTensorProto):
        yield Found(f"{where} (sparse values)", t.values, True)
        yield Found(f"{where} (sparse indices)", t.indices, True)
    else:
        yield Found(where, t, False)


def model_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, list, onnx.GraphProto | None]]:
    """(where, nodes, graph) for the main graph, every function (graph None), every training graph and
    every subgraph of theirs at any depth (If branches, Loop and Scan bodies, any graph attribute)."""
    stack: list = [("graph", model.graph.node, model.graph)]
    stack += [(f"function {f.name!r}", f.node, None) for f in model.functions]
    for i, info in enumerate(model.training_info):
        stack += [(f"training graph {i}", g.node, g) for g in (info.initialization, info.algorithm)]
    while stack:
        where, nodes, graph = stack.pop()
        yield where, nodes, graph
        for n in nodes:
            for a in n.attribute:
                bodies = ([a.g] if a.HasField("g") else []) + list(a.graphs)
                stack.extend((f"graph {g.name!r} (node {n.name or n.op_type!r})", g.node, g) for g in bodies)


def model_tensors(model: onnx.ModelProto) -> Iterator[Found]:
    """Every TensorProto in the model with where it is: dense and sparse initializers and every tensor
    attribute (a Constant's value, sparse_value...), in every graph `model_graphs` yields."""
    for where, nodes, graph in model_graphs(model):
        if graph is not None:
            for t in graph.initializer:
                yield Found(f"initializer {t.name!r} in {where}", t, False)
            for s in graph.sparse_initializer:
                yield from _tensor_parts(f"sparse initializer {s.values.name!r} in {where}", s)
        for n in nodes:
            for a in n.attribute:
                tensors = ([a.t] if a.HasField("t") else []) + list(a.tensors)
                tensors += ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors)
                for t in tensors:
                    yield from _tensor_parts(f"node {n.name or n.op_type!r} attribute {a.name!r} in {where}", t)


def is_external(t: onnx.TensorProto) -> bool:
    """A tensor whose bytes ONNX Runtime would read from a file (either marker suffices for it or onnx)."""
    return t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data) > 0


def external_tensors(model: onnx.ModelProto) -> list[Found]:
    return [found for found in model_tensors(model) if is_external(found.tensor)]


def drop_external_reference(t: onnx.TensorProto) -> None:
    """Forget where the bytes were; dims and type stay (enough for shape inference, not to run)."""
    t.data_location = onnx.TensorProto.DEFAULT
    del t.external_data[:]


CHILD_STDOUT = ".stdout"  # the file in the scratch directory that takes the child's stdout (`keep` it to read it)


@dataclass(frozen=True, slots=True)
class ChildResult:
    returncode: int
    stderr_tail: str  # the end of what the child wrote on stderr (for a one-line error)
    files: dict[str, bytes]  # what the child left in its scratch directory, by name (those asked for)


def _child_prologue(memory_bytes: int, cpu_s: int) -> str:
    # The child sets its limits itself, first thing: preexec_fn is unsafe in a threaded parent (Streamlit).
    # No file it writes may exceed its memory cap either (RLIMIT_FSIZE): a profile cannot fill the disk.
    # A limit the child inherited lower (a server run under `ulimit -v`) stays: only root may raise a hard limit.
    return (
        "import resource\n"
        "def _cap(kind, soft, hard):\n"
        "    _, held = resource.getrlimit(kind)\n"
        "    low = lambda v: v if held == resource.RLIM_INFINITY else min(v, held)\n"
        "    resource.setrlimit(kind, (low(soft), low(hard)))\n"
        f"_cap(resource.RLIMIT_AS, {memory_bytes}, {memory_bytes})\n"
        f"_cap(resource.RLIMIT_FSIZE, {memory_bytes}, {memory_bytes})\n"
        f"_cap(resource.RLIMIT_CPU, {cpu_s}, {cpu_s + 5})\n"
        "del _cap\n"
    )


def run_child(
    script: str,
    args: list[str],
    stdin: bytes,
    *,
    memory_limit: str,
    cpu_limit: str,
    wall_limit: str,
    keep: dict[str, int] | None = None,
) -> ChildResult:
    """Run `script` (Python source that imports nothing of mapper) as `python -I` in a fresh, empty scratch
    directory, under the values of the named limits of mapper/core/limits.py (as set at start:
    mapper/core/settings.py). `keep`: files the child writes in its scratch directory to hand back (name -> most
    bytes); its stdout and stderr go to files there too, so a chatty child cannot grow the parent's memory. A
    child still running at the wall limit is killed with its process group: MapperError naming the limit."""
    memory, cpu, wall = (setting(name) for name in (memory_limit, cpu_limit, wall_limit))
    with tempfile.TemporaryDirectory(prefix="mapper-child-") as scratch:
        cmd = [sys.executable, "-I", "-c", _child_prologue(memory, cpu) + script, *args]
        with (
            open(os.path.join(scratch, CHILD_STDOUT), "wb") as out,
            open(os.path.join(scratch, ".stderr"), "wb") as err,
        ):
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=scratch,
                env=_child_env(scratch),
                start_new_session=True,
            )
        try:
            proc.communicate(stdin, timeout=wall)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise MapperError(f"ran past {setting_text(wall_limit)} and was killed") from None
        except BaseException:  # the parent interrupted: the child's whole group goes too
            _kill_group(proc)
            raise
        files = {name: _read_back(os.path.join(scratch, name), most) for name, most in (keep or {}).items()}
        tail = (_read_back(os.path.join(scratch, ".stderr"), 1 << 20) or b"")[-2000:]
    return ChildResult(
        proc.returncode, tail.decode("utf-8", "replace"), {k: v for k, v in files.items() if v is not None}
    )


def _child_env(scratch: str) -> dict[str, str]:
    """A bare environment (none of the server's variables) whose home and temp are the scratch directory:
    ONNX Runtime keeps a telemetry database and a device id under $HOME/.cache, which stay in there."""
    env = {"HOME": scratch, "TMPDIR": scratch, "PATH": os.defpath, "LC_ALL": "C.UTF-8"}
    if "LD_LIBRARY_PATH" in os.environ:  # where the interpreter itself may need it to start
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the child's process group while its pid is not yet reaped (so the group id is not reused)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
    proc.wait()


class NotRegularFile(OSError):
    """A path that names a FIFO, a device, a directory or a socket: reading it could block or never end."""


def open_regular_file(path: str | os.PathLike, *, follow_links: bool = True) -> BinaryIO:
    """Open a regular file for reading, or raise OSError (NotRegularFile, strerror "not a regular file").

    Checked before opening (os.stat: a device is never opened) and again on the open file (fstat: a path
    swapped in between is caught); the open does not block on a FIFO (O_NONBLOCK)."""
    if follow_links and not stat.S_ISREG(os.stat(path).st_mode):
        raise NotRegularFile(errno.EINVAL, "not a regular file", os.fspath(path))
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    f = os.fdopen(os.open(path, flags), "rb")
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise NotRegularFile(errno.EINVAL, "not a regular file", os.fspath(path))
    return f


def _read_back(path: str, most: int) -> bytes | None:
    """A file the child wrote, if it is a regular file (not a link it planted) of at most `most` bytes."""
    try:
        with open_regular_file(path, follow_links=False) as f:
            data = f.read(most + 1)
    except OSError:
        return None
    return data if len(data) <= most else None
