"""Import, the structure's repeats: which nodes are copies of the node one period earlier.

A transformer's layers repeat: node i + P of layer k + 1 has node i's op and attributes, reads the
tensors node i reads one period later (its own layer's, or the layer before's output where node i reads
the one before that), the same tensors both read (an attention mask made once), or a weight of the same
shape, type and small value. Such a node has the outputs of node i at every binding where the stretch's
few boundary tensors agree: those it reads from before the stretch (the first layer's input against the
second's). The walk then copies node i's outputs instead of inferring them again (`Walk.visit_all`).

Found once per model from its nodes in execution order and its initializers (`ModelCaches.repeats`),
in time linear in the nodes: each gap up to MAX_PERIOD scored by one vectorized comparison of signatures,
then the best few read node by node where the signatures a period apart agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mapper.core.graph import Node

CANDIDATE_PERIODS = 4  # periods tried, best first
# The longest layer looked for: Llama-2's exported layer is ~74 nodes, BERT's 39; a longer one is inferred node
# by node (correct, only slower). Scoring a gap is one vectorized comparison over the nodes: linear in them.
MAX_PERIOD = 512
BEFORE_ANY_NODE = -1  # where a graph input is made, for the boundary checks
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
    # for the walk's copy of the whole stretch at once (`Walk.copy_stretch`): each position's node and its root
    # (the twin it copies in the period before `first`), and each present output beside its root's
    nodes: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    root_outputs: tuple[str, ...] = ()


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
    if made is None or len(nodes) < 2 * MIN_STRETCH:  # a tensor made twice (a damaged file), or too few nodes
        return Repeats()
    # each node's signature, a node without one (a tensor attribute) unlike every other
    sigs = np.array([-1 - k if n.signature is None else n.signature for k, n in enumerate(nodes)], dtype=np.int64)
    twin, stretch_of = np.full(len(nodes), -1, dtype=np.int64), [-1] * len(nodes)
    stretches: list[Stretch] = []
    for period in _candidate_periods(sigs):
        for start, stop, checks in _stretches(nodes, sigs, twin < 0, made, initializer_ids, period):
            copies = range(start + period, stop + period)
            twin[copies.start : copies.stop] = np.arange(start, stop)
            stretch_of[copies.start : copies.stop] = [len(stretches)] * len(copies)
            stretches.append(_stretch(nodes, period, copies, checks))
    return Repeats(tuple(stretches), tuple(twin.tolist()), tuple(stretch_of), int((twin >= 0).sum()))


def _stretch(nodes: list[Node], period: int, copies: range, checks: tuple) -> Stretch:
    """The stretch of `copies`, with the names the walk's copy of it reads (`Stretch.nodes` and the rest)."""
    roots = [nodes[copies.start - period + (pos - copies.start) % period] for pos in copies]
    own = [nodes[pos] for pos in copies]
    outputs = [
        (o, r) for n, t in zip(own, roots) for o, r in zip([o for o in n.outputs if o], [o for o in t.outputs if o])
    ]
    return Stretch(
        period,
        copies.start,
        copies.stop,
        checks,
        tuple(n.name for n in own),
        tuple(t.name for t in roots),
        tuple(o for o, _ in outputs),
        tuple(r for _, r in outputs),
    )


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


def _candidate_periods(sigs: np.ndarray) -> list[int]:
    """Periods worth a pass, best first: of the gaps 1..MAX_PERIOD, those at which the most positions hold one
    signature at both ends (a layer's length, where its ops repeat), a gap's multiples after it dropped."""
    gaps = np.arange(1, min(MAX_PERIOD, len(sigs) // 2) + 1)
    alike = np.array([np.count_nonzero(sigs[:-g] == sigs[g:]) for g in gaps])
    periods: list[int] = []
    for g in gaps[np.argsort(-alike, kind="stable")].tolist():
        if alike[g - 1] < MIN_STRETCH or len(periods) == CANDIDATE_PERIODS:
            break
        if not any(g % p == 0 for p in periods):
            periods.append(g)
    return periods


def _stretches(nodes: list[Node], sigs: np.ndarray, free: np.ndarray, made: dict, initializer_ids: dict, period: int):
    """(start, stop, checks) of each maximal run of positions i in [start, stop) whose node i + period is
    a copy of node i (`_alike`) not yet claimed (`free`), at least MIN_STRETCH long; `checks`: the pairs
    read from before `start`. Only runs of one signature a period apart are read node by node."""
    same = (sigs[:-period] == sigs[period:]) & free[period:]
    for lo, hi in _runs(same):
        start: int | None = None
        pending: list[list[tuple[str, str, int]]] = []
        for i in range(lo, hi + 1):
            pairs = _alike(nodes[i], nodes[i + period], period, made, initializer_ids) if i < hi else None
            if pairs is not None:
                if start is None:
                    start, pending = i, []
                pending.append(pairs)
                continue
            if start is not None and i - start >= MIN_STRETCH:
                checks = {(x, y) for group in pending for (x, y, px) in group if px < start}
                yield start, i, tuple(sorted(checks))
            start = None


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) of each run of True in `mask` at least MIN_STRETCH long."""
    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).astype(np.int8)))
    return [(lo, hi) for lo, hi in zip(edges[::2].tolist(), edges[1::2].tolist()) if hi - lo >= MIN_STRETCH]


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
