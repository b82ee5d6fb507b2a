"""The work model: per node FLOPs (2 x MACs), bytes and op class, from the operator registry.

Stage two of the pipeline (after import). Each op type's class and work formula are its entry in
`mapper.ops.OPS`; `kinds.estimate_work_kinds` applies them node by node. An op without an entry (or whose
entry has no work rule) is `unmodeled` with a reason: never a silent zero.
Conventions: FLOPs count multiply and add separately (FLOPs = 2 x MACs); bytes
are the compulsory traffic of the op alone (inputs read once, outputs written
once); fusion and tiling adjust traffic later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from mapper.core.graph import Graph, LayerType, Node, OpClass, TensorSpec
from mapper.core.result import NodeWork
from mapper.ops import OPS, OpDef, Reads

INDEX_BYTES_BELOW = 1 << 20  # an index input of fewer elements is read whole beside what a gather keeps


def classify_op(op_type: str) -> OpClass:
    return OPS.op_class(op_type)


def _traffic(
    node: Node, entry: OpDef | None, ins: Sequence[TensorSpec | None], outs: list[TensorSpec], graph: Graph
) -> tuple[float, float, float]:
    """(bytes read, bytes written, weight bytes) of one op on its own; weights at the type memory holds."""
    weights = graph.weights
    if graph.stored_dtypes:
        ins = [s and graph.stored_spec(s) for s in ins]
    weight_bytes = sum(s.bytes for i, s in zip(node.inputs, ins) if s is not None and i in weights)
    written = sum(s.bytes for s in outs)
    if entry is not None and entry.op_class in (OpClass.VIEW, OpClass.SHAPE_ONLY):
        return 0.0, 0.0, weight_bytes
    if entry is not None and entry.reads is Reads.KEPT and ins[0] is not None:
        # only the gathered/kept elements are read; indices are read too
        extra = sum(s.bytes for s in ins[1:] if s is not None and s.elements < INDEX_BYTES_BELOW)
        return min(ins[0].bytes, outs[0].bytes) + extra, written, weight_bytes
    read = sum(s.bytes for s in ins if s is not None)
    return read, written, weight_bytes


def estimate_node_work(node: Node, graph: Graph) -> NodeWork:
    entry = OPS.get(node.op_type)
    op_class = entry.op_class if entry is not None else OpClass.UNMODELED
    ins = [graph.spec(i) for i in node.inputs]
    found = [graph.spec(o) for o in node.outputs if o]
    if not found:  # ONNX nodes write at least one tensor; a mutated or hand-edited file may not
        return NodeWork(
            node.name,
            node.op_type,
            OpClass.UNMODELED,
            0,
            0,
            0,
            0,
            0,
            0,
            reason="the node has no outputs: the file is malformed, nothing can use it",
        )
    if any(o is None for o in found) or any(s is None for i, s in zip(node.inputs, ins) if i):
        why = dict(graph.unresolved).get(node.name, "shapes unknown")
        return NodeWork(node.name, node.op_type, OpClass.UNMODELED, 0, 0, 0, 0, 0, 0, reason=f"shape unknown: {why}")
    outs = cast(list[TensorSpec], found)  # every output resolved
    if entry is None or op_class is OpClass.UNMODELED:
        domain = f" (domain {node.domain})" if node.domain not in ("", "ai.onnx") else ""
        read, written, weight = _traffic(node, entry, ins, outs, graph)
        return NodeWork(
            node.name,
            node.op_type,
            OpClass.UNMODELED,
            0,
            0,
            0,
            read,
            written,
            weight,
            reason=f"no work rule for {node.op_type}{domain}: its time is not estimated",
        )
    flops, matrix_flops, sfu, matrix = entry.work(node, ins, outs)
    read, written, weight = _traffic(node, entry, ins, outs, graph)
    return NodeWork(
        node.name,
        node.op_type,
        op_class,
        float(flops),
        float(matrix_flops),
        float(sfu),
        float(read),
        float(written),
        float(weight),
        matrix,
        entry.host_reason,
    )


LayerPlacer = Callable[[str, str, OpClass], tuple[LayerType, int]]  # (name, op type, class) -> (layer, group)
