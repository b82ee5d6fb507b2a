"""The latency targets of a serving question, one meaning each, and how a Serving section is read against them.

`--p99-target-ms` is the request latency (end to end: a decoder's request from arrival to its last token),
`--ttft-p99-ms` a decoder's time to first token, `--tpot-p99-ms` its time per output token. `map`, `serve`,
`review` and the dashboard take the same three; the assessment (mapper.review.assessment) reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TargetRow:
    field: str  # the Targets field
    label: str  # what a person reads
    queue_key: str  # the request queue's Serving-section key ("" where the queue has no such figure)
    decoder_key: str  # the decoder's Serving-section key
    flag: str  # the command-line flag (milliseconds) of `map`, `serve` and `review`


# Every target, in the order the latency check reads them.
TARGET_ROWS = (
    TargetRow("p99_s", "request latency p99", "p99_s", "latency_p99_s", "p99-target-ms"),
    TargetRow("ttft_p99_s", "TTFT p99", "", "ttft_p99_s", "ttft-p99-ms"),
    TargetRow("tpot_p99_s", "TPOT p99", "", "tpot_p99_s", "tpot-p99-ms"),
)


def is_continuous(section: dict) -> bool:
    """Whether a Serving section is a decoder's continuous batching (else a request queue)."""
    return section.get("policy") == "continuous"


@dataclass(frozen=True, slots=True)
class TargetCheck:
    label: str
    value_s: float
    target_s: float

    @property
    def met(self) -> bool:
        return self.value_s <= self.target_s

    def as_dict(self) -> dict:
        return {"label": self.label, "value_s": self.value_s, "target_s": self.target_s, "met": self.met}


@dataclass(frozen=True, slots=True)
class Targets:
    """p99 targets in seconds (None: not asked)."""

    p99_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None

    @classmethod
    def of(cls, values: dict) -> Targets:
        """The targets of a mapping that holds them under their fields (the assessment's `question`)."""
        return cls(**{row.field: values.get(row.field) for row in TARGET_ROWS})

    def given(self) -> bool:
        return any(getattr(self, row.field) is not None for row in TARGET_ROWS)

    def checks(self, section: dict) -> tuple[TargetCheck, ...]:
        """Each asked target against the section's figure (a decoder's section is continuous batching)."""
        decoder = is_continuous(section)
        out = []
        for row in TARGET_ROWS:
            target, key = getattr(self, row.field), row.decoder_key if decoder else row.queue_key
            if target is not None and key and section.get(key) is not None:
                out.append(TargetCheck(row.label, section[key], target))
        return tuple(out)

    def unanswerable(self, decoder: bool) -> tuple[str, ...]:
        """The asked targets a model of this kind has no figure for (TTFT/TPOT of a request queue)."""
        return tuple(
            row.label
            for row in TARGET_ROWS
            if getattr(self, row.field) is not None and not (row.decoder_key if decoder else row.queue_key)
        )

    def met(self, section: dict) -> bool:
        return all(c.met for c in self.checks(section))

    def as_dict(self) -> dict:
        return {row.field: getattr(self, row.field) for row in TARGET_ROWS}
