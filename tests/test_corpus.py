"""The acceptance corpus (tests/corpus.py): each slice's mapping document equals the one recorded before the
engine moved to tables, compared as parsed JSON. A change a fix makes is recorded by scripts/corpus_snapshot.py
and named in docs/architecture.md with its cause."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from tests.corpus import CASES, SNAPSHOTS, document

# Numbers agree to this relative difference: numpy's float64 power and exp differ in their last bits between CPUs
# (SVML's kernels where AVX-512 is found, numpy's own elsewhere), 1e-16 to 1e-13 apart across the corpus; a change
# of the engine moves a figure by far more
SAME_NUMBER = 1e-9


def _differences(expected, actual, path: str = "") -> list[str]:
    """Where two parsed documents differ (the first few, by path); numbers to SAME_NUMBER."""
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool):
        same = math.isclose(expected, actual, rel_tol=SAME_NUMBER, abs_tol=0.0) and type(expected) is type(actual)
        return [] if same else [f"{path}: {expected} -> {actual}"]
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{path}.{k}: missing" for k in expected.keys() - actual.keys()]
        out += [f"{path}.{k}: added" for k in actual.keys() - expected.keys()]
        for k in expected.keys() & actual.keys():
            out += _differences(expected[k], actual[k], f"{path}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _differences(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [f"{path}: {str(expected)[:80]} -> {str(actual)[:80]}"]


# the 70B-class and Mixtral documents (0.5-0.9 s each) are compared in the slow tier; the rest in both
LARGE_MODELS = ("70b", "mixtral")


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if any(m in c.name for m in LARGE_MODELS) else c for c in CASES],
    ids=[c.name for c in CASES],
)
def test_document_unchanged(case):
    expected = json.loads(gzip.decompress((SNAPSHOTS / f"{case.name}.json.gz").read_bytes()))
    found = _differences(expected, document(case))
    assert not found, f"{len(found)} differences, first: " + "; ".join(sorted(found)[:5])


def test_a_change_is_seen():
    """The comparison finds a figure changed in its seventh digit and a name changed (the test can fail), and lets
    another CPU's last bits pass."""
    case = CASES[0]
    expected = json.loads(gzip.decompress((SNAPSHOTS / f"{case.name}.json.gz").read_bytes()))
    changed = document(case)
    changed["totals"]["latency_s"] *= 1 + 1e-6
    changed["totals"]["energy_j"] *= 1 + 1e-13
    changed["kernels"][0]["name"] += "x"
    assert sorted(d.split(":")[0] for d in _differences(expected, changed)) == [".kernels[0].name", ".totals.latency_s"]
