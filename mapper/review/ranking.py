"""The best-fix rule of step 4: which proposed fix a review takes when the user names none (`--fix`).

RANKING is an ordered table: candidates are compared key by key, the first key that tells two apart
decides, and each key carries the reason a person reads on the page and in review.json ("chosen because").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapper.core.classes import CandidateKind
from mapper.core.units import format_bytes, format_duration
from mapper.review.candidates import CAPACITY, LATENCY_TARGET, Candidate

# A bottleneck counts as addressed from a 2 % gain on the primary KPI: `mapper compare`'s default threshold
# (explore/compare_inputs.py METRICS: above the run-to-run noise the profiles' jitter puts on a p99).
MIN_FIX_GAIN = 0.02


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    reason: str


RANKING = (
    Key(
        "can be adopted",
        "a candidate that does not fit, or does not change the failing check, is listed as rejected with its"
        " reason and never chosen",
    ),
    Key(
        "a plan change",
        "the validation matrix compares two plans on the same slices, so a slice change (a larger batch) or a"
        " serving change (speculative decoding, disaggregated prefill and decode) is offered for the serving owner to"
        " decide, never taken by default",
    ),
    Key(
        "fixes the failing check",
        "a capacity failure is fixed only by a plan that fits, a missed p99 target only by one that meets it,"
        f" a dominant bottleneck by at least {MIN_FIX_GAIN:.0%} on the primary KPI",
    ),
    Key(
        "needs no quality evidence",
        "TP/PP, CUDA graphs and fusion change no numerics and ship without an accuracy study; precision and"
        " sparsity need quality evidence and a fallback (no precision win without them), so they come"
        " second unless you ask for one with --fix",
    ),
    Key("largest expected gain", "the largest gain on the primary KPI among what is left"),
    Key("table order", "ties keep the order the failing class's row of the candidate table lists them"),
)


def fixes(c: Candidate, check: str) -> bool:
    """Whether the candidate clears the first failing check (see RANKING's second key): a capacity failure by
    fitting, a missed latency target by meeting every target at the assessment's load, a bottleneck by at least
    MIN_FIX_GAIN on the primary KPI while fitting."""
    if check == CAPACITY:
        return c.fits
    if check == LATENCY_TARGET:
        return c.fits and bool(c.target_checks) and all(t.met for t in c.target_checks)
    return c.fits and c.gain >= MIN_FIX_GAIN


def rejection(c: Candidate, check: str) -> str:
    """Why a candidate cannot be chosen, in people's words ("" where it can)."""
    if not c.fits:
        return f"does not fit: needs {format_bytes(c.per_device_bytes)} of {format_bytes(c.capacity_bytes)} per device"
    if fixes(c, check):
        return ""
    if check == LATENCY_TARGET:
        missed = [t for t in c.target_checks if not t.met]
        if not c.target_checks:
            return "not served at the assessment's load"
        return "still misses the target: " + ", ".join(
            f"{t.label} {format_duration(t.value_s)} against {format_duration(t.target_s)}" for t in missed
        )
    return f"does not change the failing check: {c.gain_text()} (a fix needs {MIN_FIX_GAIN:.0%})"


def judge(candidates, check: str) -> tuple[Candidate, ...]:
    """Each candidate with whether it fixes the failing check and, if it cannot be chosen, why."""
    return tuple(replace(c, fixes=fixes(c, check), rejected=rejection(c, check)) for c in candidates)


def rank_key(c: Candidate) -> tuple:
    """RANKING's keys as one sort key (Python's sort is stable: equal keys keep the table order); a rejected
    candidate sorts after every one that can be chosen."""
    return (bool(c.rejected), c.kind != CandidateKind.PLAN, not c.fixes, bool(c.evidence), -round(c.gain, 6))


def rank(candidates, check: str) -> tuple[Candidate, ...]:
    return tuple(sorted(judge(candidates, check), key=rank_key))


def best(ranked: tuple[Candidate, ...]) -> Candidate | None:
    """The first ranked plan change that fixes the failing check; None where none does."""
    first = ranked[0] if ranked else None
    return first if first is not None and first.kind == CandidateKind.PLAN and not first.rejected else None


def none_fixes(ranked: tuple[Candidate, ...], check: str) -> str:
    """The Review's sentence where no candidate fixes the failing check."""
    if not ranked:
        return f"no candidate in the table applies to the failing check ({check}) on this slice"
    return f"no candidate fixes the failing check ({check}): " + "; ".join(
        f"{c.label} {c.rejected or f'is a {c.kind} change, offered only'}" for c in ranked
    )


def chosen_because(ranked: tuple[Candidate, ...], check: str) -> str:
    """Why the first candidate wins: the keys it holds, and the key that set it above the runner-up."""
    chosen = best(ranked)
    if chosen is None:
        return none_fixes(ranked, check)
    held = ["it is a plan change", f"it fixes the failing check ({_how(chosen, check)})"]
    if not chosen.evidence:
        held.append("it needs no quality evidence")
    held.append(f"it is {chosen.gain_text()}")
    decided = ""
    runner = next((c for c in ranked[1:] if not c.rejected), None)
    if runner is not None:
        a, b = rank_key(chosen), rank_key(runner)
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(RANKING) - 1)
        decided = f'; over {runner.label} ({runner.gain_text()}) by "{RANKING[at].name}": {RANKING[at].reason}'
    return "chosen because " + ", ".join(held) + decided


def _how(c: Candidate, check: str) -> str:
    if check == CAPACITY:
        return "capacity: it fits"
    if check == LATENCY_TARGET:
        return "the latency target: " + ", ".join(
            f"{t.label} {format_duration(t.value_s)} within {format_duration(t.target_s)}" for t in c.target_checks
        )
    return f"{check}: at least {MIN_FIX_GAIN:.0%}"


def ranking_table() -> list[dict]:
    """The rule as rows, for the page and review.json."""
    return [{"order": i + 1, "key": k.name, "reason": k.reason} for i, k in enumerate(RANKING)]
