"""Kernel boundaries and places: which tensors cross a fusion group's boundary (read from or written to DRAM),
and each group's place in the live graph (its boundary, its kernel's name, its shape and its members' positions).
Names are the module path and what the kernel is (`kernel_names`), unique in the plan.

Part of the plan stage (`kernels` builds the `Kernel` records from them). Structural: decided by the live
graph and the groups, the same at every binding of a model, so kept per structure (`ModelCaches`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from mapper.core.graph import Graph, Node, OpClass
from mapper.core.vocab import KernelRule
from mapper.ops import OPS, Reads
from mapper.plan.fusion import Group
from mapper.plan.kernel_names import plan_names, split_names, what_it_is, where_it_is

# Ops whose DRAM reads are only the elements they select (the registry's `Reads.KEPT`, as the work model reads it).
PARTIAL_READ_OPS = OPS.with_reads(Reads.KEPT)
VIEWS = OPS.with_class(OpClass.VIEW)
REDUCING_OPS = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "SimplifiedLayerNormalization",
        "RMSNormalization",
        "ReduceMean",
        "SkipLayerNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "ReduceSum",
        "ReduceMax",
    }
)


@dataclass(frozen=True, slots=True)
class Boundary:
    """What crosses a group's kernel boundary. Structural: the same at every binding of the model."""

    reads: tuple[tuple[str, str], ...]  # (tensor read from DRAM, the partial-read node reading it, or "")
    writes: tuple[str, ...]  # tensors written to DRAM: graph outputs or used outside the group
    reduce_inputs: tuple[str, ...]  # first inputs of the reducing members, in order
    # the same by position: per member, each input's part (NO_INPUT...) and each output's write, with what the
    # sizer reads of the tensor's name (weight, stored type). Groups of one layout whose members are of the
    # same work kinds (`Workload.work_kinds`) make kernels equal but for their names (`_build_kernels`).
    layout: tuple
    read_names: frozenset[str] = frozenset()  # the tensors of `reads`, for a quick test of which it reads


# An input's part in a kernel's DRAM reads: no tensor, made inside the kernel, read here first, read before.
NO_INPUT, MADE_INSIDE, READ, READ_AGAIN = range(4)


def group_boundary(graph: Graph, group: Group, nodes_by_name: dict[str, Node], index_of: dict[str, int]) -> Boundary:
    inside = {index_of[n] for n in group.nodes}
    members = [nodes_by_name[name] for name in group.nodes]
    made = {t for n in members for t in n.outputs if t}
    views = _absorb_views(graph, made, inside, min(inside, default=0))
    reads: dict[str, str] = {}
    layout = []
    for node in members:
        parts = []
        for t in node.inputs:
            part = NO_INPUT if not t else MADE_INSIDE if t in made else READ_AGAIN if t in reads else READ
            if part == READ:
                reads[t] = node.name if node.op_type in PARTIAL_READ_OPS and t == node.inputs[0] else ""
            parts.append((part, _sized_as(graph, t)))
        layout.append(tuple(parts))
    writes: list[str] = []
    shown: set[str] = set()  # tensors in DRAM after the kernel: written, or a view of one written
    for n in [*members, *views]:  # an absorbed view writes what it shows outside (an export's Identity logits)
        view = n.op_type in VIEWS and n not in members
        written = []
        for t in n.outputs:
            needed = bool(t) and (t in graph.output_set or not inside.issuperset(graph.consumers.get(t, ())))
            write = needed and not (view and n.inputs[0] in shown)  # its source is written: the same bytes
            if write:
                writes.append(t)
            if write or (view and n.inputs[0] in shown):
                shown.add(t)
            written.append((write, _sized_as(graph, t)))
        layout.append(tuple(written))
    reduce_inputs = tuple(n.inputs[0] for n in members if n.op_type in REDUCING_OPS and n.inputs)
    return Boundary(tuple(reads.items()), tuple(writes), reduce_inputs, tuple(layout), frozenset(reads))


def _sized_as(graph: Graph, tensor: str) -> tuple[bool, str | None]:
    """What `Sizer.bytes` reads of a tensor's name: whether it is a weight, and the type a QDQ weight is stored in."""
    return tensor in graph.weights, graph.stored_dtypes.get(tensor)


def _absorb_views(graph: Graph, made: set[str], inside: set[int], first: int) -> list[Node]:
    """Views of what the group makes are free and stay on chip with it (a fused attention's Reshape of GQA's
    expanded K and V): their outputs count as made inside and the views as members, so neither the
    expanded tensor's write nor its re-read through the view is charged as DRAM traffic. Returns the views:
    what one shows outside the group (a graph output, a tensor read elsewhere) is the group's write."""
    frontier = list(made)  # followed through the consumers: linear in the views found, not in the graph
    views = []
    while frontier:
        tensor = frontier.pop()
        for index in graph.consumers.get(tensor, ()):
            node = graph.nodes[index]
            if index >= first and index not in inside and node.op_type in VIEWS and node.inputs[0] == tensor:
                inside.add(index)
                views.append(node)
                new = [t for t in node.outputs if t and t not in made]
                made.update(new)
                frontier.extend(new)
    return views


# A group's place in the structure: its boundary, its kernel's name, its shape (what its kernel reads of the group
# besides its members' work: the rule and the boundary's layout) and its members' positions among the live nodes.
Place = tuple[Boundary, str, Hashable, tuple[int, ...]]


class GroupPlaces:
    """Each group of a plan placed in the live graph (`Place`): structural, so every binding of a sweep shares
    them (`ModelCaches.group_boundaries`). A group's shape is a small number, one per distinct (rule, boundary
    layout) of the plan, so that a slice's kernel keys hash no layout; a group split back from a rejected
    flash attention is placed on first need, its shape the (rule, layout) itself (never equal to a number).
    Every name is made here, for the plan's groups and the members of its fused attentions alike."""

    def __init__(self, graph: Graph, groups: tuple[Group, ...]):
        nodes = graph.nodes  # the graph's structure is read, never kept: a binding's tensors would stay alive
        self.nodes_by_name = {n.name: n for n in nodes}
        self.index_of = {n.name: i for i, n in enumerate(nodes)}
        names, self.split_named = self._names(graph, groups)
        shapes: dict[tuple, int] = {}
        self.of_plan: list[Place] = []
        for group, name in zip(groups, names, strict=True):
            boundary = group_boundary(graph, group, self.nodes_by_name, self.index_of)
            shape = shapes.setdefault((group.rule, boundary.layout), len(shapes))
            self.of_plan.append((boundary, name, shape, self._positions(group)))
        self.split: dict[Group, Place] = {}

    def of(self, graph: Graph, group: Group) -> Place:
        """A group outside the plan (a member of a rejected flash attention, alone), in `graph` (of this structure)."""
        found = self.split.get(group)
        if found is None:
            boundary = group_boundary(graph, group, self.nodes_by_name, self.index_of)
            name = self.split_named[group.nodes[0]]
            found = self.split[group] = (boundary, name, (group.rule, boundary.layout), self._positions(group))
        return found

    def _names(self, graph: Graph, groups: tuple[Group, ...]) -> tuple[list[str], dict[str, str]]:
        """The plan's kernel names, and the name each member of a fused attention takes if it runs alone."""
        scopes = {n.name: n.scope for n in graph.nodes if n.scope}  # module paths the export kept in metadata
        members = [[self.nodes_by_name[n] for n in g.nodes] for g in groups]
        wheres = [where_it_is(m, scopes) for m in members]
        names = plan_names([(w, what_it_is(g.rule, m, graph.weights)) for g, m, w in zip(groups, members, wheres)])
        split: dict[str, str] = {}
        for group, member, where, name in zip(groups, members, wheres, names):
            if group.rule == KernelRule.FLASH_ATTENTION:
                whats = [what_it_is(KernelRule.SINGLE, (n,), graph.weights) for n in member]
                split.update(zip(group.nodes, split_names(where, name, whats)))
        return names, split

    def _positions(self, group: Group) -> tuple[int, ...]:
        return tuple(self.index_of[n] for n in group.nodes)
