"""Which groups of a fusion plan make equal kernels at a binding, found as columns.

A kernel is its group's boundary traffic and its members' work at the binding's sizes (`kernels.build_kernel`).
Groups of one shape (their rule and boundary layout, `boundary.GroupPlaces`) whose members are of the same work
kinds and layer types (`kernels.member_codes`) make kernels equal but for their names; a mixture of experts' groups
also need their expert members' routing figures and the shares of the routed weights they read to be equal. The
plan's groups, members and reads are laid out as integer columns once a plan (`PlanTable`, kept in the model's
cache); a binding reads its codes into them and one `np.unique` over the rows finds the groups whose kernel is built
once, where a loop over ~2,000 groups built a key a group.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mapper.plan.boundary import GroupPlaces
from mapper.work.moe import ExpertGemm

PAST_END = -2  # a member or read column past a group's last: unequal to every code, and no unknown member (-1)


@dataclass(frozen=True, slots=True)
class PlanTable:
    """A fusion plan's groups as columns: each group's shape id, its members' live positions and the tensors it
    reads (ids into `tensors`), rows padded with -1 (the same at every binding of the plan's structure)."""

    shapes: np.ndarray  # (groups,)
    members: np.ndarray  # (groups, most members)
    reads: np.ndarray  # (groups, most reads)
    tensors: dict[str, int]  # each read tensor's id

    @classmethod
    def of(cls, places: GroupPlaces) -> PlanTable:
        plan = places.of_plan
        tensors: dict[str, int] = {}
        reads = [[tensors.setdefault(t, len(tensors)) for t, _ in boundary.reads] for boundary, *_ in plan]
        return cls(
            np.asarray([shape for _, _, shape, _ in plan], dtype=np.int64),
            _padded([positions for *_, positions in plan]),
            _padded(reads),
            tensors,
        )


def _padded(rows: Sequence[Sequence[int]]) -> np.ndarray:
    """The rows as one int64 matrix, each padded with -1 to the longest."""
    out = np.full((len(rows), max((len(r) for r in rows), default=0)), -1, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _coded(column: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """`codes` read at each index of `column` (-1: past the row's end, PAST_END)."""
    return np.append(codes, PAST_END)[column]  # index -1 reads the appended PAST_END


def kernel_classes(
    table: PlanTable,
    member_codes: Sequence[int],
    index_of: Mapping[str, int],
    experts: Mapping[str, ExpertGemm],
    weight_shares: Mapping[str, float],
) -> np.ndarray:
    """Each plan group's class at this binding: groups of one class make equal kernels (-1: a kernel of its own, a
    member with no code). The row of a group is its shape, its members' codes, and for a mixture of experts its
    members' routing figures (0: not an expert node), whether it reads a routed weight, and each read's share."""
    codes = np.asarray(member_codes, dtype=np.int64)
    columns = [table.shapes[:, None], _coded(table.members, codes)]
    if experts or weight_shares:
        figures = np.zeros(len(codes), dtype=np.int64)
        kinds: dict[Hashable, int] = {}
        for name, g in experts.items():
            at = index_of.get(name)
            if at is not None:
                figures[at] = kinds.setdefault(g.figures, len(kinds) + 1)
        shares = np.zeros(len(table.tensors), dtype=np.int64)  # every read's share: 1.0 (code 0) unless routed
        routed = np.zeros(len(table.tensors), dtype=bool)
        values: dict[float, int] = {1.0: 0}
        for t, share in weight_shares.items():
            i = table.tensors.get(t)
            if i is not None:
                shares[i], routed[i] = values.setdefault(share, len(values)), True
        reads = _coded(table.reads, shares)
        reads_routed = (np.append(routed, False)[table.reads]).any(axis=1)
        columns += [_coded(table.members, figures), reads_routed[:, None], reads]
    own = (columns[1] == -1).any(axis=1)  # a member without a code: its kernel is its own
    return np.where(own, -1, first_equal_rows(np.hstack(columns)))


# Odd multipliers of a row's mixing sum (fixed: every run groups alike), one per column
_MIX = np.random.default_rng(20261207).integers(1, 1 << 62, size=4096, dtype=np.int64) | 1


def first_equal_rows(rows: np.ndarray) -> np.ndarray:
    """For each row, the index of the first row equal to it. Rows are grouped by a mixing sum of their columns (one
    int64 a row: a 1-D unique, where `np.unique(axis=0)` sorts whole rows), and every row is then checked equal to
    its group's first; where a sum was shared by unequal rows, by the whole rows instead."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    if rows.shape[1] <= len(_MIX):
        with np.errstate(over="ignore"):
            mixed = (rows * _MIX[: rows.shape[1]]).sum(axis=1)  # wraps around: a hash, not a figure
        _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
        found = first[inverse.reshape(-1)]
        if (rows == rows[found]).all():
            return found
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)]
