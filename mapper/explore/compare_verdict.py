"""The verdicts of a comparison: per slice (capacity first, then the metrics past their thresholds), the
rollback boundary (the slices that keep the baseline), and the overall verdict with what decided it."""

from __future__ import annotations

from mapper.explore.compare_inputs import Metric

VERDICTS = ("improved", "neutral", "regressed", "error")
CAPACITY = "memory fit"  # the pseudo-metric a capacity verdict names (the decision table's first check)


def capacity_verdict(fits: tuple[bool, ...]) -> tuple[dict, dict]:
    """A slice where a plan does not fit: the one that fits is kept; neither fitting is a failed slice."""
    if fits == (False, True):
        row = {"verdict": "improved", "regressed": "", "improved": CAPACITY, "error": ""}
        return row, {
            "plan_kept": "candidate",
            "reason": "the baseline does not fit the device memory; the candidate does",
        }
    if fits == (True, False):
        row = {"verdict": "regressed", "regressed": CAPACITY, "improved": "", "error": ""}
        return row, {"plan_kept": "baseline", "reason": "the candidate does not fit the device memory"}
    error = "neither plan fits the device memory"
    return {"verdict": "error", "regressed": "", "improved": "", "error": error}, {
        "plan_kept": "baseline",
        "reason": f"a plan failed: {error}",
    }


def slice_verdict(
    metrics: tuple[Metric, ...], cells: list[str], error: str, fits: tuple[bool, ...] = ()
) -> tuple[dict, dict]:
    """One slice's verdict row and its rollback-boundary row. Capacity decides first (the decision table's
    order): a plan that does not fit the device memory cannot run, whatever its other metrics say."""
    if not error and fits and not all(fits):  # `fits`: each plan's (none when a plan failed to map)
        return capacity_verdict(fits)
    slice_verdict = (
        "error"
        if "error" in cells
        else "regressed"
        if "regressed" in cells
        else "improved"
        if "improved" in cells
        else "neutral"
    )
    regressed = [m.label for m, v in zip(metrics, cells) if v == "regressed"]
    verdict = {
        "verdict": slice_verdict,
        "regressed": ",".join(regressed),
        "improved": ",".join(m.label for m, v in zip(metrics, cells) if v == "improved"),
        "error": error,
    }
    keep = "baseline" if slice_verdict in ("regressed", "error") else "candidate"
    why = {
        "regressed": f"candidate regresses {', '.join(regressed)}",
        "error": f"a plan failed: {error}",
        "improved": "candidate improves, nothing regresses",
        "neutral": "no metric moves past its threshold",
    }
    return verdict, {"plan_kept": keep, "reason": why[slice_verdict]}


def overall_verdict(verdicts: list[dict], boundary: list[dict]) -> tuple[str, str]:
    counts = {v: sum(1 for row in verdicts if row["verdict"] == v) for v in VERDICTS}
    kept = [row for row in boundary if row["plan_kept"] == "baseline"]
    where = "; ".join(f"batch {r['batch']}" + (f" seq {r['seq']}" if r["seq"] is not None else "") for r in kept)
    decided = decided_by(verdicts)
    if counts["regressed"] or counts["error"]:
        overall = "mixed" if counts["improved"] else "regressed"
    else:
        overall = "improved" if counts["improved"] else "neutral"
    text = {
        "improved": "adopt the candidate: it improves and regresses nowhere",
        "neutral": "no metric moves past its threshold on any slice: either plan will do",
        "mixed": f"adopt the candidate inside the rollback boundary; the baseline stays at {where}",
        "regressed": f"keep the baseline: the candidate regresses at {where}",
    }[overall]
    return overall, (
        f"{overall}: {text}; {decided} ({counts['improved']} improved, {counts['neutral']} neutral, "
        f"{counts['regressed']} regressed, {counts['error']} failed of {len(verdicts)} slices)"
    )


def decided_by(verdicts: list[dict]) -> str:
    """Which metrics decided the verdict: those that improved and those that regressed on some slice."""
    moved = {
        way: list(dict.fromkeys(m for row in verdicts for m in str(row.get(way) or "").split(",") if m))
        for way in ("improved", "regressed")
    }
    if not any(moved.values()):
        return "decided by: no metric past its threshold"
    parts = [f"{way} {', '.join(names)}" for way, names in moved.items() if names]
    return "decided by: " + "; ".join(parts)
