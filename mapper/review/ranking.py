"""The best-fix rule of step 4: which proposed fix a review takes when the user names none (`--fix`).

RANKING is an ordered table: candidates are compared key by key, the first key that tells two apart
decides, and each key carries the reason a person reads on the page and in review.json ("chosen because").
"""

from __future__ import annotations

from dataclasses import dataclass

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
        "a plan change",
        "the validation matrix compares two plans on the same slices, so a slice change (a larger batch) is"
        " offered for the serving owner to decide, never taken by default",
    ),
    Key(
        "fixes the failing check",
        "a capacity failure is fixed only by a plan that fits, a missed p99 target only by one that meets it,"
        f" a dominant bottleneck by at least {MIN_FIX_GAIN:.0%} on the primary KPI",
    ),
    Key(
        "needs no quality evidence",
        "TP/PP, CUDA graphs and fusion change no numerics and ship without an accuracy study; precision and"
        " sparsity need quality evidence and a fallback (seed: no precision win without them), so they come"
        " second unless you ask for one with --fix",
    ),
    Key("largest expected gain", "the largest gain on the primary KPI among what is left"),
    Key("table order", "ties keep the order the failing class's row of the candidate table lists them"),
)


def fixes(c: Candidate, check: str, p99_target_s: float | None) -> bool:
    """Whether the candidate clears the first failing check (see RANKING's second key)."""
    if check == CAPACITY:
        return c.fits
    if check == LATENCY_TARGET and p99_target_s is not None:
        return c.p99_s is not None and c.p99_s <= p99_target_s
    return c.gain >= MIN_FIX_GAIN


def rank_key(c: Candidate, check: str, p99_target_s: float | None) -> tuple:
    """RANKING's keys as one sort key (Python's sort is stable: equal keys keep the table order)."""
    return (c.kind != "plan", not fixes(c, check, p99_target_s), bool(c.evidence), -round(c.gain, 6))


def rank(candidates, check: str, p99_target_s: float | None) -> tuple[Candidate, ...]:
    return tuple(sorted(candidates, key=lambda c: rank_key(c, check, p99_target_s)))


def chosen_because(ranked: tuple[Candidate, ...], check: str, p99_target_s: float | None) -> str:
    """Why the first candidate wins: the keys it holds, and the key that set it above the runner-up."""
    if not ranked:
        return ""
    best = ranked[0]
    held = ["it is a plan change"] if best.kind == "plan" else []
    if fixes(best, check, p99_target_s):
        held.append(f"it fixes the failing check ({_how(best, check)})")
    if not best.evidence:
        held.append("it needs no quality evidence")
    held.append(f"it is {best.gain_text()}")
    decided = ""
    if len(ranked) > 1:
        a, b = rank_key(best, check, p99_target_s), rank_key(ranked[1], check, p99_target_s)
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(RANKING) - 1)
        decided = f'; over {ranked[1].label} ({ranked[1].gain_text()}) by "{RANKING[at].name}": {RANKING[at].reason}'
    return "chosen because " + ", ".join(held) + decided


def _how(c: Candidate, check: str) -> str:
    if check == CAPACITY:
        return "capacity: it fits"
    if check == LATENCY_TARGET:
        return "the p99 target: it meets it"
    return f"{check}: at least {MIN_FIX_GAIN:.0%}"


def ranking_table() -> list[dict]:
    """The rule as rows, for the page and review.json."""
    return [{"order": i + 1, "key": k.name, "reason": k.reason} for i, k in enumerate(RANKING)]
