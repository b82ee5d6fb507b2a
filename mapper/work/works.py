"""The work of a graph's nodes as stage two gives it: each node's estimate, its name and its place.

A repeated layer's node does its twin's work (`kinds.estimate_work_kinds`): `NodeWorks` keeps, per node,
the estimate it shares (a record named for the node it was estimated for), the node itself (its name) and
its layer type and block. A node's own `NodeWork` is written on first read. The stages that read only
figures and keys of every node (the workload's totals, the kernels' member codes) read `sources` and
`places`, so a sweep's slice, which shows no node, writes a record only for the nodes a new kernel reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from mapper.core.graph import LayerType
from mapper.core.records import writer
from mapper.core.result import NodeWork


class Named(Protocol):
    name: str


# A node's record is written without the frozen constructor (`core.records`): ~400 a BERT-base binding read whole
_write_work = writer(NodeWork)


class NodeWorks(Sequence[NodeWork]):
    """Each node's `NodeWork`, in graph order: the record `sources[k]` under the name of `named[k]` with the
    layer type and block `places[k]`. A record is written when first read and kept (equal records whichever
    thread writes it). Equal to any sequence of equal records; pickled as its records."""

    __slots__ = ("_made", "named", "places", "sources")

    def __init__(self, sources: Sequence[NodeWork], named: Sequence[Named], places: Sequence[tuple[LayerType, int]]):
        if not len(sources) == len(named) == len(places):
            raise ValueError("NodeWorks needs one source, name and place per node")
        self.sources, self.named, self.places = sources, named, places
        self._made: list[NodeWork | None] = [None] * len(sources)

    @classmethod
    def of(cls, records: Sequence[NodeWork]) -> NodeWorks:
        """Records already named and placed (a workload built by hand, a mixture of experts' rescaled nodes)."""
        records = tuple(records)
        works = cls(records, records, [(w.layer_type, w.layer_group) for w in records])
        works._made = list(records)
        return works

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._record(k) for k in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("node index out of range")
        return self._record(index)

    def __iter__(self) -> Iterator[NodeWork]:
        return map(self._record, range(len(self)))

    def _record(self, k: int) -> NodeWork:
        made = self._made[k]
        if made is None:
            w, name, (layer, group) = self.sources[k], self.named[k].name, self.places[k]
            if w.name == name and w.layer_type is layer and w.layer_group == group:
                made = w
            else:
                made = _write_work(name, w.op_type, w.op_class, w.flops, w.matrix_flops, w.sfu_ops, w.bytes_read,
                                   w.bytes_written, w.weight_bytes, w.matrix, w.reason, layer, group)  # fmt: skip
            self._made[k] = made
        return made

    def __eq__(self, other) -> bool:
        if isinstance(other, NodeWorks | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"NodeWorks({list(self)!r})"

    def __reduce__(self):
        return NodeWorks.of, (tuple(self),)
