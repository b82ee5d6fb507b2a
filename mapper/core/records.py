"""Records: the decorator of the per-node and per-kernel records, a quick `dataclasses.replace`, and a sequence
written only when read.

`record` makes a slotted dataclass that compares and hashes by its fields as a frozen one does, and that the
type checker holds frozen (`dataclass_transform(frozen_default=True)`: mypy refuses a write to a field anywhere in
mapper/). At run time its constructor stores each field as a plain slot store: a frozen dataclass's calls
`object.__setattr__` once a field, which took a BERT-base sweep slice from 24.3 to 28.5 M instructions (callgrind,
the collector off: the descriptor calls and their argument tuples) over the records a binding makes by the hundred.
`replacer(cls)` copies a record with some fields changed through the class's own constructor, without
`dataclasses.replace`'s per-field loop over `fields()`. `WrittenWhenRead` is a sequence of records a stage
could give without writing them (a repeated layer's, most of a slice's): each is written on its first read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

_R = TypeVar("_R")


@dataclass_transform(frozen_default=True)
def record(cls: type[_R]) -> type[_R]:
    """A record class: slotted, compared and hashed by its fields, frozen to the type checker (see above)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


def replacer(cls: type) -> Callable[..., Any]:
    """`dataclasses.replace(record, **changes)` for a dataclass `cls` whose fields are all its constructor's
    parameters, without its per-field Python loop: the changed fields written over the record's own."""
    found = fields(cls)
    if any(not f.init for f in found):
        raise TypeError(f"{cls.__name__} has a field its constructor does not take")
    names = [f.name for f in found]
    values, index = attrgetter(*names), {name: i for i, name in enumerate(names)}

    def replace(record, **changes):
        new = list(values(record))
        for name, value in changes.items():
            if name not in index:
                raise TypeError(f"{cls.__name__} has no field {name!r}")
            new[index[name]] = value
        return cls(*new)

    return replace


def each(records: Sequence) -> Iterator:
    """Records in order for one pass: a `WrittenWhenRead`'s without keeping those it writes (`each`), another
    sequence's as they are."""
    return records.each() if isinstance(records, WrittenWhenRead) else iter(records)


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

    def read_once(self, k: int) -> Any:
        """Position k's record: the one kept, else one written for this read and not kept."""
        made = self._made[k]
        return made if made is not None else self._write(k)

    def each(self) -> Iterator[Any]:
        """Every record in order, for a reader that passes over them once (a document written out): what is kept
        is read, the rest written and dropped, so the pass holds one record at a time, not the whole slice's."""
        return map(self.read_once, range(len(self)))

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
