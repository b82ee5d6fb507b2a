"""The model handle: one parsed model and every cache of it.

`open_model(source)` reads a built-in name, a path or uploaded bytes once, parses it once and keeps
its bytes, hash, name, dims with their roles and branch inputs. `model.bind(dims)` gives the
`Workload` that `map_workload` takes. Everything the engine keeps for reuse across bindings,
profiles and options lives in the handle's `ModelCaches` (mapper/core/caches.py, where every key is
written): no module of the engine keeps state of its own.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from mapper.core.caches import ModelCaches
from mapper.core.errors import MapperError
from mapper.core.footprint import Footprint, model_footprint
from mapper.core.graph import ReleasedPrecision
from mapper.model.bindings import apply_bindings, dim_roles_of
from mapper.model.branches import branch_inputs
from mapper.model.onnx_import import GENERIC_GRAPH_NAMES, count_nodes, import_graph, parse_model, read_model_structure
from mapper.work.workload import Workload, analyze_graph
from mapper.zoo import ZOO_NAMES, released_precision, zoo_model

# Bindings a built-in model starts from when the user gives none (the dashboard's
# default view; files get no defaults: an unbound dim there is an error).
BUILTIN_DEFAULT_DIMS = {"batch": 1, "seq": 128, "past": 0}


@dataclass(frozen=True, slots=True, eq=False)
class ModelHandle:
    """A model read and parsed once; `bind` gives its workload at concrete shapes."""

    source: str  # what reproduces it: a built-in name, a path, or "" for uploaded bytes
    data: bytes = field(repr=False)
    sha256: str
    name: str
    proto: onnx.ModelProto = field(repr=False)
    builtin: bool
    roles: dict[str, str]  # each free dim (and branch input) -> its role (see `dim_roles`)
    branches: tuple[str, ...]  # boolean inputs that a top-level If branches on
    # the precision the model is published in: a built-in's table row, a config's torch_dtype; None for an ONNX
    # file or upload, whose weight tensors say (`plan.precision.released_precision`)
    released: ReleasedPrecision | None
    caches: ModelCaches = field(default_factory=ModelCaches, repr=False)

    def __reduce__(self):  # pickles as what reopens it (a built-in's name, else the bytes), caches empty
        return _reopen, (self.source, None if self.builtin else self.data, self.name, self.released)

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(self.roles)

    def footprint(self) -> Footprint:
        """Estimated bytes of this handle, of a workload of it and of a mapping of it (mapper/core/footprint.py)."""
        return model_footprint(len(self.data), count_nodes(self.proto.graph))

    @property
    def workloads_kept(self) -> int:
        """Workloads this handle keeps now (at most caches.WORKLOAD_ENTRIES)."""
        return self.caches.entries("workload")

    def bind(self, dims: dict[str, int] | None = None, *, batch: int | None = None, seq: int | None = None) -> Workload:
        """The workload at these bindings (built-ins start from batch 1, seq 128, past 0 where left free)."""
        if self.builtin:
            dims = dict(dims or {})
            shortcuts = {"batch": batch, "seq": seq}
            for role in self.roles:
                if shortcuts.get(role) is None and role not in dims:
                    dims[role] = BUILTIN_DEFAULT_DIMS[role]
        key = tuple(sorted((dims or {}).items()))
        try:
            hash(key)
        except TypeError:  # a value that is no number: resolve_bindings says so, in one line
            return self._bind(dims, batch, seq)
        return self.caches.workload(key, batch, seq, lambda: self._bind(dims, batch, seq))

    def _bind(self, dims: dict[str, int] | None, batch: int | None, seq: int | None) -> Workload:
        graph, classes = import_graph(self.proto, self.sha256, self.name, self.caches, dims, batch, seq)
        if self.released is not None:  # a built-in's or a config's: its tensors (fp32, dims only) do not say
            graph = replace(graph, released=self.released)
        return analyze_graph(graph, self.caches, classes, self.builtin)

    def shortcut_dims(
        self, dims: dict[str, int] | None, batch: int | None = None, seq: int | None = None
    ) -> dict[str, int] | None:
        """The named bindings with --batch/--seq written onto this model's own dim names."""
        dims = dict(dims or {})
        if batch is None and seq is None:
            return dims or None
        return apply_bindings(self.proto, dims, batch, seq) or None

    def dims_without_batch(self, dims: dict[str, int] | None) -> dict[str, int] | None:
        """The bindings less the batch dim(s), for callers that vary the batch through --batch."""
        return {k: v for k, v in (dims or {}).items() if k != "batch" and self.roles.get(k) != "batch"} or None


def _reopen(source: str, data: bytes | None, name: str, released: ReleasedPrecision | None) -> ModelHandle:
    if data is None:
        return _builtin(source, name)
    return _handle(source, data, False, lambda proto: name, released)


def _builtin(source: str, name: str) -> ModelHandle:
    proto, data = zoo_model(source)  # built here: its bytes are trusted and need no parse back
    return _handle(source, data, True, lambda _: name, released_precision(source), proto)


def _handle(
    source: str,
    data: bytes,
    builtin: bool,
    naming: Callable[[onnx.ModelProto], str],
    released: ReleasedPrecision | None,
    proto: onnx.ModelProto | None = None,
) -> ModelHandle:
    proto = parse_model(data, source or "upload") if proto is None else proto
    return ModelHandle(
        source=source,
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        name=naming(proto),
        proto=proto,
        builtin=builtin,
        roles=dim_roles_of(proto),
        branches=tuple(branch_inputs(proto)),
        released=released,
    )


def open_model(
    source: str | os.PathLike | bytes | ModelHandle, *, file_name: str | None = None, name: str | None = None
) -> ModelHandle:
    """A built-in name, a path or uploaded bytes -> its handle (a handle is returned as it is).

    The model is named `name`, else its graph's own name unless an exporter's generic one (main_graph),
    else the file's stem: the path's, or `file_name`'s for bytes that came from a file (an upload),
    else "upload"."""
    if isinstance(source, ModelHandle):
        return source
    if isinstance(source, str) and source in ZOO_NAMES:
        return _builtin(source, name or source)
    if isinstance(source, str) and not os.path.exists(source) and not source.endswith(".onnx"):
        raise MapperError(f"model {source!r} is neither a file nor a built-in; built-ins: {', '.join(ZOO_NAMES)}")
    structure, default_name = read_model_structure(source)
    uploaded = isinstance(source, (bytes, bytearray, memoryview))
    if file_name and uploaded:
        default_name = Path(file_name).stem or default_name

    def naming(proto: onnx.ModelProto) -> str:
        own = proto.graph.name if proto.graph.name not in GENERIC_GRAPH_NAMES else ""
        return name or own or default_name

    path = "" if isinstance(source, (bytes, bytearray, memoryview)) else os.fspath(source)  # uploaded: no path
    return _handle(path, structure.data, False, naming, structure.released)
