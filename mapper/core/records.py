"""Frozen records built without their dataclass constructor, for the loops that make one per node or kernel.

A frozen dataclass's `__init__` writes each field through `object.__setattr__` (its own `__setattr__`
refuses): a BERT-base binding builds ~1,300 such records (its tensors, node works, kernels and estimates), most
of them a repeated layer's copy of its twin's. `writer(cls)` gives a function of every field, in field order,
that fills a draft: an instance of a plain class with the same slots, whose attribute writes are the
interpreter's fast slot stores, and then makes it a `cls` (`__class__` assignment, which Python allows between
classes of one layout: the same slots on the same base). A 22-field Kernel: 2.3 -> 0.8 us. A class with a
`__post_init__` is refused (the writer would skip it), as is one whose slots or base differ from a plain
slotted dataclass's. tests/test_records.py compares each writer's record with the constructor's, field by field.
`WrittenWhenRead` is a sequence of such records that writes each only when it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, fields, is_dataclass
from operator import attrgetter
from typing import Any


def writer(cls: type, defaults: bool = False) -> Callable[..., Any]:
    """`cls(...)` for a frozen, slotted dataclass without `__post_init__`: the same parameters, by position or
    name; with `defaults`, the fields' defaults too (one with a default factory has none here: it must be
    given), else every field must be given (a copy that misses one is refused, not filled in)."""
    found = fields(cls) if is_dataclass(cls) else ()
    names = [f.name for f in found]
    slots = getattr(cls, "__slots__", None)
    if (
        slots != tuple(names)
        or cls.__bases__ != (object,)
        or hasattr(cls, "__post_init__")
        or any(not f.init for f in found)
        or set(names) & {"_new", "_draft", "_cls", "record"}
        or any(n.startswith(("_default_", "_set_")) for n in names)
    ):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass of its fields alone, without __post_init__")
    draft = type(f"_{cls.__name__}Draft", (), {"__slots__": slots})  # the layout, without the refusal
    scope: dict[str, Any] = {"_new": object.__new__, "_draft": draft, "_cls": cls}
    parameters, defaulted = [], False
    for f in found:
        if defaults and f.default is not MISSING:
            scope[f"_default_{f.name}"] = f.default
            parameters.append(f"{f.name}=_default_{f.name}")
            defaulted = True
        elif defaulted:  # a field without a default after one with: as a dataclass refuses, refused
            raise TypeError(f"{cls.__name__}.{f.name} has no default after a field with one")
        else:
            parameters.append(f.name)
    head = f"def write({', '.join(parameters)}):"
    drafted = [
        head,
        "    record = _new(_draft)",
        *(f"    record.{n} = {n}" for n in names),
        "    record.__class__ = _cls",
    ]
    exec("\n".join([*drafted, "    return record"]), scope)  # noqa: S102 - source from the class's own field names
    try:  # one record of Nones: an interpreter that refuses the class change is found here, not in a stage
        scope["write"](*[None] * len(names))
    except TypeError:  # ... and gets the slots written one descriptor call a field (3x slower, same records)
        scope |= {f"_set_{n}": getattr(cls, n).__set__ for n in names}
        slotted = [head, "    record = _new(_cls)", *(f"    _set_{n}(record, {n})" for n in names)]
        exec("\n".join([*slotted, "    return record"]), scope)  # noqa: S102 - as above
    return scope["write"]


def replacer(cls: type) -> Callable[..., Any]:
    """`dataclasses.replace(record, **changes)` for `cls` (as `writer` requires it), without its per-field Python
    loop or the frozen constructor: the changed fields written over the record's own, in one call."""
    write = writer(cls)
    names = [f.name for f in fields(cls)]
    values, index = attrgetter(*names), {name: i for i, name in enumerate(names)}

    def replace(record, **changes):
        new = list(values(record))
        for name, value in changes.items():
            if name not in index:
                raise TypeError(f"{cls.__name__} has no field {name!r}")
            new[index[name]] = value
        return write(*new)

    return replace


class WrittenWhenRead(Sequence):
    """A sequence of records a stage could give without writing them (a repeated layer's, most of a slice's):
    each is written by `_write(k)` on its first read and kept (a thread racing another writes an equal one).
    The stages that read only figures read the subclass's columns instead. Equal to any sequence of equal
    records; pickled as its records (`of`)."""

    __slots__ = ("_made",)

    def __init__(self, count: int):
        self._made: list[Any] = [None] * count

    @classmethod
    def of(cls, records: Sequence) -> Any:
        """Records already written, as this sequence (its columns read from them: `_columns`); one, itself."""
        if isinstance(records, cls):
            return records
        records = tuple(records)
        written = cls(*cls._columns(records))
        written._made = list(records)
        return written

    @classmethod
    def _columns(cls, records: tuple) -> tuple:
        """The constructor's arguments that give back `records`."""
        raise NotImplementedError

    def _write(self, k: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._made)

    def _record(self, k: int) -> Any:
        made = self._made[k]
        if made is None:
            made = self._made[k] = self._write(k)
        return made

    def _read(self, k: int) -> Any:
        """Position k's record: the one kept, else one written for this read and not kept."""
        made = self._made[k]
        return made if made is not None else self._write(k)

    def each(self) -> Iterator[Any]:
        """Every record in order, for a reader that passes over them once (a document written out): what is kept
        is read, the rest written and dropped, so the pass holds one record at a time, not the whole slice's."""
        return map(self._read, range(len(self)))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(map(self._record, range(*index.indices(len(self)))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._record(index)

    def __iter__(self) -> Iterator[Any]:
        return map(self._record, range(len(self)))

    def __eq__(self, other) -> bool:
        if isinstance(other, WrittenWhenRead | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def __reduce__(self):
        return type(self).of, (tuple(self),)
