"""Speculative decoding: a draft model proposes k tokens a round, the target verifies them in one step.

The model is the standard analysis of Leviathan, Kalman and Matias, "Fast Inference from Transformers via
Speculative Decoding" (ICML 2023, section 3, Eq. 1; Chen et al., "Accelerating Large Language Model Decoding with
Speculative Sampling", 2023, is the same scheme). With draft length k and an acceptance rate alpha per draft token,
independent and the same at every position, a round yields

    E = (1 - alpha^(k+1)) / (1 - alpha)

tokens per sequence in expectation: the accepted drafts, plus the target's own token at the first rejection (or
its bonus token after k acceptances). Rejection sampling keeps the target's output distribution, so the lever
changes time, not quality. A round costs

  - k decode steps of the draft, each at batch b, one new token per sequence, over a context one token longer
    than the last (past = context, context + 1, ..., context + k - 1);
  - one verification step of the target: a decode of k + 1 new tokens per sequence over the cached context
    (bind seq = k + 1, past = context), mapped by the engine as it maps any step. Its GEMMs have (k + 1) x b rows:
    while they stay memory-bound the weights read once serve k + 1 tokens, and once the rows make them
    compute-bound (a large batch) verification costs k + 1 decode steps and speculation stops paying.

TPOT = round time / E; throughput follows, since the continuous-batching simulation (serve/continuous.py) runs a
decode step of that per-token time (`per_token_time`).

A draft is any decoder `open_model` takes: a built-in (llama2-7b drafting for llama2-70b: one tokenizer), an ONNX
export, or a Hugging Face config. An MTP head (DeepSeek-V3) or an EAGLE-style draft is a small module of the
target's own width: describe it as a config (the target's, with num_hidden_layers 1) and pass that file. The draft
runs on the same devices under the same plan (TP, PP, precision) as the target, one after the other, and its
weights and KV cache share their memory (serve/llm.py `kv_budget`).

Not modelled: tree attention (Medusa, EAGLE-2 verify several branches a step), an acceptance rate that varies with
position or prompt, the per-sequence spread of accepted tokens (each round credits every sequence E tokens), a
draft on devices of its own, the draft's catch-up on a round whose every draft was accepted, and the k lookahead
KV slots a sequence holds during a round. Chunked prefill beside a verification step is refused, not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mapper.core.errors import MapperError
from mapper.serve.scheduler import StepTime

if TYPE_CHECKING:
    from mapper.handle import ModelHandle

DEFAULT_DRAFT_TOKENS = 4  # k when none is given (vLLM's examples propose 4-5 tokens a round)
MAX_DRAFT_TOKENS = 16  # a longer chain: the 17th draft adds alpha^17 tokens a round (0.17 at alpha 0.9)
SOURCE = "Leviathan et al., ICML 2023, Eq. 1"


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """Speculative decoding's inputs: the draft (what `open_model` takes, or its handle), the tokens it proposes
    a round (k, Leviathan's gamma) and the chance the target accepts each of them (alpha)."""

    draft: str | ModelHandle  # a built-in name, a model or config path, or the handle of one
    acceptance_rate: float
    draft_tokens: int = DEFAULT_DRAFT_TOKENS

    @property
    def tokens_per_round(self) -> float:
        return expected_tokens(self.acceptance_rate, self.draft_tokens)

    @property
    def draft_name(self) -> str:
        """The draft as the user named it (a handle: its source, else its name)."""
        d = self.draft
        return d if isinstance(d, str) else d.source or d.name

    def flags(self) -> list[str]:
        """The command-line flags that ask for this speculation again."""
        return [
            f"--speculative-draft={self.draft_name}",
            f"--draft-tokens={self.draft_tokens}",
            f"--acceptance-rate={self.acceptance_rate:g}",
        ]

    def text(self) -> str:
        """The assumption line: the inputs, the expected tokens and where the formula comes from."""
        k, a = self.draft_tokens, self.acceptance_rate
        s = "s" if k > 1 else ""
        return (
            f"speculative decoding: draft {self.draft_name} proposes {k} token{s} a round, each accepted with"
            f" probability {a:g} (independent per position) -> (1 - {a:g}^{k + 1}) / (1 - {a:g}) ="
            f" {self.tokens_per_round:.3f} tokens per round ({SOURCE}); a round = {k} draft decode step{s} + one"
            f" target verification of {k + 1} tokens per sequence; TPOT = round time / tokens per round; a prompt"
            " prefills both models; draft and target on the same devices under the same plan"
        )


def expected_tokens(acceptance_rate: float, draft_tokens: int) -> float:
    """Tokens a round yields per sequence in expectation: (1 - alpha^(k+1)) / (1 - alpha) (alpha in [0, 1))."""
    a, k = acceptance_rate, draft_tokens
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def validate_speculative(spec: SpeculativeConfig) -> SpeculativeConfig:
    """The inputs in range (one-line MapperErrors); the draft's being a decoder is checked where it is opened."""
    a, k = spec.acceptance_rate, spec.draft_tokens
    if isinstance(a, bool) or not isinstance(a, int | float) or not math.isfinite(a) or not 0.0 <= a < 1.0:
        raise MapperError(
            f"acceptance rate {a!r} must be at least 0 and below 1 (the share of draft tokens the target accepts;"
            " at 1 every draft would be accepted)"
        )
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFT_TOKENS:
        raise MapperError(
            f"draft tokens {k!r} must be an integer from 1 to {MAX_DRAFT_TOKENS} (the tokens the draft proposes a"
            " round)"
        )
    if not spec.draft_name.strip():
        raise MapperError("speculative decoding needs a draft model: a built-in name, an .onnx file or a config")
    return SpeculativeConfig(spec.draft, float(a), k)


@dataclass(frozen=True, slots=True)
class Round:
    """One speculative round at a batch and context: its parts' times and the tokens it yields per sequence."""

    draft_s: float  # the k draft decode steps together
    verify_s: float  # the target's verification of k + 1 tokens per sequence
    tokens: float  # expected tokens per sequence (`expected_tokens`)

    @property
    def round_s(self) -> float:
        return self.draft_s + self.verify_s

    @property
    def tpot_s(self) -> float:
        """Time per output token: the round over the tokens it yields."""
        return self.round_s / self.tokens


def speculative_round(
    draft_step: StepTime, verify_step: StepTime, spec: SpeculativeConfig, batch: int, context: float
) -> Round:
    """A round at `batch` sequences whose caches hold `context` tokens: the draft's k decode steps (its i-th over
    context + i cached tokens) and the target's verification over `context` (`verify_step`: seq = k + 1)."""
    k = spec.draft_tokens
    draft = sum(draft_step(batch, context + i) for i in range(k))
    return Round(draft, verify_step(batch, context), spec.tokens_per_round)


def per_token_time(draft_step: StepTime, verify_step: StepTime, spec: SpeculativeConfig) -> StepTime:
    """(batch, context) -> a speculative round's time per output token: the decode step the scheduler runs."""

    def time(batch: int, context: float) -> float:
        return speculative_round(draft_step, verify_step, spec, batch, context).tpot_s

    return time


def acceptance_to_break_even(round_s: float, plain_step_s: float, draft_tokens: int) -> float | None:
    """The acceptance rate at which speculation only breaks even: E(alpha) = round / plain step (E rises from 1
    at alpha 0 to k + 1 as alpha -> 1). 0.0 where the round pays even when every draft is rejected; None where
    it does not pay even when every draft is accepted."""
    need = round_s / plain_step_s
    if need <= 1.0:
        return 0.0
    if need >= draft_tokens + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):  # E is increasing in alpha: bisect to double precision
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, draft_tokens) < need else (lo, mid)
    return hi
