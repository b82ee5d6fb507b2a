"""The unmeasured profiles against the published points they cite (bench/devices_without_tables.py): a fitted
value still gives its point back, every AMD acceptance floor is still met, and Gaudi 2's MMEs stay fed."""

from __future__ import annotations

import pytest

from bench.devices_without_tables import POINTS, predict, rows


def test_fitted_points_are_given_back_and_floors_are_met():
    table = rows(tuple(p for p in POINTS if p.hw == "mi300x"))
    fits = [r for r in table if r["role"] == "fit"]
    floors = [r for r in table if r["role"] == "floor"]
    assert [r["kind"] for r in fits] == ["stream-copy"]
    assert fits[0]["predicted"] == pytest.approx(fits[0]["published"], rel=0.005)
    assert len(floors) == 7
    assert all(r["error"] >= 0 for r in floors), [
        (r["kind"], r["software"], r["error"]) for r in floors if r["error"] < 0
    ]


def test_gaudi2_mmes_are_fed_at_their_array_rate():
    """A 256x256 array fed at a GPU's 128 B per clock ran at 1/8 (43.5 of 429.3 TFLOP/s measured)."""
    (point,) = [p for p in POINTS if p.hw == "gaudi2"]
    assert predict(point) > 0.75 * point.published
