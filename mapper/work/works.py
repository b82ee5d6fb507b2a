"""The work of a graph's nodes as stage two gives it: each node's estimate, its name and its place.

A repeated layer's node does its twin's work (`kinds.estimate_work_kinds`): `NodeWorks` keeps, per node,
the estimate it shares (a record named for the node it was estimated for), the node itself (its name) and
its layer type and block. A node's own `NodeWork` is written on first read. The stages that read only
figures and keys of every node (the workload's totals, the kernels' member codes) read `sources` and
`places`, so a sweep's slice, which shows no node, writes a record only for the nodes a new kernel reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mapper.core.graph import LayerType
from mapper.core.records import WrittenWhenRead
from mapper.core.result import NodeWork


class Named(Protocol):
    @property
    def name(self) -> str: ...


class NodeWorks(WrittenWhenRead):
    """Each node's `NodeWork`, in graph order: the record `sources[k]` under the name of `named[k]` with the
    layer type and block `places[k]`, written when first read (`core.records.WrittenWhenRead`)."""

    __slots__ = ("named", "places", "sources")

    def __init__(self, sources: Sequence[NodeWork], named: Sequence[Named], places: Sequence[tuple[LayerType, int]]):
        if not len(sources) == len(named) == len(places):
            raise ValueError("NodeWorks needs one source, name and place per node")
        super().__init__(len(sources))
        self.sources, self.named, self.places = sources, named, places

    @classmethod
    def _columns(cls, records: tuple[NodeWork, ...]) -> tuple:
        """Records already named and placed (a workload built by hand)."""
        return records, records, [(w.layer_type, w.layer_group) for w in records]

    def with_sources(self, changed: dict[int, NodeWork]) -> NodeWorks:
        """These nodes with the records at some positions replaced (each already named and placed there)."""
        if not changed:
            return self
        sources = list(self.sources)
        for k, w in changed.items():
            sources[k] = w
        return NodeWorks(sources, self.named, self.places)

    def _write(self, k: int) -> NodeWork:
        w, name, (layer, group) = self.sources[k], self.named[k].name, self.places[k]
        if w.name == name and w.layer_type is layer and w.layer_group == group:
            return w
        return NodeWork(name, w.op_type, w.op_class, w.flops, w.matrix_flops, w.sfu_ops, w.bytes_read,
                        w.bytes_written, w.weight_bytes, w.matrix, w.reason, layer, group)  # fmt: skip
