"""The workload: a model's graph at concrete shapes and the work of each node (stage two's output).

`analyze_graph` runs the work model (`kinds.estimate_work_kinds`) with the layer placer (`layers`) over an
imported graph; the workload carries its model's caches (`ModelCaches`) so that every later stage
reuses what depends on structure alone, and the two keys those stages need, computed once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mapper.core.caches import ModelCaches
from mapper.core.graph import Graph, OpClass
from mapper.core.result import NodeWork
from mapper.work.kinds import copy_runs, estimate_work_kinds, work_roles
from mapper.work.layers import layer_placer, recognized_blocks
from mapper.work.moe import ExpertGemm, route_work, router_sites
from mapper.work.works import NodeWorks


@dataclass(frozen=True, slots=True)
class Workload:
    """A model's graph at concrete shapes and the work of each of its nodes."""

    graph: Graph
    nodes: NodeWorks  # any sequence of records given is kept as one (`works.NodeWorks.of`)
    caches: ModelCaches = field(default_factory=ModelCaches, compare=False, repr=False)
    # mixture of experts (work/moe.py): weight name -> the share of it read (the experts the tokens use)
    weight_shares: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    # and expert GEMM node -> its routing figures (tokens present, mean tokens per expert, k/E)
    expert_gemms: dict[str, ExpertGemm] = field(default_factory=dict, compare=False, repr=False)
    builtin: bool = False  # a built-in model (mapper.zoo), reproduced by its name
    # each node's work kind (`ops.estimate_work_kinds`), aligned with `nodes`; () where not known (a workload
    # built by hand): kernels are then built one by one. A mixture of experts' routed nodes were rescaled from
    # their kind's work by their routing figures, which the kernel builder adds to a kernel's key
    # (`plan.kernels._routing`)
    work_kinds: tuple[int, ...] = field(default=(), compare=False, repr=False)
    flops: float = field(init=False)  # totals over the nodes, summed once (every mapping reads them)
    matrix_flops: float = field(init=False)
    unmodeled: tuple[NodeWork, ...] = field(init=False)
    plan_key: int = field(init=False, repr=False)  # what fusion reads of each node: name, class, layer, block
    cost_key: int = field(init=False, repr=False)  # what kernels read of each node: name, class, FLOPs, bytes

    def __post_init__(self):
        nodes = NodeWorks.of(self.nodes)
        object.__setattr__(self, "nodes", nodes)
        # From each node's source record (its work, named for the node it was estimated for) and place, so that no
        # node's own record is written here; as columns (list comprehensions read slots faster than a loop that
        # builds a tuple a node). The totals by sum() (Python 3.12's adds floats compensated: a += loop would not).
        works = nodes.sources
        flops, classes = [w.flops for w in works], [w.op_class for w in works]
        object.__setattr__(self, "flops", sum(flops))
        object.__setattr__(self, "matrix_flops", sum([w.matrix_flops for w in works]))
        unmodeled = OpClass.UNMODELED
        object.__setattr__(
            self, "unmodeled", tuple(nodes[k] for k, w in enumerate(works) if w.op_class is unmodeled or w.reason)
        )
        names, classes = tuple([n.name for n in nodes.named]), tuple(classes)  # the keys hash columns: no tuple a node
        object.__setattr__(self, "plan_key", hash((names, classes, tuple(nodes.places))))
        object.__setattr__(self, "cost_key", hash((names, classes, tuple(flops), tuple([w.bytes_read for w in works]))))

    @property
    def bytes(self) -> float:
        return sum(n.bytes for n in self.nodes)

    @property
    def weight_bytes(self) -> float:
        return float(sum(self.graph.tensors[w].bytes for w in self.graph.weights))


def analyze_graph(
    graph: Graph, caches: ModelCaches | None = None, classes: dict[str, int] | None = None, builtin: bool = False
) -> Workload:
    """The graph's workload. `caches`: its model handle's (a graph built by hand gets caches of its own);
    `classes`: the import walk's node classes (`import_graph`), so that each class is estimated once."""
    caches = caches if caches is not None else ModelCaches()
    roles: tuple[tuple, ...] | None = caches.work_roles(graph.structure, lambda: work_roles(graph)) if classes else None
    runs = (
        caches.copy_runs(graph.structure, lambda: copy_runs(graph, roles, recognized_blocks(graph, caches)))
        if roles is not None and graph.twins
        else ()
    )
    estimated, kinds = estimate_work_kinds(graph, layer_placer(graph, caches), classes, roles, runs)
    sites = caches.router_sites(graph.structure, lambda: router_sites(graph)) if "TopK" in graph.op_types else ()
    works, shares, experts = route_work(graph, estimated, sites)  # the estimates, with the experts' rescaled
    return Workload(graph, works, caches, shares, experts, builtin, kinds)
