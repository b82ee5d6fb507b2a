"""The timeline a mapping gives, as columns: its kernels and their estimates, each record written when read.

A repeated layer's kernels are its twin's under their own names and nodes (`Kernels`: the built kernel each
shares, and each one's name and nodes), and its estimates are the kernels beside their assessments and starts
(`KernelEstimates`). The stages after the kernel builder read the figures of every kernel from the columns;
only what a reader asks for is written (`core.records.WrittenWhenRead`): the whole timeline for a document,
none of it for a sweep's row.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from mapper.core.records import WrittenWhenRead
from mapper.core.result import Kernel, KernelAssessment, KernelEstimate

if TYPE_CHECKING:
    from mapper.core.caches import ModelCaches


class NodesKey:
    """A timeline's nodes (every position's, in order) as a dict key whose hash is computed once: a tuple's is not
    kept, and a 2,000-kernel decoder step's nodes are looked up by several stages' memos a mapping. A timeline made
    by putting kernels of no nodes between another's positions is keyed by that one's key and the positions
    (`inserted`), which fix its nodes as well, without hashing them again."""

    __slots__ = ("_hash", "parts")

    def __init__(self, parts: tuple):
        self.parts = parts
        self._hash = hash(parts)

    @classmethod
    def of(cls, nodes: Sequence[tuple[str, ...]]) -> NodesKey:
        return cls(("nodes", tuple(nodes)))

    def with_inserted(self, at: tuple[int, ...]) -> NodesKey:
        """The key of these nodes with a position of no nodes put before each of `at` (ascending)."""
        return NodesKey(("inserted", self, at))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, NodesKey) and self._hash == other._hash and self.parts == other.parts
        )


class Kernels(WrittenWhenRead):
    """Kernels in timeline order as a table of templates and instances: `templates` (the distinct built kernels, in
    the order of their first position) and `template_at` (each position's template), with each position's name
    `names[k]` and nodes `nodes[k]`. A repeated layer's kernels are instances of one template (named for the group it
    was built for) under their own names and nodes; a stage that changes kernels by a per-position fact changes each
    template once (`remade`) and moves no position in Python. Every field but the name and the nodes reads from the
    template without writing a record; `sources` (every position's template, as a list) is made only when read."""

    __slots__ = ("_firsts", "_index", "_nodes_key", "_sources", "names", "nodes", "templates")

    def __init__(
        self,
        sources: Sequence[Kernel],
        names: Sequence[str],
        nodes: Sequence[tuple[str, ...]],
        shared: Sequence[int] | np.ndarray | None = None,
    ):
        """From every position's source; `shared[k]`, where the builder gives it, is the first position whose source
        is position k's (else each position is a template of its own)."""
        if not len(sources) == len(names) == len(nodes) == len(shared if shared is not None else sources):
            raise ValueError("Kernels needs one source, name and node list per kernel")
        if shared is None:
            firsts = index = np.arange(len(sources))
        else:
            firsts, index = np.unique(np.asarray(shared, dtype=np.int64), return_inverse=True)
        self._init(
            [sources[f] for f in firsts.tolist()], index.astype(np.int64, copy=False), names, nodes, firsts, sources
        )

    def _init(self, templates, index, names, nodes, firsts=None, sources=None) -> None:
        super().__init__(len(index))
        self.templates, self._index, self.names, self.nodes = templates, index, names, nodes
        self._firsts: np.ndarray | None = firsts
        self._sources: Sequence[Kernel] | None = sources
        self._nodes_key: NodesKey | None = None

    @classmethod
    def of_templates(
        cls, templates: list[Kernel], index: np.ndarray, names: Sequence[str], nodes: Sequence[tuple[str, ...]]
    ) -> Kernels:
        """These templates at these positions (`index`: each position's template; every template used, the templates
        in the order of their first position)."""
        out = cls.__new__(cls)
        out._init(templates, index, names, nodes)
        return out

    @property
    def template_at(self) -> np.ndarray:
        """Each position's template (an index into `templates`)."""
        return self._index

    @property
    def sources(self) -> Sequence[Kernel]:
        """Every position's template, as a list (made on first read: the stages read `templates` and `template_at`)."""
        if self._sources is None:
            self._sources = spread(self.templates, self._index)
        return self._sources

    def source(self, k: int) -> Kernel:
        """Position k's template."""
        return self.templates[int(self._index[k])]

    @property
    def nodes_key(self) -> NodesKey:
        """Every position's nodes as a key of the model's caches (what a fusion plan fixes: the stages' structural
        memos), made once and handed on to the kernels a stage changes without moving a position."""
        if self._nodes_key is None:
            self._nodes_key = NodesKey.of(self.nodes)
        return self._nodes_key

    def _same_positions(self, templates: list[Kernel], index: np.ndarray, firsts: np.ndarray) -> Kernels:
        """New templates at these positions: the names, nodes and their key handed on."""
        out = Kernels.of_templates(templates, index, self.names, self.nodes)
        out._nodes_key, out._firsts = self._nodes_key, firsts
        return out

    def changed(self, changes: Iterable[tuple[int, Hashable, Callable[..., Kernel], tuple]]) -> Kernels:
        """These kernels with some positions' sources changed and none inserted: each change `(position, key, change,
        args)` gives `change(*args)` once per key and source (`remade_at`: a key that names no source, a
        collective's kind and bytes, is one call for each source it replaces); every other position keeps its
        source, name and nodes. For a stage changing a few positions it finds one by one (the logits, a grouped
        expert's reduce)."""
        codes = np.full(len(self), -1, dtype=np.int64)
        index: dict[Hashable, int] = {}
        calls: list[tuple[Callable[..., Kernel], tuple]] = []
        for j, key, change, args in changes:
            code = index.get(key)
            if code is None:  # a key's first change
                code = index[key] = len(calls)
                calls.append((change, args))
            codes[j] = code
        return self.remade(codes, lambda _, code: calls[code][0](*calls[code][1]))

    def remade_at(self, values: Iterable[tuple[int, Hashable]], change: Callable[[Kernel, Any], Kernel]) -> Kernels:
        """`remade` for the positions given, each with the value its change reads (every other position kept):
        equal values are one code, so `change(source, value)` runs once per source and value."""
        index: dict[Hashable, int] = {}
        positions, codes_at = [], []
        for j, value in values:
            positions.append(j)
            codes_at.append(index.setdefault(value, len(index)))
        codes = np.full(len(self), -1, dtype=np.int64)
        codes[positions] = codes_at  # one numpy store, not one a position
        distinct = list(index)
        return self.remade(codes, lambda k, code: change(k, distinct[code]))

    def first_positions(self) -> np.ndarray:
        """Each template's first position (ascending: the templates are in that order)."""
        if self._firsts is None:
            self._firsts = unique_small(self._index)[1]
        return self._firsts

    def shared_positions(self) -> np.ndarray:
        """Each position's template's first position: the first position whose source is this one's."""
        return self.first_positions()[self._index]

    def column(self, field: str) -> np.ndarray:
        """A float field of every position's source, read once per template and spread to its positions (a repeated
        layer's figures cost no attribute read)."""
        return record_column(self.templates, field)[self._index]

    def source_codes(self, code_of: Callable[[Kernel], int]) -> np.ndarray:
        """`code_of(source)` for each position (-1: kept), called once per template (in timeline order) and spread to
        its positions: `remade`'s codes for a change reading only the source."""
        return np.asarray([code_of(k) for k in self.templates], dtype=np.int64).reshape(-1)[self._index]

    def remade(self, codes: np.ndarray, change: Callable[[Kernel, int], Kernel]) -> Kernels:
        """These kernels with each position's source `change(source, code)` for its `codes` entry (-1: kept), made
        once per template and code, not once a position: a stage that changes a source by a per-position fact it can
        give as a small integer (a role, an index into a stage's own figures) calls `change` once per layer template
        (in the order of the templates, then the codes), and the positions are grouped in numpy. Each (template,
        code) is a template of the result; names and nodes stay."""
        codes = np.asarray(codes, dtype=np.int64)
        if not len(codes) or int(codes.max()) < 0:
            return self
        width = int(codes.max()) + 2
        groups, firsts, inverse = unique_small(self._index * width + codes + 1)
        templates = self.templates
        made = [
            templates[g // width] if g % width == 0 else change(templates[g // width], g % width - 1)
            for g in groups.tolist()
        ]
        return self._same_positions(*_in_first_order(made, firsts, inverse))

    def inserted(self, inserts: Sequence[tuple[int, Hashable, str, Callable[[], Kernel]]]) -> Kernels:
        """These kernels with a kernel of no nodes put before each position `at` (the length: at the end) of
        `inserts`, each `(at, key, name, make)` in the order they go in (`at` ascending): `make()` at the first of a
        key, one template for every insert of that key (a collective after each layer's GEMM, of one message size)."""
        if not inserts:
            return self
        templates = list(self.templates)
        names: list[str] = []
        nodes: list[tuple[str, ...]] = []
        made: dict[Hashable, int] = {}
        ats, added = [], []
        start = 0
        for at, key, name, make in inserts:
            if at < start:
                raise ValueError("Kernels.inserted needs its inserts in position order")
            names += self.names[start:at]
            nodes += self.nodes[start:at]
            found = made.get(key)
            if found is None:
                found = made[key] = len(templates)
                templates.append(make())
            ats.append(at)
            added.append(found)
            names.append(name)
            nodes.append(())
            start = at
        names += self.names[start:]
        nodes += self.nodes[start:]
        index = np.insert(self._index, ats, added)
        ordered, at_index, firsts = _in_first_order(templates, unique_small(index)[1], index)
        out = Kernels.of_templates(ordered, at_index, names, nodes)
        out._firsts = firsts
        if self._nodes_key is not None:  # the nodes are these, with () at the inserts: keyed by both
            out._nodes_key = self._nodes_key.with_inserted(tuple(ats))
        return out

    @classmethod
    def _columns(cls, kernels: tuple[Kernel, ...]) -> tuple:
        """Kernels already named (those a later stage rewrote, a list built by hand): each its own source."""
        return kernels, [k.name for k in kernels], [k.nodes for k in kernels]

    def _write(self, k: int) -> Kernel:
        source, name, nodes = self.source(k), self.names[k], self.nodes[k]
        return source if source.name == name and source.nodes == nodes else source.replaced(name=name, nodes=nodes)


def spread(records: Sequence, index: np.ndarray) -> list:
    """`[records[i] for i in index]`, as one numpy take (a timeline's templates, or their assessments, at each
    position)."""
    held = np.empty(len(records), dtype=object)
    for i, r in enumerate(records):  # one by one: numpy would unpack a record it could iterate
        held[i] = r
    return held[index].tolist()


def unique_small(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`np.unique(keys, return_index=True, return_inverse=True)` for non-negative integer keys: below 2^16 by a
    stable 16-bit sort (numpy's radix sort: linear, where `np.unique`'s is a comparison sort), the same arrays."""
    if not len(keys) or int(keys.max()) >= 1 << 16:
        return np.unique(keys, return_index=True, return_inverse=True)
    order = keys.astype(np.uint16).argsort(kind="stable")
    ordered = keys[order]
    starts = np.empty(len(keys), dtype=bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    at = np.flatnonzero(starts)
    inverse = np.empty(len(keys), dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return ordered[at], order[at], inverse


def _in_first_order(
    templates: list[Kernel], firsts: np.ndarray, index: np.ndarray
) -> tuple[list[Kernel], np.ndarray, np.ndarray]:
    """Templates (each used; `firsts`: each one's first position) reordered by their first position, each position's
    index into the reordered list, and the first positions in that order."""
    order = np.argsort(firsts, kind="stable")
    if (order[1:] > order[:-1]).all():
        return templates, index, firsts
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return [templates[t] for t in order.tolist()], rank[index], firsts[order]


class KernelEstimates(WrittenWhenRead):
    """The timeline of a mapping, as three columns: each kernel (as the cost stage chose its engine), its
    assessment (a repeated layer's kernels share one) and its start; the `KernelEstimate` of a position is
    written when first read (`core.records.WrittenWhenRead`). The placement, the roll-up and a sweep's row
    read the columns, so a sweep's slice writes no estimate. Where the cost stage gives each kernel template's
    assessment (`by_template`, aligned with `kernels.templates`), a figure's column is read once a template."""

    __slots__ = ("assessments", "by_template", "kernels", "starts")

    def __init__(
        self,
        kernels: Sequence[Kernel],
        assessments: Sequence[KernelAssessment],
        starts: Sequence[float],
        by_template: Sequence[KernelAssessment] | None = None,
    ):
        if not len(kernels) == len(assessments) == len(starts):
            raise ValueError("KernelEstimates needs one kernel, assessment and start per position")
        super().__init__(len(kernels))
        self.kernels, self.assessments, self.starts = Kernels.of(kernels), assessments, starts
        if by_template is not None and len(by_template) != len(self.kernels.templates):
            raise ValueError("KernelEstimates needs one assessment per kernel template")
        self.by_template = by_template

    def column(self, field: str) -> np.ndarray:
        """A float field of every position's assessment (read once a template where the templates' are given)."""
        if self.by_template is None:
            return record_column(self.assessments, field)
        return record_column(self.by_template, field)[self.kernels.template_at]

    @classmethod
    def _columns(cls, estimates: tuple[KernelEstimate, ...]) -> tuple:
        """Estimates already written (a pipeline's re-laid timeline, a document read back)."""
        return [e.kernel for e in estimates], [e.assessment for e in estimates], [e.start_s for e in estimates]

    def _write(self, k: int) -> KernelEstimate:
        return KernelEstimate(self.kernels.read_once(k), self.assessments[k], self.starts[k])


def positions_holding(
    kernels: Kernels, wanted: Collection[str], caches: ModelCaches | None
) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """(position, its nodes among `wanted`, in order) of each position holding some: a stage that changes only the
    kernels of some nodes (the experts' GEMMs, the KV-cache updates) finds them once a fusion plan, through the
    model's cache (`ModelCaches.node_positions`), not by testing every position of every binding."""

    def find() -> tuple[tuple[int, tuple[str, ...]], ...]:
        return tuple(
            (j, tuple(n for n in nodes if n in wanted))
            for j, nodes in enumerate(kernels.nodes)
            if not wanted_set.isdisjoint(nodes)
        )

    wanted_set = frozenset(wanted)
    if caches is None:
        return find()
    return caches.node_positions(kernels.nodes_key, wanted_set, find)


def timeline_starts(times: Sequence[float]) -> tuple[list[float], float]:
    """Each kernel's start on one stream and the stream's end: the running sum of `times` in timeline order (a
    cumsum adds one after another, as a start kept kernel by kernel; an overflow is inf, as Python's sum gives it)."""
    if not len(times):
        return [], 0.0
    with np.errstate(all="ignore"):
        sums = np.cumsum(np.asarray(times, dtype=np.float64))
    return [0.0, *sums[:-1].tolist()], float(sums[-1])


def in_order_sum(values: np.ndarray) -> float:
    """`sum(values)` as Python adds them, one after another in timeline order (numpy's sum adds pairwise, which
    rounds otherwise): the same totals as a loop over the kernels, at numpy's speed (an overflow is inf)."""
    with np.errstate(all="ignore"):
        return float(np.cumsum(values)[-1]) if len(values) else 0.0


def record_column(records: Sequence, field: str) -> np.ndarray:
    """One float field of every record, in order (a timeline's assessments, its kernels)."""
    return np.fromiter(map(attrgetter(field), records), dtype=np.float64, count=len(records))
