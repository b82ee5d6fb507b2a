"""Import, the structure's repeats: which nodes are copies of the node one period earlier.

A transformer's layers repeat: node i + P of layer k + 1 has node i's op and attributes, reads the
tensors node i reads one period later (its own layer's, or the layer before's output where node i reads
the one before that), the same tensors both read (an attention mask made once), or a weight of the same
shape, type and small value. Such a node has the outputs of node i at every binding where the stretch's
few boundary tensors agree: those it reads from before the stretch (the first layer's input against the
second's). The walk then copies node i's outputs instead of inferring them again (`Walk.visit_all`).

Found once per model from its nodes in execution order and its initializers (`ModelCaches.repeats`),
in time linear in the nodes: a few candidate periods, each one pass over the nodes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from mapper.core.graph import Node

CANDIDATE_PERIODS = 4  # periods tried, best first
NEXT_OCCURRENCES = 16  # a node's gaps to this many earlier nodes of its signature vote for a period
BEFORE_ANY_NODE = -1  # where a graph input is made, for the boundary checks
GAPS_SCORED = 12  # the commonest gaps, each scored by one pass over the nodes
MIN_STRETCH = 8  # matched nodes a stretch needs: a shorter one saves less than its boundary check costs


@dataclass(frozen=True, slots=True)
class Stretch:
    """Positions [first, end) each copy the node `period` earlier, valid at a binding where every pair in
    `checks` (a tensor read before the stretch, the one its copy reads) has equal facts (shape, type,
    constant value, whether a constant)."""

    period: int
    first: int
    end: int
    checks: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Repeats:
    """The model's stretches, and for each node position the position it copies and its stretch (-1: none)."""

    stretches: tuple[Stretch, ...] = ()
    twin: tuple[int, ...] = ()
    stretch_of: tuple[int, ...] = ()
    copies: int = 0  # positions that copy another


def find_repeats(nodes: list[Node], initializer_ids: dict[str, int]) -> Repeats:
    """The stretches of copies among `nodes` (execution order); `initializer_ids`: each initializer's
    interned (shape, type, small value), by which two layers' weights are alike."""
    made = _producers(nodes)
    if made is None:  # a tensor made twice (a damaged file): nothing is copied
        return Repeats()
    twin, stretch_of, stretches = [-1] * len(nodes), [-1] * len(nodes), []
    for period in _candidate_periods(nodes):
        for start, stop, checks in _stretches(nodes, made, initializer_ids, period):
            copies = range(start + period, stop + period)
            if any(twin[j] >= 0 for j in copies):
                continue  # claimed by a stretch of a commoner period
            for j in copies:
                twin[j], stretch_of[j] = j - period, len(stretches)
            stretches.append(Stretch(period, copies.start, copies.stop, checks))
    return Repeats(tuple(stretches), tuple(twin), tuple(stretch_of), sum(t >= 0 for t in twin))


def _producers(nodes: list[Node]) -> dict[str, tuple[int, int]] | None:
    """Tensor -> (position of the node making it, output index); None where a tensor is made twice."""
    made: dict[str, tuple[int, int]] = {}
    for pos, node in enumerate(nodes):
        for k, o in enumerate(node.outputs):
            if o:
                if o in made:
                    return None
                made[o] = (pos, k)
    return made


def _candidate_periods(nodes: list[Node]) -> list[int]:
    """Periods worth a pass, best first: the gaps between a node and the next NEXT_OCCURRENCES nodes of its
    signature (a layer of six MatMuls puts each one layer from the sixth next), the commonest
    GAPS_SCORED of them ranked by how many positions hold one signature at both ends."""
    sigs = [n.signature for n in nodes]
    seen: dict[int, list[int]] = {}
    gaps: Counter[int] = Counter()
    for pos, sig in enumerate(sigs):
        if sig is None:
            continue
        earlier = seen.setdefault(sig, [])
        gaps.update(pos - e for e in earlier[-NEXT_OCCURRENCES:])
        earlier.append(pos)
    scored = [
        (sum(a is not None and a == b for a, b in zip(sigs, sigs[gap:])), gap)
        for gap, _ in gaps.most_common(GAPS_SCORED)
    ]
    return [gap for score, gap in sorted(scored, key=lambda sg: (-sg[0], sg[1]))[:CANDIDATE_PERIODS] if score]


def _stretches(nodes: list[Node], made: dict, initializer_ids: dict[str, int], period: int):
    """(start, stop, checks) of each maximal run of positions i in [start, stop) whose node i + period is
    a copy of node i (`_alike`), at least MIN_STRETCH long; `checks`: the pairs read from before `start`."""
    start, pending = None, []
    for i in range(len(nodes) - period + 1):
        pairs = _alike(nodes[i], nodes[i + period], period, made, initializer_ids) if i + period < len(nodes) else None
        if pairs is not None:
            if start is None:
                start, pending = i, []
            pending.append(pairs)
            continue
        if start is not None and i - start >= MIN_STRETCH:
            checks = {(x, y) for group in pending for (x, y, px) in group if px < start}
            yield start, i, tuple(sorted(checks))
        start = None


def _alike(a: Node, b: Node, period: int, made: dict, initializer_ids: dict[str, int]):
    """None unless `b` is a copy of `a` one period later; else the (x, y, position making x) of each input
    pair read one period apart or a graph input each (x of `a`, y of `b`)."""
    if a.signature is None or a.signature != b.signature or a.op_type != b.op_type:
        return None
    shifted = []
    for x, y in zip(a.inputs, b.inputs, strict=True):  # one signature: the same inputs present
        if x == y:
            continue  # the same tensor (or both absent)
        px, py = made.get(x), made.get(y)
        if px is not None and py is not None:
            if py != (px[0] + period, px[1]):
                return None
            shifted.append((x, y, px[0]))
        elif px is not None or py is not None:
            return None
        elif x in initializer_ids or y in initializer_ids:
            if initializer_ids.get(x) != initializer_ids.get(y):
                return None  # two weights alike (shape, type and any small value), or not alike
        else:
            shifted.append((x, y, BEFORE_ANY_NODE))  # two graph inputs (a layer's KV cache): checked per binding
    return shifted
