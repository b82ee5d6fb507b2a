"""Fusion planning: nodes -> kernels, by an ordered table of rules (first match wins).

Part of the plan stage (pipeline.plan_kernels). Each rule (fusion_rules.py) names the ops it may start from,
the ops it may absorb, how far it may grow and under which policies it applies. A group is legal only
when at most one of its tensors is consumed outside it (the kernel's output) and
its working set fits on chip; every kernel records its nodes and its rule.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

from mapper.core.caches import ModelCaches
from mapper.core.graph import Graph, Node, OpClass
from mapper.core.records import each
from mapper.core.result import NodeWork
from mapper.core.vocab import FusionPolicy, KernelRule
from mapper.plan.fusion_rules import (
    ELEMENTWISE_CLASSES,
    EPILOGUE_OPS,
    FUSION_RULES,
    QDQ_OPS,
    FusionRule,
    RuleStart,
    start_kinds,
)

# An elementwise result this small (a per-tensor or per-channel scale) is cheaper to recompute in the
# epilogue of the kernel that reads it than to launch on its own: the planner lets it wait for that kernel.
EPILOGUE_OPERAND_ELEMENTS = 4096
# More producers than any real kernel input list (a Where reads 3, a variadic Max a few): a node waiting on
# more is left for a later kernel rather than pulled in with them all.
MAX_WAITING_PRODUCERS = 64


@dataclass(frozen=True, slots=True)
class Group:
    """A fusion group before costing: node names in graph order and its rule."""

    nodes: tuple[str, ...]
    rule: KernelRule
    # hashed once: a plan's groups key three lookups a slice (its boundaries, its kernels, each group's place)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.nodes, self.rule)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):  # another process hashes strings with its own seed: it hashes again
        return Group, (self.nodes, self.rule)


class FusionPlan(tuple):
    """A plan's groups in graph order, hashed once: the plan keys the model's boundary and kernel tables at every
    binding, and a tuple keeps no hash (each lookup would call every group's `__hash__`: 2,000 a decoder step)."""

    def __hash__(self) -> int:
        found = self.__dict__.get("hash")
        if found is None:
            found = self.__dict__["hash"] = tuple.__hash__(self)
        return found

    def __eq__(self, other: object) -> bool:
        return self is other or tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __reduce__(self):  # another process hashes strings with its own seed: it hashes again
        return FusionPlan, (tuple(self),)


class _Planner:
    """One planning pass. Linear in nodes plus edges: groups are sets beside their lists, the views'
    readers are walked with explicit stacks (a chain of 10^5 Reshapes is no recursion) and each tensor's
    kernel readers are found once, and a group is trimmed by one forward pass over its prefixes."""

    def __init__(self, graph: Graph, work: Sequence[NodeWork], tiny: frozenset[str]):
        self.graph = graph
        self.tiny_set = tiny
        self.asked: set[str] = set()  # the nodes whose tininess the plan read (`tiny`): all it depends on of sizes
        self.work = {w.name: w for w in each(work)}  # the plan's read: a binding's records are not kept
        self.order = [n.name for n in graph.nodes]
        self.taken: set[str] = set()
        self.node = {n.name: n for n in graph.nodes}
        self.members: dict[int, list[str]] = {}
        for name in self.order:
            gid = self.work[name].layer_group
            if gid >= 0:
                self.members.setdefault(gid, []).append(name)
        self._readers: dict[str, tuple[tuple[str, ...], bool]] = {}
        self._origin: dict[str, Node | None] = {}
        self._producers: dict[str, list[Node]] = {}
        self._planned_prefix: dict[str, int] = {}

    def is_view(self, node: Node) -> bool:
        return self.work[node.name].op_class is OpClass.VIEW

    def kernel_readers(self, tensor: str) -> tuple[tuple[str, ...], bool]:
        """The nodes that read the tensor, looking through free views (each once per path to it), and
        whether a view on the way makes a graph output. Structural: found once per tensor."""
        found = self._readers.get(tensor)
        if found is None:
            readers, output_view = [], False
            stack = [iter(self.graph.users(tensor))]
            while stack:
                user = next(stack[-1], None)
                if user is None:
                    stack.pop()
                elif self.is_view(user) and user.outputs:
                    stack.append(iter(self.graph.users(user.outputs[0])))
                    output_view = output_view or not self.graph.output_set.isdisjoint(user.outputs)
                else:  # a kernel, or a view that makes nothing (read, and no reason to escape)
                    readers.append(user.name)
            found = self._readers[tensor] = (tuple(readers), output_view)
        return found

    def legal_length(self, group: list[str]) -> int:
        """How many of the group's first nodes make a legal kernel: the longest prefix of which at most
        one tensor escapes (is a graph output or read outside it, through views), else the first node
        alone. What popping the last node until the group is legal gives, in one forward pass."""
        inside: set[str] = set()
        outside: dict[str, int] = {}  # tensor made inside -> readers outside (a view making an output: 1 more)
        waiting: dict[str, list[str]] = {}  # a node outside -> the tensors made inside that it reads
        escaping, best = 0, 1
        for k, name in enumerate(group, 1):
            inside.add(name)
            for t in waiting.pop(name, ()):
                outside[t] -= 1
                escaping -= outside[t] == 0 and t not in self.graph.output_set
            for t in self.node[name].outputs:
                if not t or t in outside:
                    continue
                readers, output_view = self.kernel_readers(t)
                outside[t] = int(output_view)
                for r in readers:
                    if r not in inside and not self.is_view(self.node[r]):
                        outside[t] += 1
                        waiting.setdefault(r, []).append(t)
                escaping += outside[t] > 0 or t in self.graph.output_set
            if escaping <= 1:
                best = k
        return best

    def _users_through_views(self, tensor: str):
        for name in self.kernel_readers(tensor)[0]:
            yield self.node[name]

    def origin(self, tensor: str) -> Node | None:
        """The node that makes the tensor, looking back through free views (planned or not, a view is
        free); None for weights and graph inputs. Structural: each tensor on a chain of views is walked once."""
        chain, t = [], tensor
        while True:
            if t in self._origin:
                found = self._origin[t]
                break
            chain.append(t)
            found = self.graph.producer(t) if t else None
            if found is None or not (self.is_view(found) and found.inputs):
                break
            t = found.inputs[0]
        for t in chain:
            self._origin[t] = found
        return found

    @overload
    def waiting_on(self, name: str, group: set[str], limit: None = None) -> list[Node]: ...
    @overload
    def waiting_on(self, name: str, group: set[str], limit: int) -> list[Node] | None: ...
    def waiting_on(self, name: str, group: set[str], limit: int | None = None) -> list[Node] | None:
        """Producers of the node's inputs that run neither in the group nor in a kernel already planned
        (looking through free views); weights and graph inputs have none. A node absorbed while one is
        pending would run its kernel before that producer. None where more than `limit` are pending:
        a caller that needs no more stops there (a node of 10^5 inputs is asked by each of them)."""
        producers = self._producers.get(name)
        if producers is None:
            producers, seen = [], set()
            for tensor in self.node[name].inputs:
                p = self.origin(tensor)
                if p is not None and p.name not in seen:
                    seen.add(p.name)
                    producers.append(p)
            self._producers[name] = producers
        first = self._planned_prefix.get(name, 0)  # the producers before it are planned: never pending again
        while first < len(producers) and producers[first].name in self.taken:
            first += 1
        self._planned_prefix[name] = first
        pending = []
        for k in range(first, len(producers)):
            p = producers[k]
            if p.name not in group and p.name not in self.taken:
                pending.append(p)
                if limit is not None and len(pending) > limit:
                    return None
        return pending

    def waits(self, name: str, group: set[str]) -> bool:
        return self.waiting_on(name, group, 0) is None

    def absorbable(self, node: Node, group: set[str], rule: FusionRule, group_id: int) -> bool:
        w = self.work[node.name]
        return (
            node.name not in group
            and node.name not in self.taken
            and node.op_type in rule.absorbs
            and w.op_class is not OpClass.UNMODELED
            and w.layer_group in (-1, group_id)
        )  # never pull a node out of another recognized block

    def grow(self, start: str, rule: FusionRule) -> list[str]:
        """Greedy closure over absorbable users, then trimmed back until the group is legal. A user that
        also reads a sibling not yet planned (GELU's x * 0.5 beside erf(x / sqrt 2) + 1) takes that
        sibling in with it when the sibling can run now; otherwise it is left for a later kernel."""
        group, inside = [start], {start}
        frontier = deque([start])
        group_id = self.work[start].layer_group
        size = 1  # ops counted toward max_ops (QDQ pairs are not)
        while frontier and size < rule.max_ops:
            name = frontier.popleft()
            for t in self.node[name].outputs:
                for user in self._users_through_views(t):
                    if size >= rule.max_ops:
                        break  # full: no later user can join
                    if not self.absorbable(user, inside, rule, group_id):
                        continue
                    joining = self.joining(user, inside, rule, group_id, rule.max_ops - size)
                    if joining is None:
                        continue
                    joining, added = joining
                    for n in joining:  # producers before their user: trimming drops users first
                        group.append(n.name)
                        inside.add(n.name)
                        frontier.append(n.name)
                    size += added
        return group[: self.legal_length(group)]

    def joining(self, user: Node, inside: set[str], rule: FusionRule, group_id: int, room: int):
        """(the producers the user waits on and the user, the op slots they take), where each producer can
        join (absorbable, waiting on nothing) and they fit in `room` slots; else None. A tiny pulled-in
        operand (a scale product) costs no slot; a user waiting on more than MAX_WAITING_PRODUCERS is
        left for a later kernel (a hostile fan-in of tiny results would pull them all in, again per
        start). Stops at the first producer that decides it."""
        pending = self.waiting_on(user.name, inside, MAX_WAITING_PRODUCERS)
        if pending is None:
            return None
        added = int(user.op_type not in QDQ_OPS)
        for p in pending:
            if not self.absorbable(p, inside, rule, group_id) or self.waits(p.name, inside):
                return None
            added += p.op_type not in QDQ_OPS and not self.tiny(p.name)
            if added > room:
                return None
        return [*pending, user], added

    def block(self, w: NodeWork) -> list[str]:
        return [n for n in self.members.get(w.layer_group, ()) if n not in self.taken]

    def deferrable(self, w: NodeWork) -> bool:
        """A tiny elementwise node left alone (dynamic quantization's activation-scale x weight-scale
        product) waits, so that the kernel reading it can compute it in its epilogue, as ONNX Runtime's
        MatMulIntegerToFloat does, instead of paying a launch for a scalar."""
        return w.op_class in ELEMENTWISE_CLASSES and w.op_type in EPILOGUE_OPS and self.tiny(w.name)

    def tiny(self, name: str) -> bool:
        self.asked.add(name)
        return name in self.tiny_set

    def due(self, deferred: dict[str, int], group: list[str]) -> list[str]:
        """The deferred nodes the group reads, directly or through other deferred nodes, in graph order."""
        needed, stack, inside = set(), list(group), set(group)
        while stack:
            for producer in self.waiting_on(stack.pop(), inside):
                if producer.name in deferred and producer.name not in needed:
                    needed.add(producer.name)
                    stack.append(producer.name)
        return sorted(needed, key=deferred.__getitem__)

    def plan(self, policy: FusionPolicy, attention_fusion: bool) -> list[Group]:
        groups: list[Group] = []
        deferred: dict[str, int] = {}  # waiting tiny nodes -> their place in graph order
        for place, name in enumerate(self.order):
            if name in self.taken:
                continue
            w = self.work[name]
            if w.op_class in (OpClass.VIEW, OpClass.SHAPE_ONLY):
                self.taken.add(name)
                continue
            chosen, rule = self.choose(name, w, policy, attention_fusion)
            if chosen is None:
                continue  # postponed
            if rule is KernelRule.SINGLE and policy is not FusionPolicy.NONE and self.deferrable(w):
                deferred[name] = place
                continue
            due = self.due(deferred, chosen)
            for d in due:  # what the group reads and no kernel has made yet runs first
                groups.append(Group((d,), KernelRule.SINGLE))
            newly = [*due, *chosen]
            if rule in (KernelRule.FLASH_ATTENTION, KernelRule.NORM) and w.layer_group >= 0:
                newly += self.block(w)  # the views inside the block are free and belong to it
            self.taken.update(newly)
            for d in newly:
                deferred.pop(d, None)
            groups.append(Group(tuple(chosen), rule))
        groups.extend(Group((d,), KernelRule.SINGLE) for d in deferred)  # read by no later kernel
        return groups

    def choose(
        self, name: str, w: NodeWork, policy: FusionPolicy, attention_fusion: bool
    ) -> tuple[list[str] | None, KernelRule]:
        """The group the node starts and its rule ("single" alone), or None where its block is claimed
        at a later member."""
        kinds = start_kinds(w)
        for rule in FUSION_RULES:
            attention = rule.starts is RuleStart.ATTENTION
            applies = policy in rule.policies or (attention and attention_fusion)
            if not applies or rule.starts not in kinds or policy is FusionPolicy.NONE and not attention:
                continue
            if rule.starts in (RuleStart.ATTENTION, RuleStart.NORM):
                members = self.block(w) if w.layer_group >= 0 else [name]
                candidate = [m for m in members if self.work[m].op_class is not OpClass.VIEW]
                inside = set(candidate)
                if name != candidate[-1] and any(self.waits(m, inside) for m in candidate):
                    return None, KernelRule.SINGLE  # a member reads what a later node makes (GQA's Expand of roped K):
                    # the block is claimed at a later member, once that is planned
            else:
                candidate = self.grow(name, rule)
            if len(candidate) > 1 or rule.starts is RuleStart.NORM:
                return candidate, rule.name
        return [name], KernelRule.SINGLE


def tiny_nodes(graph: Graph) -> frozenset[str]:
    """Nodes whose outputs hold at most EPILOGUE_OPERAND_ELEMENTS elements: the one fact about sizes the
    planner reads (a tiny operand waits for the kernel that reads it), so part of the plan's cache key. Found
    once per graph (a search maps one binding under many plans)."""
    return graph.derived("tiny_nodes", _tiny_nodes)


def _tiny_nodes(graph: Graph) -> frozenset[str]:
    shape_of, prod, twins = graph.tensors.shape_of, math.prod, graph.twins
    is_tiny: list[bool] = []
    for k, n in enumerate(graph.nodes):
        t = twins[k] if twins else -1
        if t >= 0:  # a repeated layer's node has its twin's output shapes (`Graph.twins`)
            is_tiny.append(is_tiny[t])
            continue
        total = 0  # a plain loop: this runs over every node of every binding
        for o in n.outputs:
            shape = shape_of(o) if o else None
            if shape is not None:
                total += prod(shape)
        is_tiny.append(total <= EPILOGUE_OPERAND_ELEMENTS)
    return frozenset(n.name for n, tiny in zip(graph.nodes, is_tiny) if tiny)


def plan_fusion(
    graph: Graph,
    work: Sequence[NodeWork],
    work_key: int,
    policy: FusionPolicy | str,
    attention_fusion: bool,
    caches: ModelCaches,
) -> FusionPlan:
    """Fusion groups in graph order under `policy` (a `FusionPolicy` or its value).

    The groups depend on the graph's structure and, through the tiny operands that wait for their reader,
    on which nodes are tiny at these bindings: of those, only on the nodes the planner asked about (`_Planner.asked`),
    so a plan made at one binding is the plan of every binding whose tiny nodes agree on them (a sweep over batch
    and sequence length plans once per such answer). `work_key` (`Workload.plan_key`) holds every node's name, op
    class and block, so a binding that leaves some node unmodeled plans afresh."""
    tiny, policy = tiny_nodes(graph), FusionPolicy(policy)

    def plan() -> tuple[FusionPlan, frozenset[str]]:
        planner = _Planner(graph, work, tiny)
        return FusionPlan(planner.plan(policy, attention_fusion)), frozenset(planner.asked)

    return caches.fusion_plan(graph.structure, work_key, tiny, policy, attention_fusion, plan)
