"""Step times from the engine: a decoder's prefill, decode and speculative steps, mapped on coarse grids.

Serving (serve/llm.py) asks for a step's time at every scheduler step; the engine maps each grid point once
(prefill at a batch and prompt length, a decode step at a batch and context length) and `GridTime` interpolates.
With speculative decoding (serve/speculative.py) the grids are the draft's decode step and the target's
verification step (seq = k + 1), and the decode step the scheduler runs is a round's time per token.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mapper.core.errors import MapperError
from mapper.handle import ModelHandle, open_model
from mapper.pipeline import map_workload
from mapper.serve.speculative import Round, SpeculativeConfig, per_token_time, speculative_round

GRID_POINTS = 4  # context lengths per interpolation grid (times are near-affine in length)


def _grid(top: int) -> list[int]:
    return sorted({max(1, round(top * f)) for f in np.linspace(1.0 / GRID_POINTS, 1.0, GRID_POINTS)})


class GridTime:
    """(batch, tokens) -> seconds, bilinear on a grid the engine is mapped at once per point. Each integer
    batch's row is interpolated once and kept, so a call is a bisect (the scheduler calls it every step)."""

    def __init__(self, point: Callable[[int, int], float], batches: list[int], tokens: list[int]):
        self.batches = np.array(batches, dtype=np.float64)
        self.tokens = np.array(tokens, dtype=np.float64)
        self.table = np.array([[point(b, t) for t in tokens] for b in batches])
        self._tokens = [float(t) for t in tokens]
        self._rows: dict[int, list[float]] = {}

    def _row(self, batch: int) -> list[float]:
        row = self._rows.get(batch)
        if row is None:
            row = [float(np.interp(batch, self.batches, column)) for column in self.table.T]
            self._rows[batch] = row
        return row

    def grid_row(self, batch: int) -> tuple[list[float], list[float]]:
        """The batch's row and the tokens it is laid at (`chunked.decode_run` interpolates on them as a call
        would)."""
        return self._row(batch), self._tokens

    def __call__(self, batch: int, tokens: float) -> float:
        row, xs = self._row(batch), self._tokens
        if tokens <= xs[0]:
            return row[0]
        if tokens >= xs[-1]:
            return row[-1]
        i = bisect.bisect_right(xs, tokens)
        x0, x1 = xs[i - 1], xs[i]
        return row[i - 1] + (row[i] - row[i - 1]) * (tokens - x0) / (x1 - x0)


def decoder_dims(source) -> Callable[[int, int], dict[str, int]]:
    """(new tokens, cached tokens) -> a decoder's bindings besides batch and seq (which go by the
    shortcuts): every past length (`past`, `past_sequence_length`...) the cached tokens, a total length the
    export declares apart (`total_seq`) their sum, and a merged decoder's branch input the decoder that
    reads the cache. Built-ins and exported files alike (`ModelHandle.roles`)."""
    roles = open_model(source).roles

    def dims(seq: int, past: int) -> dict[str, int]:
        values = {"past": past, "total": past + seq, "branch": 1}
        return {name: values[role] for name, role in roles.items() if role in values}

    return dims


def step_latency(source, hw, options) -> Callable[[int, int, int], float]:
    """(batch, new tokens, cached tokens) -> the engine's latency of that step of a decoder: a prefill at
    past 0, a decode step at seq 1, a speculative verification at seq k + 1."""
    model = open_model(source)
    step_dims = decoder_dims(model)

    def latency(batch: int, seq: int, past: int) -> float:
        workload = model.bind(step_dims(seq, past), batch=batch, seq=seq)
        return map_workload(workload, hw, options).totals.latency_s

    return latency


def _batches(max_batch: int) -> list[int]:
    return sorted({1, max(1, max_batch // 4), max(1, max_batch // 2), max_batch})  # step time is near-affine in batch


def step_grids(
    max_batch: int, max_prompt: int, max_context: int, chunk_tokens: int | None = None
) -> tuple[list[int], list[int], list[int]]:
    """(batches, prompt lengths, contexts) the engine maps steps at: the prefill grid holds one token (chunked
    prefill's shared weight read; short prompts are not clamped up) and the chunk length where one is given, so a
    chunk and every fixed prompt length are grid points."""
    prompts = {1, *_grid(max_prompt), *([chunk_tokens] if chunk_tokens else [])}
    return _batches(max_batch), sorted(prompts), _grid(max_context)


def engine_step_times(
    source, hw, options, max_batch: int, max_prompt: int, max_context: int, chunk_tokens: int | None = None
):
    """Prefill(batch, prompt length) and decode(batch, context) from the engine on coarse grids (`step_grids`)."""
    latency = step_latency(source, hw, options)
    batches, prompts, contexts = step_grids(max_batch, max_prompt, max_context, chunk_tokens)
    prefill = GridTime(lambda b, t: latency(b, t, 0), batches, prompts)
    decode = GridTime(lambda b, t: latency(b, 1, t), batches, contexts)
    return prefill, decode


def open_draft(spec: SpeculativeConfig) -> ModelHandle:
    """The draft's handle, refused unless it is a decoder (it needs a KV cache to draft token by token)."""
    draft = open_model(spec.draft)
    if "past" not in draft.roles.values():
        raise MapperError(f"draft model {draft.name} has no KV cache: a speculative draft is a decoder")
    return draft


@dataclass(frozen=True, slots=True)
class SpeculativeSteps:
    """The step times of speculative serving on grids (serve/speculative.py): a prompt prefilled by target and
    draft, the decode step as a round's time per token, and its parts (the target's plain decode step for the
    comparison)."""

    spec: SpeculativeConfig
    prefill: Callable[[int, float], float]
    plain: GridTime  # the target's decode step, one token per sequence
    draft: GridTime  # the draft's decode step
    verify: GridTime  # the target's verification, k + 1 tokens per sequence

    @property
    def decode(self) -> Callable[[int, float], float]:
        return per_token_time(self.draft, self.verify, self.spec)

    def round(self, batch: int, context: float) -> Round:
        return speculative_round(self.draft, self.verify, self.spec, batch, context)

    def at(self, batch: int, context: float) -> dict:
        """The round against the plain decode step at one batch and context (JSON-ready)."""
        r, plain = self.round(batch, context), self.plain(batch, context)
        return {
            "draft": self.spec.draft_name,
            "draft_tokens": self.spec.draft_tokens,
            "acceptance_rate": self.spec.acceptance_rate,
            "tokens_per_round": r.tokens,
            "batch": batch,
            "context_tokens": context,
            "decode_step_s": plain,
            "draft_steps_s": r.draft_s,
            "verify_s": r.verify_s,
            "round_s": r.round_s,
            "per_token_s": r.tpot_s,
            "speedup": plain / r.tpot_s if r.tpot_s > 0 else 0.0,
        }


def speculative_step_times(
    source, spec: SpeculativeConfig, hw, options, max_batch: int, max_prompt: int, max_context: int
) -> SpeculativeSteps:
    """The engine's steps of both models on coarse grids: prefill (target + draft), the target's decode and
    verification (seq = k + 1) over the context, the draft's decode over the context and its k - 1 tokens more."""
    k = spec.draft_tokens
    target_prefill, plain = engine_step_times(source, hw, options, max_batch, max_prompt, max_context)
    draft = open_draft(spec)
    draft_prefill, draft_decode = engine_step_times(draft, hw, options, max_batch, max_prompt, max_context + k - 1)
    target = step_latency(source, hw, options)
    verify = GridTime(lambda b, t: target(b, k + 1, t), _batches(max_batch), _grid(max_context))

    def prefill(batch: int, tokens: float) -> float:
        return target_prefill(batch, tokens) + draft_prefill(batch, tokens)

    return SpeculativeSteps(spec, prefill, plain, draft_decode, verify)


def mapped_round(source, spec: SpeculativeConfig, hw, options, batch: int, context: int) -> Round:
    """A speculative round mapped step by step (no grid): the draft's k decode steps at past = context + i and
    the target's verification at seq = k + 1, past = context."""
    target, draft = step_latency(source, hw, options), step_latency(open_draft(spec), hw, options)
    k = spec.draft_tokens
    return speculative_round(
        lambda b, t: draft(b, 1, int(t)), lambda b, t: target(b, k + 1, int(t)), spec, batch, context
    )
