"""A Review lever beside the candidate table: speculative decoding for a memory-bound decode step.

`speculation` offers a decode step served with speculative decoding (serve/speculative.py) by a draft of the
target's family, the round mapped step by step at the slice's batch and context, where the round pays at some
acceptance rate below 1: a small batch, whose (k + 1)-token verification is still memory-bound (at a large batch
it is compute-bound and speculation stops paying). It is a serving change, owned by the runtime systems
engineer, offered and never taken by default (ranking.RANKING); its gain is computed at an acceptance rate
assumed, not measured, and its cost states the rate it takes to break even.
"""

from __future__ import annotations

from mapper.core.classes import CandidateKind
from mapper.core.units import format_duration
from mapper.handle import ModelHandle
from mapper.pipeline import map_memory
from mapper.review.candidates import Candidate, offered
from mapper.serve.speculative import DEFAULT_DRAFT_TOKENS, SpeculativeConfig, acceptance_to_break_even, expected_tokens
from mapper.serve.steps import mapped_round, open_draft

# A built-in decoder -> a built-in draft of its family (one tokenizer, as a draft must share it): the pairs the
# speculation row can map. Another model gets no row: name a draft with --speculative-draft and serve it instead.
SPECULATION_DRAFTS = {"llama2-70b": "llama2-7b"}
SPECULATION_ACCEPTANCE = 0.7  # the acceptance rate the row's gain is computed at: an assumption, never a measurement
SPECULATION_SHOWN = (0.5, 0.9)  # the acceptance rates whose TPOT the row's cost also states
SPECULATION_EVIDENCE = (
    f"needs the draft's acceptance rate measured on production prompts at this draft length (the gain assumes"
    f" {SPECULATION_ACCEPTANCE:g}; the output stays the target's: rejection sampling keeps its distribution);"
    " fallback: plain decoding, the draft switched off"
)


def speculative_of(c: Candidate) -> SpeculativeConfig | None:
    """The speculation a serving candidate (`CandidateKind.SERVING`) serves with (None for any other kind)."""
    if c.kind != CandidateKind.SERVING:
        return None
    values = dict(c.serving_changes)
    draft, rate, tokens = values["speculative_draft"], values["acceptance_rate"], values["draft_tokens"]
    if not (isinstance(draft, str) and isinstance(rate, float) and isinstance(tokens, int)):
        raise TypeError(f"a serving candidate's speculation is (draft, tokens, rate), not {values!r}")
    return SpeculativeConfig(draft, rate, tokens)


def speculation(
    model: ModelHandle, dims: dict[str, int], base: tuple, doc: dict, asked: SpeculativeConfig | None
) -> tuple[Candidate, ...]:
    """A decode step served with speculative decoding (serve/speculative.py): the draft of SPECULATION_DRAFTS
    proposing DEFAULT_DRAFT_TOKENS a round, the round mapped step by step at the slice's batch and context. Offered
    where the round pays at some acceptance rate below 1 (a memory-bound verification: a small batch), its gain at
    SPECULATION_ACCEPTANCE, its cost the acceptance rate it needs to break even. Not where the question already
    serves speculatively (`asked`) or no draft is known."""
    draft = SPECULATION_DRAFTS.get(model.source) if model.builtin else None
    batch = next((dims[n] for n, r in model.roles.items() if r == "batch" and n in dims), None)
    if asked is not None or draft is None or batch is None:
        return ()
    context = max((dims[n] for n, r in model.roles.items() if r == "past" and n in dims), default=0)
    _, hardware, options = base
    k, plain = DEFAULT_DRAFT_TOKENS, doc["totals"]["latency_s"]
    handle = open_draft(SpeculativeConfig(draft, SPECULATION_ACCEPTANCE, k))
    spec = SpeculativeConfig(handle, SPECULATION_ACCEPTANCE, k)
    rnd = mapped_round(model, spec, hardware, options, batch, context)
    needed = acceptance_to_break_even(rnd.round_s, plain, k)
    if needed is None or not plain > 0:  # the round does not pay even when every draft is accepted
        return ()
    shown = ", ".join(f"{a:g}: {format_duration(rnd.round_s / expected_tokens(a, k))}" for a in SPECULATION_SHOWN)
    cost = (
        f"the gain depends on the acceptance rate: it breaks even at {needed:.2f}; TPOT"
        f" {format_duration(rnd.tpot_s)} at {SPECULATION_ACCEPTANCE:g} ({shown}); the draft's weights and cache"
        " share the devices"
    )
    step = map_memory(handle.bind(dims), hardware, options)  # the draft's at the slice: its weights, cache
    memory = doc.get("memory") or {}
    need = memory.get("per_device_bytes", 0.0) + step.weight_bytes + step.kv_cache_bytes
    return (
        offered(
            doc,
            options,
            label=f"speculative decoding (draft {draft}, {k} tokens)",
            evidence=SPECULATION_EVIDENCE,
            latency_s=rnd.tpot_s,
            gain=plain / rnd.tpot_s - 1,
            fits=need <= memory.get("capacity_bytes", float("inf")),
            caveats=(),
            per_device_bytes=need,
            capacity_bytes=memory.get("capacity_bytes", 0.0),
            kind=CandidateKind.SERVING,
            serving_changes=(
                ("speculative_draft", draft),
                ("draft_tokens", k),
                ("acceptance_rate", SPECULATION_ACCEPTANCE),
            ),
            kpi="TPOT",
            cost=cost,
        ),
    )
