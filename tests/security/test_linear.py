"""Red team, issue 15 item 5: mapping is linear in the graph's size, shape by shape.

No clock: each graph is mapped at n and 2n nodes with every tensor and node name a `Name`, a str that
counts each hash and each comparison made of it. Dict and set lookups, list and tuple searches all go
through those, so the count is the planner's work; linear stages double it, a quadratic one (a
membership test in a list of a node's inputs or of the graph's outputs) quadruples it. A chain of
views deeper than the recursion limit must map at all.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest

import mapper
from bench.scale_graphs import SHAPES
from mapper.core.graph import Graph, TensorTable

SMALL = 1000  # nodes; and twice as many: a few seconds for every shape together
MAX_GROWTH = 2.5  # of the count from SMALL to 2 x SMALL nodes: 2 is linear, 4 quadratic


class Name(str):
    operations = 0

    def __hash__(self):
        Name.operations += 1
        return str.__hash__(self)

    def __eq__(self, other):
        Name.operations += 1
        return str.__eq__(self, other)

    def __ne__(self, other):
        Name.operations += 1
        return str.__ne__(self, other)


def counting(graph: Graph) -> Graph:
    """The graph with every name it holds a `Name` (one object per name, as the importer shares them)."""
    names: dict[str, Name] = {}

    def n(s: str) -> str:
        return names.setdefault(s, Name(s)) if s else s

    def ns(items):
        return tuple(map(n, items))

    nodes = tuple(
        dataclasses.replace(node, name=n(node.name), inputs=ns(node.inputs), outputs=ns(node.outputs))
        for node in graph.nodes
    )
    return dataclasses.replace(
        graph,
        nodes=nodes,
        tensors=TensorTable(dataclasses.replace(v, name=n(v.name)) for v in graph.tensors.values()),
        inputs=ns(graph.inputs),
        outputs=ns(graph.outputs),
        weights=frozenset(ns(graph.weights)),
        folded=frozenset(ns(graph.folded)),
        producers={n(k): v for k, v in graph.producers.items()},
        consumers={n(k): v for k, v in graph.consumers.items()},
    )


HW = mapper.load_hardware("h100-sxm")


def operations(shape: str, n: int, fusion: str) -> int:
    """Name operations of the work model and a full mapping of the shape at about n nodes."""
    model, dims = SHAPES[shape](n)
    graph = counting(mapper.load_model(model.SerializeToString(), dims=dims))
    Name.operations = 0
    mapper.map_workload(mapper.analyze_graph(graph), HW, mapper.PlanOptions(fusion=fusion))
    return Name.operations


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_mapping_work_grows_linearly(shape):
    fusion = "aggressive" if shape == "transformer" else "default"  # flash attention's block planning too
    small, large = operations(shape, SMALL, fusion), operations(shape, 2 * SMALL, fusion)
    assert large <= MAX_GROWTH * small, f"{shape}: {small} operations at {SMALL} nodes, {large} at {2 * SMALL}"


def test_a_view_chain_deeper_than_the_recursion_limit_maps():
    n = sys.getrecursionlimit() + 500
    model, dims = SHAPES["view-chain"](n)
    result = mapper.map_workload(mapper.load_workload(model.SerializeToString(), dims), HW)
    assert [k.kernel.nodes for k in result.kernels] == [("first", "last")]  # fused through the free views
