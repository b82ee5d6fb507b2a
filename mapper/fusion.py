"""Fusion planning: nodes -> kernels, by an ordered table of rules (first match wins).

Stage four. Each rule names the ops it may start from, the ops it may absorb,
how far it may grow and under which policies it applies. A group is legal only
when at most one of its tensors is consumed outside it (the kernel's output) and
its working set fits on chip; every kernel records its nodes and its rule.
"""
from __future__ import annotations

from dataclasses import dataclass

from mapper.caches import ModelCaches
from mapper.graph import Graph, LayerType, Node, OpClass
from mapper.ops import NodeWork
from mapper.quantized import QUANTIZED_OPS

# A QDQ model marks each int8 tensor with a QuantizeLinear -> DequantizeLinear pair; an int8 kernel
# requantizes its result in the epilogue, so the pair rides along without counting toward max_ops.
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_FLOAT_EPILOGUE_OPS = {"Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Erf", "Gelu",
                       "FastGelu", "BiasGelu", "QuickGelu", "HardSwish", "HardSigmoid", "Cast", "Where",
                       "BatchNormalization", "Pow", "Softplus", "Mish", "Elu", "Selu", "Max", "Min",
                       *QDQ_OPS}
EPILOGUE_OPS = frozenset(_FLOAT_EPILOGUE_OPS | {op for op, q in QUANTIZED_OPS.items() if q.twin in _FLOAT_EPILOGUE_OPS})
ELEMENTWISE_CLASSES = frozenset({OpClass.ELEMENTWISE, OpClass.TRANSCENDENTAL})
# An elementwise result this small (a per-tensor or per-channel scale) is cheaper to recompute in the
# epilogue of the kernel that reads it than to launch on its own: the planner lets it wait for that kernel.
EPILOGUE_OPERAND_ELEMENTS = 4096


@dataclass(frozen=True, slots=True)
class FusionRule:
    name: str
    policies: frozenset[str]        # fusion policies under which the rule applies
    starts: str                     # "attention" | "norm" | "matrix" | "elementwise"
    absorbs: frozenset[str]         # op types the group may grow into
    max_ops: int                    # nodes in one kernel, the start included


# Ordered: the first rule whose start matches a node claims it.
FUSION_RULES: tuple[FusionRule, ...] = (
    FusionRule("flash-attention", frozenset({"aggressive"}), "attention", frozenset(), 64),
    FusionRule("norm", frozenset({"default", "aggressive"}), "norm", frozenset(), 16),
    FusionRule("gemm-epilogue", frozenset({"aggressive"}), "matrix", EPILOGUE_OPS, 10),
    FusionRule("gemm-epilogue", frozenset({"default"}), "matrix", EPILOGUE_OPS, 4),
    FusionRule("elementwise-chain", frozenset({"default", "aggressive"}), "elementwise", EPILOGUE_OPS | {
        "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Sin", "Cos", "Not", "Equal", "Less", "Greater",
        "And", "Or", "Softsign", "Sign"}, 12),
)
_FLOAT_MATRIX_STARTS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul", "MatMulNBits", "MatMulInteger",
                        "ConvInteger", "FusedConv", "GemmFastGelu"}
MATRIX_STARTS = frozenset(_FLOAT_MATRIX_STARTS | {op for op, q in QUANTIZED_OPS.items() if q.twin in _FLOAT_MATRIX_STARTS})


@dataclass(frozen=True, slots=True)
class Group:
    """A fusion group before costing: node names in graph order and its rule."""

    nodes: tuple[str, ...]
    rule: str


def _start_kinds(w: NodeWork) -> tuple[str, ...]:
    """The rule starts a node can open, most specific first (attention nodes fall back to plain rules)."""
    kinds = []
    if w.layer_type is LayerType.ATTENTION and w.layer_group >= 0:
        kinds.append("attention")
    if w.layer_type is LayerType.NORMALIZATION and (w.layer_group >= 0 or w.op_class is OpClass.REDUCTION):
        kinds.append("norm")
    elif w.op_type in MATRIX_STARTS:
        kinds.append("matrix")
    elif w.op_class in ELEMENTWISE_CLASSES and w.op_type != "Softmax":
        kinds.append("elementwise")
    return tuple(kinds)


class _Planner:
    def __init__(self, graph: Graph, work: tuple[NodeWork, ...], tiny: frozenset[str]):
        self.graph = graph
        self.tiny_set = tiny
        self.work = {w.name: w for w in work}
        self.order = [n.name for n in graph.nodes]
        self.taken: set[str] = set()
        self.node = {n.name: n for n in graph.nodes}
        self.members: dict[int, list[str]] = {}
        for name in self.order:
            gid = self.work[name].layer_group
            if gid >= 0:
                self.members.setdefault(gid, []).append(name)

    def escaping(self, group: list[str]) -> set[str]:
        """Tensors made inside the group that someone outside it (or the graph output) reads."""
        inside = set(group)
        out = set()
        for name in group:
            for t in self.node[name].outputs:
                if not t:
                    continue
                if t in self.graph.outputs or any(self._kernel_users_outside(t, inside)):
                    out.add(t)
        return out

    def _kernel_users_outside(self, tensor: str, inside: set[str]):
        for user in self.graph.users(tensor):
            if user.name in inside:
                continue
            if self.work[user.name].op_class is OpClass.VIEW:  # look through free views
                yield from self._kernel_users_outside(user.outputs[0], inside) if user.outputs else ()
                if any(o in self.graph.outputs for o in user.outputs):
                    yield user
            else:
                yield user

    def _users_through_views(self, tensor: str):
        for user in self.graph.users(tensor):
            if self.work[user.name].op_class is OpClass.VIEW and user.outputs:
                yield from self._users_through_views(user.outputs[0])
            else:
                yield user

    def waiting_on(self, name: str, group: list[str]) -> list[Node]:
        """Producers of the node's inputs that run neither in the group nor in a kernel already planned
        (looking through free views); weights and graph inputs have none. A node absorbed while one is
        pending would run its kernel before that producer."""
        pending = []
        for tensor in self.node[name].inputs:
            producer = self.graph.producer(tensor) if tensor else None
            while producer is not None and producer.name not in group:
                if self.work[producer.name].op_class is OpClass.VIEW and producer.inputs:
                    producer = self.graph.producer(producer.inputs[0])  # planned or not, a view is free
                    continue
                if producer.name not in self.taken and producer not in pending:
                    pending.append(producer)
                break
        return pending

    def absorbable(self, node: Node, group: list[str], rule: FusionRule, group_id: int) -> bool:
        w = self.work[node.name]
        return (node.name not in group and node.name not in self.taken and node.op_type in rule.absorbs
                and w.op_class is not OpClass.UNMODELED
                and w.layer_group in (-1, group_id))  # never pull a node out of another recognized block

    def grow(self, start: str, rule: FusionRule) -> list[str]:
        """Greedy closure over absorbable users, then trimmed back until the group is legal. A user that
        also reads a sibling not yet planned (GELU's x * 0.5 beside erf(x / sqrt 2) + 1) takes that
        sibling in with it when the sibling can run now; otherwise it is left for a later kernel."""
        group = [start]
        frontier = [start]
        group_id = self.work[start].layer_group
        size = 1  # ops counted toward max_ops (QDQ pairs are not)
        while frontier and size < rule.max_ops:
            name = frontier.pop(0)
            for t in self.node[name].outputs:
                for user in self._users_through_views(t):
                    if size >= rule.max_ops or not self.absorbable(user, group, rule, group_id):
                        continue
                    pending = self.waiting_on(user.name, group)
                    if not all(self.absorbable(p, group, rule, group_id) and not self.waiting_on(p.name, group)
                               for p in pending):
                        continue
                    joining = [*pending, user]  # a tiny pulled-in operand (a scale product) costs no op slot
                    added = sum(n.op_type not in QDQ_OPS for n in joining if n is user or not self.tiny(n.name))
                    if size + added > rule.max_ops:
                        continue
                    for n in joining:  # producers before their user: trimming pops users first
                        group.append(n.name)
                        frontier.append(n.name)
                    size += added
        while len(group) > 1 and len(self.escaping(group)) > 1:
            group.pop()
        return group

    def block(self, w: NodeWork) -> list[str]:
        return [n for n in self.members.get(w.layer_group, ()) if n not in self.taken]

    def deferrable(self, w: NodeWork) -> bool:
        """A tiny elementwise node left alone (dynamic quantization's activation-scale x weight-scale
        product) waits, so that the kernel reading it can compute it in its epilogue, as ONNX Runtime's
        MatMulIntegerToFloat does, instead of paying a launch for a scalar."""
        return w.op_class in ELEMENTWISE_CLASSES and w.op_type in EPILOGUE_OPS and self.tiny(w.name)

    def tiny(self, name: str) -> bool:
        return name in self.tiny_set

    def due(self, deferred: dict[str, None], group: list[str]) -> list[str]:
        """The deferred nodes the group reads, directly or through other deferred nodes, in graph order."""
        needed, stack = set(), list(group)
        while stack:
            for producer in self.waiting_on(stack.pop(), group):
                if producer.name in deferred and producer.name not in needed:
                    needed.add(producer.name)
                    stack.append(producer.name)
        return [d for d in deferred if d in needed]

    def plan(self, policy: str, attention_fusion: bool) -> list[Group]:
        groups: list[Group] = []
        deferred: dict[str, None] = {}  # waiting tiny nodes, in graph order
        for name in self.order:
            if name in self.taken:
                continue
            w = self.work[name]
            if w.op_class in (OpClass.VIEW, OpClass.SHAPE_ONLY):
                self.taken.add(name)
                continue
            kinds = _start_kinds(w)
            chosen: list[str] = [name]
            rule_name, postponed = "single", False
            for rule in FUSION_RULES:
                applies = policy in rule.policies or (rule.starts == "attention" and attention_fusion)
                if not applies or rule.starts not in kinds or policy == "none" and rule.starts != "attention":
                    continue
                if rule.starts in ("attention", "norm"):
                    members = self.block(w) if w.layer_group >= 0 else [name]
                    candidate = [m for m in members if self.work[m].op_class not in (OpClass.VIEW,)]
                    if name != candidate[-1] and any(self.waiting_on(m, candidate) for m in candidate):
                        postponed = True  # a member reads what a later node makes (GQA's Expand of roped K):
                        break             # the block is claimed at a later member, once that is planned
                else:
                    candidate = self.grow(name, rule)
                if len(candidate) > 1 or rule.starts == "norm":
                    chosen, rule_name = candidate, rule.name
                    break
            if postponed:
                continue
            if rule_name == "single" and policy != "none" and self.deferrable(w):
                deferred[name] = None
                continue
            for d in self.due(deferred, chosen):  # what the group reads and no kernel has made yet runs first
                groups.append(Group((d,), "single"))
                self.taken.add(d)
            self.taken.update(chosen)
            for d in [d for d in deferred if d in self.taken]:
                del deferred[d]
            if rule_name in ("flash-attention", "norm") and w.layer_group >= 0:
                # the views inside the block are free and belong to it
                self.taken.update(n for n in self.block(w))
            groups.append(Group(tuple(chosen), rule_name))
        groups.extend(Group((d,), "single") for d in deferred)  # read by no later kernel
        return groups


def tiny_nodes(graph: Graph) -> frozenset[str]:
    """Nodes whose outputs hold at most EPILOGUE_OPERAND_ELEMENTS elements: the one fact about sizes the
    planner reads (a tiny operand waits for the kernel that reads it), so part of the plan's cache key."""
    tiny = set()
    for n in graph.nodes:
        if sum(spec.elements for o in n.outputs if (spec := graph.spec(o)) is not None) <= EPILOGUE_OPERAND_ELEMENTS:
            tiny.add(n.name)
    return frozenset(tiny)


def plan_fusion(graph: Graph, work: tuple[NodeWork, ...], work_key: int, policy: str, attention_fusion: bool,
                caches: ModelCaches) -> list[Group]:
    """Fusion groups in graph order. `policy` is none | default | aggressive.

    The groups depend on the graph's structure and, through the tiny operands that wait for their reader,
    on which nodes are tiny at these bindings: a sweep over batch and sequence length plans each (model,
    policy, tiny set) once. `work_key` (`Workload.plan_key`) holds every node's name, op class and block,
    so a binding that leaves some node unmodeled plans afresh."""
    tiny = tiny_nodes(graph)
    return list(caches.fusion_plan(graph.structure, work_key, tiny, policy, attention_fusion,
                                   lambda: _Planner(graph, work, tiny).plan(policy, attention_fusion)))
