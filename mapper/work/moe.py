"""Mixture-of-experts layers: the router's top-k choice and what each expert GEMM really does.

Stage two, after the work model (work/ops.py). An exporter with static shapes runs every expert on every
token and zeroes the tokens not routed to it (router MatMul -> Softmax -> TopK -> ScatterElements into a
routing table -> Gather of an expert's column -> Mul with its output), so the graph alone says E times the
work. Here each expert GEMM found that way gets its expected work instead: T tokens each pick k of E
experts, so an expert sees T*k/E tokens on average, is used by some token with probability
1 - (1 - k/E)^T, and only the experts used read their weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from mapper.core.graph import Graph
from mapper.core.records import record
from mapper.core.result import MatrixShape, NodeWork
from mapper.work.works import NodeWorks

DYNAMIC_ROUTING_OPS = ("NonZero",)  # torch.where(expert_mask) in HF MixtralSparseMoeBlock.forward exports so
EXPERT_WALK_LIMIT = 16  # nodes between an expert's input and its output (SwiGLU: 3 MatMuls, Sigmoid, 2 Mul)
# How a router scores the experts: a softmax over the E logits (Mixtral, Qwen-MoE, DeepSeek-V2), or a sigmoid per
# expert (DeepSeek-V3), where a learnt per-expert bias is added to the scores the TopK chooses by (noaux_tc)
ROUTER_SCORES = frozenset({"Softmax", "Sigmoid"})
# A routing table's way to the Muls by its columns: Mixtral's Gather of one expert's column; the grouped block's
# [tokens, E] -> [E, tokens, 1] views (zoo/moe_block.py)
ROUTING_PATH_OPS = frozenset({"Gather", "Reshape", "Transpose", "Unsqueeze", "Squeeze"})
ROUTING_PATH_DEPTH = 4
STACKED_RANK = 3  # a grouped expert GEMM's weight: [E, K, N], every expert's matrix stacked

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Routing:
    """One MoE layer's router: `experts` E and `top_k` k, and the MatMuls of each expert."""

    experts: int
    top_k: int
    gemms: tuple[str, ...]  # node names of every expert's GEMMs
    hidden: int = 0  # the router's input width: what each routed token carries to its experts
    # a grouped block's other expert nodes, [E, tokens, ..] wide in the graph: the activation between its GEMMs,
    # the weighting by the routing table and the sum over E (each token's k rows are what a fused MoE touches)
    others: tuple[str, ...] = ()
    router: str = ""  # the router MatMul's node
    stacked: tuple[bool, ...] = ()  # each expert GEMM's weights stacked [E, K, N] (a grouped block's)
    weights: tuple[tuple[str, ...], ...] = ()  # each expert GEMM's weight inputs


@record
class ExpertGemm:
    """What the plan stages need of one expert GEMM node: its layer's routing, the tokens present T,
    the mean tokens per used expert (T k / E_used: the GEMM's M), and the share of T one expert sees (k/E)."""

    layer: int  # index of its routing (one per MoE layer), in graph order
    experts: int
    top_k: int
    hidden: int
    tokens: int
    mean_tokens: float
    grouped: bool = False  # one GEMM for every expert (stacked [E, K, N] weights): its M x batch is tokens x experts
    router: str = ""  # its layer's router MatMul node

    @property
    def token_share(self) -> float:
        return self.top_k / self.experts

    @property
    def figures(self) -> tuple:
        """What an expert kernel's work depends on of its routing (`route_work` scales by them; the plan stages
        split by them): every figure but its layer and router."""
        return self.experts, self.top_k, self.hidden, self.tokens, self.mean_tokens, self.grouped

    @property
    def weight_share(self) -> float:
        """The expected share of the experts some token uses (and so of their weights read)."""
        return expected_experts(self.experts, self.top_k, self.tokens) / self.experts

    def busiest_tokens(self, imbalance: float) -> float:
        """The busiest expert's tokens: the mean x the load-imbalance factor, at most the tokens present."""
        return min(float(self.tokens), self.mean_tokens * imbalance)


def expected_experts(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts T tokens use, in expectation: E * (1 - (1 - k/E)^T) (each token picks k of E)."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True, slots=True)
class RouterSite:
    """Where one MoE layer sits in a graph, found from its structure alone (`router_sites`): the TopK's scores and
    choices, the router MatMul and the node walk from its routing table's columns back to the router's input. The
    counts (E, k, the hidden width) and whether the experts' weights are stacked are read at each binding."""

    probs: str  # the scores the TopK chooses from: [.., E]
    top: str  # the TopK's values: [.., k]
    router: str  # the router MatMul
    hidden: str  # the router's input: [.., hidden]
    gemms: tuple[str, ...]  # the expert MatMuls the walk met
    weights: tuple[tuple[str, ...], ...]  # each one's weight inputs
    others: tuple[str, ...]  # the walk's other nodes, each Mul by a column and its ReduceSum (a grouped block's)


def router_sites(graph: Graph) -> tuple[RouterSite, ...]:
    """Each TopK over a Softmax of router logits whose indices scatter into a routing table, with the nodes
    between the router's input and the Muls by that table's columns: the graph's structure (nodes, weights and
    dataflow) alone, so a model's bindings find them once (`ModelCaches.router_sites`)."""
    if "TopK" not in graph.op_types:  # no router to look for
        return ()
    found = []
    for topk in graph.nodes:
        if topk.op_type != "TopK" or len(topk.outputs) < 2 or not topk.inputs:  # noqa: PLR2004 (values, indices)
            continue
        router = _router(graph, topk.inputs[0])
        if router is None:
            continue
        gemms: list = []
        others: list[str] = []
        for table in _routing_tables(graph, topk):
            table_gemms, table_others = _expert_nodes(graph, table, router)
            gemms += table_gemms
            others += table_others
        weights = tuple(tuple(i for i in g.inputs if i in graph.weights) for g in gemms)
        found.append(
            RouterSite(
                topk.inputs[0],
                topk.outputs[0],
                router.name,
                router.inputs[0],
                tuple(g.name for g in gemms),
                weights,
                tuple(others),
            )
        )
    return tuple(found)


def find_routings(graph: Graph, sites: tuple[RouterSite, ...] | None = None) -> tuple[Routing, ...]:
    """The graph's MoE layers at its bindings: each router site (`router_sites`, found here where not given) with
    its E and k read from the scores' and choices' shapes; a grouped block (some expert weight stacked E deep,
    [E, K, N]) also holds the walk's other nodes."""
    found = []
    tensors = graph.tensors
    for site in router_sites(graph) if sites is None else sites:
        if site.top not in tensors or site.probs not in tensors or not site.gemms:
            continue
        experts, k = tensors[site.probs].shape[-1], tensors[site.top].shape[-1]
        if not 0 < k < experts:
            continue
        stacked = tuple(any(_stacked(tensors.shape_of(w), experts) for w in ws) for ws in site.weights)
        others = site.others if any(stacked) else ()
        hidden = tensors[site.hidden].shape[-1]
        found.append(Routing(experts, k, site.gemms, hidden, others, site.router, stacked, site.weights))
    return tuple(found)


def _router(graph: Graph, choice: str):
    """The router MatMul whose scores the TopK chooses from: MatMul -> Softmax or Sigmoid (-> Add of a weight,
    DeepSeek-V3's bias) -> TopK; None where the TopK is not a router's."""
    scores = graph.producer(choice)
    if scores is not None and scores.op_type == "Add" and any(i in graph.weights for i in scores.inputs):
        scores = next((graph.producer(i) for i in scores.inputs if i and i not in graph.weights), None)
    if scores is None or scores.op_type not in ROUTER_SCORES or not scores.inputs:
        return None
    router = graph.producer(scores.inputs[0])
    return router if router is not None and router.op_type == "MatMul" else None


def _routing_tables(graph: Graph, topk) -> list[str]:
    return [o for u in graph.users(topk.outputs[1]) if u.op_type == "ScatterElements" for o in u.outputs]


def _expert_nodes(graph: Graph, table: str, router) -> tuple[list, list[str]]:
    """MatMuls feeding the Muls by the routing table's columns (each Gather of one, or the table viewed as
    [E, tokens, 1]), back to the router's input; and the walk's other nodes (`Routing.others` where the weights
    are stacked)."""
    h, gemms, others = router.inputs[0], [], []
    for mul, column in _column_muls(graph, table):
        frontier = [i for i in mul.inputs if i != column]
        seen: set[str] = set()
        while frontier and len(seen) < EXPERT_WALK_LIMIT:
            node = graph.producer(frontier.pop())
            if node is None or node.name in seen:
                continue
            seen.add(node.name)
            if node.op_type == "MatMul":
                gemms.append(node)
            else:
                others.append(node.name)
            frontier.extend(i for i in node.inputs if i and i != h and i not in graph.weights)
        others += [mul.name] + [u.name for o in mul.outputs for u in graph.users(o) if u.op_type == "ReduceSum"]
    return gemms, others


def _column_muls(graph: Graph, table: str) -> list[tuple]:
    """(Mul, the column it reads) for each Mul the routing table reaches through ROUTING_PATH_OPS."""
    found, frontier = [], [table]
    for _ in range(ROUTING_PATH_DEPTH):
        reached: list[str] = []
        for tensor in frontier:
            for user in graph.users(tensor):
                if user.op_type == "Mul":
                    found.append((user, tensor))
                elif user.op_type in ROUTING_PATH_OPS:
                    reached.extend(o for o in user.outputs if o)
        frontier = reached
    return found


def _stacked(shape: tuple[int, ...] | None, experts: int) -> bool:
    """Whether a weight of this shape holds every expert's matrix at once ([E, K, N])."""
    return shape is not None and len(shape) == STACKED_RANK and shape[0] == experts


def route_work(
    graph: Graph, nodes: NodeWorks, sites: tuple[RouterSite, ...] | None = None
) -> tuple[NodeWorks, dict[str, float], dict[str, ExpertGemm]]:
    """The nodes with every expert GEMM's expected work (FLOPs and activations x k/E; weights read x the
    share of experts used; M the tokens per used expert), weight name -> share read (for the kernels), and
    expert node -> its routing figures (for activation sizing, imbalance and expert parallelism): every expert
    GEMM, and a grouped block's other expert nodes (`Routing.others`). Only the expert nodes' records are
    written (the rest stay columns: a search keeps 256 bindings), and the experts of a layer share one record of
    their figures and of each matrix shape (`interned`)."""
    interned: dict[object, object] = {}  # equal records once: a Mixtral binding has 8 experts' copies of each
    shares: dict[str, float] = {}
    scaled: dict[str, NodeWork] = {}
    gemms: dict[str, ExpertGemm] = {}
    routings = find_routings(graph, sites)
    if not routings:
        return nodes, shares, gemms
    position = {n.name: k for k, n in enumerate(nodes.named)}

    def by_name(name: str) -> NodeWork | None:
        k = position.get(name)
        return None if k is None else nodes.read_once(k)

    for layer, routing in enumerate(routings):
        # a layer's experts repeat one another (`NodeWorks.sources`: a node's record is its twin's): each distinct
        # source is scaled once a layer and its record handed to every node sharing it (named for each on its read)
        made: dict[tuple[int, bool], tuple[NodeWork, ExpertGemm, float]] = {}
        for name, grouped, weights in zip(routing.gemms, routing.stacked, routing.weights, strict=True):
            k = position.get(name)
            source = None if k is None else nodes.sources[k]
            if source is None or source.matrix is None:
                continue
            found = made.get((id(source), grouped))
            if found is None:
                found = made[(id(source), grouped)] = _routed(source, routing, layer, grouped, interned)
            scaled[name], gemms[name], share = found
            for i in weights:
                shares[i] = share
        _route_others(routing, by_name, scaled, gemms)
    return nodes.with_sources({position[name]: w for name, w in scaled.items()}), shares, gemms


def _routed(
    w: NodeWork, routing: Routing, layer: int, grouped: bool, interned: dict
) -> tuple[NodeWork, ExpertGemm, float]:
    """An expert GEMM's record at its expected work, its routing figures and the share of its weights read."""
    matrix = w.matrix
    assert matrix is not None  # route_work passes only GEMMs
    tokens = matrix.m if grouped else matrix.batch * matrix.m
    used = expected_experts(routing.experts, routing.top_k, tokens)
    share, routed = used / routing.experts, routing.top_k / routing.experts
    mean = tokens * routing.top_k / used
    activations = w.bytes_read - w.weight_bytes
    batch = max(1, round(used)) if grouped else 1  # a grouped GEMM runs the used experts as its batch
    scaled = replace(
        w,
        flops=w.flops * routed,
        matrix_flops=w.matrix_flops * routed,
        bytes_read=activations * routed + w.weight_bytes * share,
        bytes_written=w.bytes_written * routed,
        weight_bytes=w.weight_bytes * share,
        matrix=_once(interned, MatrixShape(batch, max(1, round(mean)), matrix.n, matrix.k, matrix.kind)),
    )
    figures = ExpertGemm(
        layer, routing.experts, routing.top_k, routing.hidden, tokens, mean, grouped, router=routing.router
    )
    return scaled, _once(interned, figures), share


def _once(interned: dict, value: _T) -> _T:
    """The record equal to `value` met first in `interned` (records compare by their fields)."""
    return interned.setdefault(value, value)


def _route_others(
    routing: Routing, by_name: Callable[[str], NodeWork | None], scaled: dict, gemms: dict[str, ExpertGemm]
) -> None:
    """A grouped block's other expert nodes at the k/E share of their [E, tokens, ..] work: each token's k rows,
    the layer's routing figures beside them (so that plan/experts.py splits them with their GEMMs)."""
    figures = next((gemms[g] for g in routing.gemms if g in gemms), None)
    if figures is None:
        return
    routed = routing.top_k / routing.experts
    for name in routing.others:
        w = by_name(name)
        if w is None:
            continue
        scaled[name] = replace(
            w,
            flops=w.flops * routed,
            sfu_ops=w.sfu_ops * routed,
            bytes_read=w.bytes_read * routed,
            bytes_written=w.bytes_written * routed,
        )
        gemms[name] = figures


def routing_caveats(graph: Graph, gemms: dict[str, ExpertGemm]) -> list[str]:
    """How a graph's mixture of experts is costed: at expected tokens where its router was recognised; a
    warning where tokens are routed by data-dependent ops (an exporter's NonZero/Where dispatch)."""
    if gemms:
        layers = len({g.layer for g in gemms.values()})
        g = next(iter(gemms.values()))
        return [
            (
                f"Mixture of experts ({layers} layers, top-{g.top_k} of {g.experts}): expert GEMMs are costed at"
                f" expected tokens per expert (T x k / E, M = T x k / experts used) and weights at expected coverage"
                f" E(1-(1-k/E)^T), not at a measured routing."
            )
        ]
    if "TopK" in graph.op_types and not graph.op_types.isdisjoint(DYNAMIC_ROUTING_OPS):
        return [
            (
                "This graph routes tokens with data-dependent ops (TopK then NonZero): its expert GEMMs are costed at"
                " the shapes bound at import, not at expected tokens per expert (T x k / E); map a static-shape"
                " export or the model's Hugging Face config.json for routed costs."
            )
        ]
    return []
