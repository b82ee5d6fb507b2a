"""Which groups of a plan make one kernel (`plan.kernel_keys`): the classes found as columns are the groups whose
keys (shape, members' codes, routing figures, routed weights' shares) are equal, and a shared mixing sum never
merges unequal rows."""

from __future__ import annotations

import numpy as np
import pytest

import mapper
from mapper.plan import kernel_keys
from mapper.plan.boundary import GroupPlaces
from mapper.plan.fusion import FusionPlan, plan_fusion
from mapper.plan.kernel_keys import PlanTable, first_equal_rows, kernel_classes
from mapper.plan.kernels import _member_codes, _routing


def _reference(rows: np.ndarray) -> list[int]:
    first: dict[tuple, int] = {}
    return [first.setdefault(tuple(r), i) for i, r in enumerate(rows.tolist())]


def test_first_equal_rows_is_the_first_row_of_equal_values():
    rng = np.random.default_rng(3)
    for shape in ((1, 1), (50, 3), (2000, 12), (7, 0)):
        rows = rng.integers(-2, 4, size=shape)
        assert first_equal_rows(rows).tolist() == _reference(rows)


def test_unequal_rows_sharing_a_mixing_sum_stay_apart(monkeypatch):
    """With every multiplier 0 each row mixes to one sum: the check finds the unequal rows and groups the whole rows."""
    monkeypatch.setattr(kernel_keys, "_MIX", np.zeros(4096, dtype=np.int64))
    rows = np.random.default_rng(5).integers(0, 3, size=(300, 4))
    assert first_equal_rows(rows).tolist() == _reference(rows)


@pytest.mark.parametrize(
    ("model", "dims"),
    [
        ("mixtral-8x7b", {"batch": 4, "seq": 1, "past": 64}),  # per-expert GEMMs: routing figures
        ("gpt2-small", {"batch": 2, "seq": 16, "past": 0}),  # dense
    ],
)
def test_classes_are_the_groups_of_equal_keys(model, dims):
    workload = mapper.open_model(model).bind(dims)
    graph, caches = workload.graph, workload.caches
    groups = FusionPlan(plan_fusion(graph, workload.nodes, workload.plan_key, "default", False, caches))
    places = GroupPlaces(graph, groups)
    codes = _member_codes(workload)
    assert codes is not None
    experts, shares = workload.expert_gemms, workload.weight_shares
    classes = kernel_classes(PlanTable.of(places), codes, places.index_of, experts, shares).tolist()
    keys = []
    for group, place in zip(groups, places.of_plan, strict=True):
        members = tuple(codes[p] for p in place[3])
        keys.append(None if min(members) < 0 else (place[2], members, _routing(group, place, experts, shares)))
    first: dict[tuple, int] = {}
    expected = [-1 if key is None else first.setdefault(key, i) for i, key in enumerate(keys)]
    assert classes == expected
    assert len(set(classes)) < len(classes) / 5  # repeated layers: a few kernels built for many groups
