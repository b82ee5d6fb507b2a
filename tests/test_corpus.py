"""The acceptance corpus (tests/corpus.py): each slice's mapping document equals the one recorded before the
engine moved to tables, compared as parsed JSON. A change a fix makes is recorded by scripts/corpus_snapshot.py
and named in docs/architecture.md with its cause."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.corpus import CASES, SNAPSHOTS, document


def _differences(expected, actual, path: str = "") -> list[str]:
    """Where two parsed documents differ (the first few, by path)."""
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
    """The comparison finds a figure changed in its last digit (the test can fail)."""
    case = CASES[0]
    expected = json.loads(gzip.decompress((SNAPSHOTS / f"{case.name}.json.gz").read_bytes()))
    changed = document(case)
    changed["totals"]["latency_s"] *= 1 + 1e-15
    changed["kernels"][0]["name"] += "x"
    assert sorted(d.split(":")[0] for d in _differences(expected, changed)) == [".kernels[0].name", ".totals.latency_s"]
