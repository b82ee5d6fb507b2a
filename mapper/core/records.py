"""Frozen records built without their dataclass constructor, for the loops that make one per node or kernel.

A frozen dataclass's `__init__` writes each field through `object.__setattr__` (its own `__setattr__`
refuses): a BERT-base binding builds ~1,300 such records (its tensors, node works, kernels and estimates), most
of them a repeated layer's copy of its twin's. `writer(cls)` gives a function of every field, in field order,
that writes the slots directly; a class with a `__post_init__` is refused (the writer would skip it).
tests/test_records.py compares each writer's record with the constructor's, field for field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import Any


def writer(cls: type) -> Callable[..., Any]:
    """`cls(*values)` for a frozen, slotted dataclass without `__post_init__`, every field given in order."""
    if not (is_dataclass(cls) and hasattr(cls, "__slots__")) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass without __post_init__")
    names = [f.name for f in fields(cls)]
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    scope |= {f"_set_{name}": getattr(cls, name).__set__ for name in names}
    lines = [f"def write({', '.join(names)}):", "    record = _new(_cls)"]
    lines += [f"    _set_{name}(record, {name})" for name in names]
    lines.append("    return record")
    exec("\n".join(lines), scope)  # noqa: S102 - source built above from the dataclass's own field names
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
