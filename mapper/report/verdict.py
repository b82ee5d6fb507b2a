"""The first mechanism failure: an ordered table of checks over the mapping document (first failure wins).

A review decides in this order: does the model fit the device (capacity), does it meet the latency
target at the offered load, and only then which bottleneck class holds the time. A number shown before
the failure that invalidates it misleads the meeting (a p99 for a model that does not fit), so the
Overview, the CLI line and the sheet's Summary all lead with the assessment's first failure, which the
assessment computes once with `first_failure(doc, targets)` and writes into the document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.classes import CLASSES, Bottleneck, Owner, fix_of
from mapper.core.targets import Targets, is_continuous
from mapper.core.units import format_bytes, format_duration, format_number, overload_sentence


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's verdict: which check, the sentence a person reads, who acts, and whether the KPIs are
    unreachable as mapped (a model that does not fit has no latency on this device)."""

    check: str
    sentence: str
    owner: str
    kpis_unreachable: bool = False


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    failure: Callable[[dict, Targets], Finding | None]  # (document, latency targets) -> Finding if it fails


def _capacity(doc: dict, _targets: Targets) -> Finding | None:
    memory = doc.get("memory") or {}
    if not memory or memory.get("fits", True):
        return None
    smallest = memory.get("smallest_fit")
    hint = (
        f"; smallest fit TP {smallest['tp']}" + (f" x PP {smallest['pp']}" if smallest["pp"] > 1 else "")
        if smallest
        else "; no TP x PP within the interconnect fits"
    )
    return Finding(
        "capacity",
        f"does not fit: short by {format_bytes(memory['shortfall_bytes'])}{hint} (needs"
        f" {format_bytes(memory['per_device_bytes'])} of {format_bytes(memory['capacity_bytes'])} per device)."
        " Every figure below assumes memory this device does not have.",
        Owner.RUNTIME,
        kpis_unreachable=True,
    )


def _latency_target(doc: dict, targets: Targets) -> Finding | None:
    """The Serving section's figures at the assessment's load against every target asked (overload first)."""
    serving = doc.get("serving") or {}
    if not serving.get("requests"):
        return None
    offered = serving.get("offered_rate_per_s", 0.0)
    capacity = serving.get("capacity_per_s") or _capacity_per_s(doc)
    overload = overload_sentence(offered, capacity)
    if overload:
        return Finding(
            "latency target", f"is overloaded: {overload}, so no percentile is meaningful at this load.", Owner.RUNTIME
        )
    missed = [c for c in targets.checks(serving) if not c.met]
    if not missed:
        return None
    what = ", ".join(f"{c.label} {format_duration(c.value_s)} against {format_duration(c.target_s)}" for c in missed)
    return Finding(
        "latency target",
        f"misses the latency target: {what} at {format_number(offered)} req/s ({_batching(serving)}).",
        Owner.RUNTIME,
    )


def _batching(serving: dict) -> str:
    if is_continuous(serving):
        return f"continuous batching of up to {serving.get('max_batch', 1)} sequences"
    return f"{serving.get('policy', '')} batching up to {serving.get('max_batch', 1)}"


def _capacity_per_s(doc: dict) -> float:
    totals = doc.get("totals") or {}
    latency = totals.get("latency_s") or 0.0
    return totals.get("batch", 1) / latency if latency else 0.0


def _dominant(doc: dict, _targets: Targets) -> Finding | None:
    times: dict[str, float] = {}
    for k in doc.get("kernels", ()):
        times[k["bottleneck"]] = times.get(k["bottleneck"], 0.0) + k["time_s"]
    if not times:
        return Finding("dominant bottleneck", "no kernels were planned, so nothing limits this model.", Owner.FRAMEWORK)
    cls, time_s = max(times.items(), key=lambda kv: kv[1])
    latency = (doc.get("totals") or {}).get("latency_s") or 1.0
    count = sum(1 for k in doc["kernels"] if k["bottleneck"] == cls)
    owner = CLASSES[Bottleneck(cls)].owner
    fix = fix_of(cls)
    return Finding(
        "dominant bottleneck",
        f"is mostly {cls}: {time_s / latency:.0%} of its time is in {count} kernel{'s' if count != 1 else ''} of"
        f" that class. The {owner} should act first{f' ({fix})' if fix else ''}.",
        owner,
    )


# Ordered: the first check that fails is the first mechanism failure; the last always answers.
DECISION_TABLE: tuple[Check, ...] = (
    Check("capacity", _capacity),
    Check("latency target", _latency_target),
    Check("dominant bottleneck", _dominant),
)


def first_failure(doc: dict, targets: Targets | None = None) -> Finding:
    """The first check of DECISION_TABLE that fails for the mapping document (the bottleneck if none). The
    assessment (mapper.review.assessment) runs it once per slice; views read its answer from the document."""
    for check in DECISION_TABLE:
        finding = check.failure(doc, targets or Targets())
        if finding is not None:
            return finding
    raise AssertionError("the dominant-bottleneck check always answers")  # pragma: no cover


def assessed_failure(doc: dict) -> Finding:
    """The document's first failure as its assessment found it (a document without one, from a bare
    map_workload: the decision table on the document alone, with no latency target)."""
    found = (doc.get("assessment") or {}).get("first_failure")
    return Finding(**found) if found else first_failure(doc)


def verdict_sentence(doc: dict) -> str:
    """'<model> on <hardware> <first failure>': the line the Overview, the CLI and the sheet lead with."""
    return f"{doc['model']['name']} on {doc['hardware']['name']} {assessed_failure(doc).sentence}"
