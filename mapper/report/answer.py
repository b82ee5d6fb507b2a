"""The assessment in people's words: the rows every view prints, read off the document's assessment section.

The Overview's verdict and tiles, the sheet's Summary, the Review's steps and the text of `map`, `serve` and
`review` all take their figures from these rows, so one slice reads the same everywhere: the first failure,
the load the percentiles are at (and whether it was given or derived), the percentiles, each target, the
chosen fix and why, and every rejected candidate with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.targets import Targets, is_continuous
from mapper.core.units import format_duration, format_number
from mapper.report.verdict import assessed_failure, verdict_sentence

# (label, Serving-section keys p50/p95/p99) by the kind of serving: a request queue's request latency, a
# decoder's per-request TTFT, TPOT and end to end (never a queue of decode steps counted as requests).
PERCENTILES = {
    "queue": (("request latency", ("p50_s", "p95_s", "p99_s")),),
    "continuous": (
        ("TTFT", ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s")),
        ("TPOT", ("tpot_p50_s", "tpot_p95_s", "tpot_p99_s")),
        ("end to end", ("latency_p50_s", "latency_p90_s", "latency_p99_s")),
    ),
}


@dataclass(frozen=True, slots=True)
class AnswerRow:
    section: str  # verdict | load | latency | target | fix | rejected
    name: str
    text: str


def percentile_rows(doc: dict) -> tuple[AnswerRow, ...]:
    """The percentiles at the assessment's load, each row "p50 a · p95 b · p99 c" (none at saturation)."""
    serving = doc.get("serving") or {}
    if not serving.get("requests"):
        return ()
    kind = "continuous" if is_continuous(serving) else "queue"
    if serving.get("overload"):  # a queue that grows without bound: no percentile describes it
        return (AnswerRow("latency", PERCENTILES[kind][0][0], f"overloaded: {serving['overload']}"),)
    rows = []
    for label, keys in PERCENTILES[kind]:
        names = [k.split("_")[-2] for k in keys]  # p50, p95 (p90 for end to end), p99
        if serving.get(keys[-1]) is not None:
            text = " · ".join(f"{n} {format_duration(serving[k])}" for n, k in zip(names, keys, strict=True))
            rows.append(AnswerRow("latency", label, text))
    return tuple(rows)


def headline(doc: dict) -> dict[str, str]:
    """The Overview's latency tiles: label -> the p99 as people read it ("—" where no percentile exists)."""
    serving = doc.get("serving") or {}
    kind = "continuous" if is_continuous(serving) else "queue"
    out = {}
    for label, keys in PERCENTILES[kind][:2]:
        value = serving.get(keys[-1]) if serving.get("requests") else None
        shown = format_duration(value) if value is not None else "—"
        out[f"{label} p99"] = "overloaded" if serving.get("overload") and value is not None else shown
    return out


def answer_rows(doc: dict) -> tuple[AnswerRow, ...]:
    """Every row of the assessment (see the module docstring), in the order a meeting reads them."""
    a = doc.get("assessment") or {}
    failure = assessed_failure(doc)
    rows = [
        AnswerRow("verdict", "verdict", verdict_sentence(doc)),
        AnswerRow("verdict", "first failure", f"{failure.check} (owner: {failure.owner})"),
    ]
    load = a.get("load")
    if load:
        rows.append(AnswerRow("load", "load", load["sentence"]))
    rows += percentile_rows(doc)
    rows += target_rows(doc)
    rows += fix_rows(a)
    return tuple(rows)


def target_rows(doc: dict) -> tuple[AnswerRow, ...]:
    question = (doc.get("assessment") or {}).get("question") or {}
    serving = doc.get("serving") or {}
    return tuple(
        AnswerRow(
            "target",
            f"{c.label} target",
            f"{format_duration(c.target_s)}: {'met' if c.met else 'missed'} ({format_duration(c.value_s)})",
        )
        for c in Targets.of(question).checks(serving)
    )


def fix_rows(a: dict) -> tuple[AnswerRow, ...]:
    chosen = a.get("chosen")
    rows = []
    if chosen:
        rows.append(
            AnswerRow(
                "fix",
                "chosen fix",
                f"{chosen['label']} ({chosen['changes']}): {chosen['gain_text']}; owner {chosen['owner']}",
            )
        )
    if a.get("chosen_reason"):
        rows.append(AnswerRow("fix", "why" if chosen else "no fix", a["chosen_reason"]))
    for c in a.get("candidates", ()):
        if c["rejected"]:
            rows.append(AnswerRow("rejected", f"rejected {c['label']}", c["rejected"]))
    return tuple(rows)


def load_text(doc: dict) -> str:
    """The load as one short phrase for a tile's note ("347 req/s, derived")."""
    load = (doc.get("assessment") or {}).get("load") or {}
    if not load:
        return ""
    return f"{format_number(load['rate_per_s'])} req/s, {'derived' if load['derived'] else 'given'}"


def precision_text(doc: dict) -> str:
    """The plan's precision and the model's released one, as every view heads a slice: "fp16, as released",
    "bf16, released fp32", "int8, the file's tensors"."""
    p = doc.get("precision") or {}
    dtype, released = p.get("dtype") or doc["totals"]["dtype"], p.get("released")
    if released is None:
        return f"{dtype}, the file's tensors"
    return f"{dtype}, as released" if released == dtype else f"{dtype}, released {released}"
