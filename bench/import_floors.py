"""Lower bounds under any Python importer of an ONNX file, for `bench_import.py` to time beside the real one.

Each floor does strictly less than `mapper.load_workload` and gives no usable answer: it exists only to
show how much of the time budget is spent before any shape or work rule runs.

    read      parse the file, read each node's fields into tuples
    columnar  read + attributes + a per-signature memo of output shapes (shapes only, no records, no rules)
    records   columnar + the engine's records: one frozen `Node`, `TensorSpec` per output and `NodeWork`
              per node (what STYLE.md's data model costs), still no rules
"""

from __future__ import annotations

import onnx

from mapper.core.graph import Node, OpClass, TensorSpec, node_signature
from mapper.core.result import NodeWork
from mapper.model.values import attr_value

PLACEHOLDER_SHAPE = (1, 1)  # what every floor "infers": the floors time the bookkeeping, not the rules


def _parse(path: str) -> onnx.ModelProto:
    return onnx.load(path, load_external_data=False)


def read_floor(path: str) -> int:
    graph = _parse(path).graph
    rows = [(n.name, n.op_type, n.domain, tuple(n.input), tuple(n.output), list(n.attribute)) for n in graph.node]
    return len(rows)


def _known_shapes(graph: onnx.GraphProto) -> dict[str, tuple]:
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    shapes.update((vi.name, PLACEHOLDER_SHAPE) for vi in graph.input)
    return shapes


def columnar_floor(path: str) -> int:
    graph = _parse(path).graph
    shapes, interned, memo, op_types = _known_shapes(graph), {}, {}, []
    for n in graph.node:
        inputs, outputs = tuple(n.input), tuple(n.output)
        attrs = {a.name: attr_value(a) for a in n.attribute} if n.attribute else {}
        signature = node_signature(n.op_type, n.domain, attrs, inputs, outputs, interned)
        key = (signature, *(shapes.get(i) for i in inputs))
        found = memo.get(key)
        if found is None:
            found = memo[key] = [PLACEHOLDER_SHAPE] * len(outputs)
        shapes.update(zip(outputs, found))
        op_types.append(n.op_type)
    return len(op_types)


def records_floor(path: str) -> int:
    graph = _parse(path).graph
    specs = {name: TensorSpec(name, shape) for name, shape in _known_shapes(graph).items()}
    interned, memo, works = {}, {}, []
    for i, n in enumerate(graph.node):
        inputs, outputs, op_type = tuple(n.input), tuple(n.output), n.op_type
        attrs = {a.name: attr_value(a) for a in n.attribute} if n.attribute else {}
        node = Node(
            n.name or f"{op_type}_{i}",
            op_type,
            n.domain,
            inputs,
            outputs,
            attrs,
            node_signature(op_type, n.domain, attrs, inputs, outputs, interned),
        )
        key = (node.signature, *(s.shape if (s := specs.get(name)) else None for name in inputs))
        found = memo.get(key)
        if found is None:
            found = memo[key] = [PLACEHOLDER_SHAPE] * len(outputs)
        for name, shape in zip(outputs, found):
            specs[name] = TensorSpec(name, shape)
        works.append(NodeWork(node.name, op_type, OpClass.ELEMENTWISE, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    return len(works)


FLOORS = {"read": read_floor, "columnar": columnar_floor, "records": records_floor}
