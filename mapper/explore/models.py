"""A model as the sweep, compare and review stages hold it: parsed once (its handle), what it can vary
(a free batch dim, a free seq dim: the binder's own answer) and the dims held for every slice, and its
workload per (batch, seq), each built once."""

from __future__ import annotations

from dataclasses import dataclass, field

from mapper.core.errors import MapperError, printable
from mapper.handle import BUILTIN_DEFAULT_DIMS, ModelHandle, open_model
from mapper.model.bindings import resolve_bindings
from mapper.work.workload import Workload


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A swept model: its handle (which ships to a worker as a built-in's name or a file's bytes, and is
    parsed there once), whether it has a seq dim, and the dims held for every slice."""

    model: ModelHandle = field(repr=False)
    has_seq: bool
    fixed_dims: tuple[tuple[str, int], ...] = ()  # dims other than batch and seq (built-ins: their defaults)
    has_batch: bool = True  # False: static shapes (a graph exported at one batch), mapped at batch 1 only

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def sha256(self) -> str:
        return self.model.sha256


def model_source(model: str | bytes | ModelHandle, dims: tuple[tuple[str, int], ...] = ()) -> ModelSource:
    """A built-in name, a path, uploaded bytes or a handle -> what a task needs; decides once whether it
    has a seq dim. `dims` holds the model's dims other than batch and seq (those it lacks are ignored)."""
    handle, held = open_model(model), dict(dims)
    if handle.builtin:
        fixed = tuple((k, held.get(k, BUILTIN_DEFAULT_DIMS[k])) for k in handle.roles if k not in ("batch", "seq"))
    else:  # batch and seq are swept; the model's other dims are held
        fixed = tuple((k, v) for k, v in held.items() if k in handle.roles and handle.roles[k] not in ("batch", "seq"))
    has_batch, has_seq = free_dims(handle, fixed)
    return ModelSource(handle, has_seq, fixed, has_batch)


def free_dims(handle: ModelHandle, fixed: tuple) -> tuple[bool, bool]:
    """(batch, seq): whether --batch and --seq each find a free dim (the binder's own answer, not a guess)."""
    try:
        resolve_bindings(handle.proto, dict(fixed), 1, 1)
        return True, True
    except MapperError as exc:
        missing = next((role for role in ("batch", "seq") if f"no free {role} dim" in str(exc)), None)
        if missing is None:
            raise
    other = _binds(handle, fixed, "seq" if missing == "batch" else "batch")
    return (False, other) if missing == "batch" else (other, False)


def _binds(handle: ModelHandle, fixed: tuple, role: str) -> bool:
    try:
        resolve_bindings(handle.proto, dict(fixed), 1 if role == "batch" else None, 1 if role == "seq" else None)
        return True
    except MapperError as exc:
        if f"no free {role} dim" not in str(exc):
            raise
        return False


class ModelShapes:
    """A swept model and its workload per (batch, seq), each built once (the sweep's per-call cache)."""

    def __init__(self, model: ModelSource):
        self.model = model
        self._workloads: dict[tuple[int, int | None], Workload] = {}

    def workload(self, batch: int, seq: int | None) -> Workload:
        key = (batch, seq)
        if key not in self._workloads:
            if not self.model.has_batch and batch != 1:
                raise MapperError(
                    f"model {printable(self.model.name)} has static shapes (no batch dim): batch {batch} cannot be"
                    " bound; map it at batch 1, or export it with a dynamic batch"
                )
            self._workloads[key] = self.model.model.bind(
                dict(self.model.fixed_dims) or None,
                batch=batch if self.model.has_batch else None,
                seq=seq if self.model.has_seq else None,
            )
        return self._workloads[key]
