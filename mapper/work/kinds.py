"""The work of every node of a graph, each kind of node estimated once (stage two's loop over the nodes).

`estimate_work_kinds` runs `ops.estimate_node_work` once per kind (nodes of one walk class and weight
roles, or one signature at equal shapes) and renames the estimate for the other nodes of the kind; a
repeated layer's node takes its twin's (`Graph.twins`, the import's copies) without naming its kind again;
each node's own record is written when read (`works.NodeWorks`).
"""

from __future__ import annotations

from mapper.core.graph import Graph, LayerType, Node
from mapper.core.result import NodeWork
from mapper.work.ops import LayerPlacer, estimate_node_work
from mapper.work.works import NodeWorks


def work_roles(graph: Graph) -> tuple[tuple, ...]:
    """Per live node, what its work depends on of each input besides the shapes: the type memory holds a
    weight in (QDQ models) and whether it is a weight. Structural: the same at every binding."""
    weights, stored = graph.weights, graph.stored_dtypes
    return tuple(tuple(i and (stored.get(i), i in weights) for i in node.inputs) for node in graph.nodes)


# A stretch of live positions [start, end) whose nodes copy the node `period` earlier (`Graph.twins`) with its weight
# roles, and each one's recognized block place (None: its op's plain place, which is then its twin's): their work,
# kind and place are their twins', copied a period at a time (`copy_runs`)
CopyRun = tuple[int, int, int, tuple]


def copy_runs(graph: Graph, roles: tuple[tuple, ...], blocks: dict[str, tuple]) -> tuple[CopyRun, ...]:
    """The graph's copy runs (`CopyRun`), found from its twins, its nodes' weight roles and recognized blocks
    (`layers.recognized_blocks`): structural, so kept per structure. A position outside a block whose twin is
    in one is not in a run (its place is its own op's)."""
    twins, nodes, runs, k = graph.twins, graph.nodes, [], 0

    def copies(k: int, period: int) -> bool:  # position k takes its work and place from position k - period
        t = k - period
        return twins[k] == t and roles[k] == roles[t] and (nodes[k].name in blocks or nodes[t].name not in blocks)

    while k < len(twins):
        if twins[k] < 0 or not copies(k, k - twins[k]):
            k += 1
            continue
        start, period = k, k - twins[k]
        while k < len(twins) and copies(k, period):
            k += 1
        runs.append((start, k, period, tuple(blocks.get(n.name) for n in nodes[start:k])))
    return tuple(runs)


def estimate_work_kinds(
    graph: Graph,
    place: LayerPlacer | None = None,
    classes: dict[str, int] | None = None,
    roles: tuple[tuple, ...] | None = None,
    runs: tuple[CopyRun, ...] = (),
) -> tuple[NodeWorks, tuple[int, ...]]:
    """Work of every live (not folded) node, in graph order, with the layer type and block `place`
    gives it (none given: every node Other), and each node's work kind: nodes of one kind have equal
    input and output specs, weight roles and work, all but the name, layer type and block (-1: a node
    estimated alone). The kernel builder reuses one kernel per kind of group (`plan.kernels`).

    Nodes of one signature whose inputs and outputs have the same shapes, types and weight roles do
    the same work: each such combination is estimated once (a transformer's layers repeat). `classes`
    (the import walk's, see `Walk.classes`) and `roles` (`work_roles`, kept per structure) name that
    combination without re-reading the shapes; `runs` (`copy_runs`, with `place`'s blocks, where every copy
    of the import was taken) are copied from their twins a period at a time, in list slices."""
    classes = classes if roles is not None and classes else {}
    twins = graph.twins if classes else ()  # a copy has its twin's class and weight roles: its key and work
    runs = runs if twins and place else ()
    seen: dict[tuple, NodeWork] = {}
    kind_of: dict[tuple, int] = {}  # key -> its kind, numbered in the order first met
    places: list[tuple[LayerType, int]] = []
    kinds: list[int] = []
    estimated: list[NodeWork] = []
    nodes, k, at = graph.nodes, 0, 0  # at: the next run
    while k < len(nodes):
        if at < len(runs) and k == runs[at][0]:
            start, end, period, blocks = runs[at]
            for first in range(start, end, period):  # a period at a time: each slice reads positions made
                last = min(first + period, end)
                estimated.extend(estimated[first - period : last - period])
                kinds.extend(kinds[first - period : last - period])
                twin_places = places[first - period : last - period]
                places.extend([b or p for b, p in zip(blocks[first - start : last - start], twin_places)])
            k, at = end, at + 1
            continue
        node, t = nodes[k], twins[k] if twins else -1
        if t >= 0 and roles is not None and roles[k] == roles[t]:
            w, kind = estimated[t], kinds[t]
        else:
            key = _work_key(graph, node, classes.get(node.name), roles[k] if roles is not None else ())
            known = None if key is None else seen.get(key)
            w = known if known is not None else estimate_node_work(node, graph)
            if known is None and key is not None:
                seen[key] = w
                kind_of[key] = len(kind_of)
            kind = -1 if key is None else kind_of[key]
        estimated.append(w)
        kinds.append(kind)
        places.append(place(node.name, w.op_type, w.op_class) if place else (w.layer_type, w.layer_group))
        k += 1
    return NodeWorks(estimated, graph.nodes, places), tuple(kinds)


def _work_key(graph: Graph, node: Node, cls: int | None, roles: tuple) -> tuple | None:
    """What names a node's work besides its name: its walk class and weight roles, else its signature and its
    inputs' and outputs' shapes and types; None where a shape is unknown (the node is estimated alone)."""
    if cls is not None:
        return cls, roles
    if node.signature is None:
        return None
    tensors, weights, stored = graph.tensors, graph.weights, graph.stored_dtypes
    try:
        return (
            node.signature,
            tuple(i and ((s := tensors[i]).shape, stored.get(i, s.dtype), i in weights) for i in node.inputs),
            tuple(o and ((s := tensors[o]).shape, s.dtype) for o in node.outputs),
        )
    except KeyError:  # a shape is unknown: estimated (and explained) on its own
        return None
