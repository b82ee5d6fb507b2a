"""The engine's steps for a deployment search: each plan's mappings made once, and only where they are read.

A search serves one model under many plans and batch caps. Every step a plan's serving reads is a mapping of
one binding (batch, new tokens, cached tokens) under that plan's options; `PlanSteps` keeps each mapping once
(its latency for the step grids, its memory for the KV budget, its energy), so the batch caps of one plan share
them, and `LazyGrid` maps a grid point only when the scheduler reads a step beside it (a chunked scheduler reads
prefills of one sequence only, and decode contexts between the prompt and prompt + output). The grids are the
ones `serve.steps.engine_step_times` lays for the same cap and lengths, so a configuration's figures are the
ones `mapper serve` gives for it.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from mapper.core.options import PlanOptions
from mapper.core.result import MappingResult, MemoryPlan
from mapper.handle import ModelHandle
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_memory, map_workload
from mapper.serve.llm import KvBudget, cache_memory, device_budget, kv_page_tokens
from mapper.serve.steps import decoder_dims, step_grids
from mapper.work.workload import Workload


class LazyGrid:
    """(batch, tokens) -> seconds, the same bilinear interpolation as `serve.steps.GridTime` over the same
    grid, each point mapped on first read (through `point`, which the plan's cache answers)."""

    def __init__(self, point: Callable[[int, int], float], batches: list[int], tokens: list[int]):
        self.point = point
        self.batches, self.tokens = [int(b) for b in batches], [int(t) for t in tokens]
        self._xb = [float(b) for b in batches]
        self._xs = [float(t) for t in tokens]
        self._rows: dict[int, list[float | None]] = {}

    def _row(self, batch: int) -> list[float | None]:
        """The batch's kept column values (None: not read yet)."""
        row = self._rows.get(batch)
        if row is None:
            row = self._rows[batch] = [None] * len(self.tokens)
        return row

    def _fill(self, row: list[float | None], batch: int, column: int) -> float:
        """The grid's column interpolated in batch, kept in the batch's row."""
        value = row[column] = self._interpolate(batch, column)
        return value

    def _interpolate(self, batch: int, column: int) -> float:
        xb, t = self._xb, self.tokens[column]
        if batch <= xb[0]:
            return self.point(self.batches[0], t)
        if batch >= xb[-1]:
            return self.point(self.batches[-1], t)
        j = bisect.bisect_right(xb, batch)
        low, high = self.point(self.batches[j - 1], t), self.point(self.batches[j], t)
        return float(np.interp(batch, xb[j - 1 : j + 1], [low, high]))

    def grid_row(self, batch: int) -> tuple[list[float | None], list[float]]:
        """The batch's row as read so far (None: a column not read yet) and the tokens it is laid at
        (`chunked.decode_run` interpolates on the columns read, as a call would, and leaves the rest to calls)."""
        return self._row(batch), self._xs

    def __call__(self, batch: int, tokens: float) -> float:
        """The columns around `tokens` (each interpolated in batch once, then kept), linear between them."""
        xs, row = self._xs, self._rows.get(batch)  # the scheduler calls this every step: `_row` inlined
        if row is None:
            row = self._row(batch)
        if tokens <= xs[0]:
            i = 0
        elif tokens >= xs[-1]:
            i = len(xs) - 1
        else:
            i = bisect.bisect_right(xs, tokens)
            a, b = row[i - 1], row[i]
            if a is None:
                a = self._fill(row, batch, i - 1)
            if b is None:
                b = self._fill(row, batch, i)
            return a + (b - a) * (tokens - xs[i - 1]) / (xs[i] - xs[i - 1])
        value = row[i]
        return value if value is not None else self._fill(row, batch, i)


SEARCH_WORKLOADS = 256  # bound steps a search keeps (a Mixtral step's workload is ~2 MB: 0.5 GB at most)


class BoundSteps:
    """A model's steps bound at (batch, new tokens, cached tokens), kept for a search's plans: every plan maps the
    same bindings under its own options, more of them than the handle's own table keeps (WORKLOAD_ENTRIES), and a
    Mixtral binding takes 0.2-0.4 s (the experts' routing)."""

    def __init__(self, model: ModelHandle, entries: int = SEARCH_WORKLOADS):
        self.model, self._entries = model, entries
        self._dims = decoder_dims(model)
        self._bound: OrderedDict[tuple[int, int, int], Workload] = OrderedDict()

    def __getstate__(self) -> dict:  # a worker process binds its own
        return {"model": self.model, "entries": self._entries}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["model"], state["entries"])

    def workload(self, batch: int, seq: int, past: int) -> Workload:
        key = (batch, seq, past)
        found = self._bound.get(key)
        if found is None:
            found = self._bound[key] = self.model.bind(self._dims(seq, past), batch=batch, seq=seq)
            if len(self._bound) > self._entries:
                self._bound.popitem(last=False)
        return found


@dataclass(frozen=True, slots=True)
class StepFigures:
    """What a search reads of a mapped step: its latency and energy (the step grids, energy per token) and its
    memory plan (the KV budget). Kept in place of the MappingResult: a search maps ~1,000 steps, and their
    timelines (2,000 kernels and assessments a Mixtral step) would stay alive for the collector to walk."""

    latency_s: float
    energy_j: float
    memory: MemoryPlan | None

    @classmethod
    def of(cls, result: MappingResult) -> StepFigures:
        return cls(result.totals.latency_s, result.totals.energy_j, result.memory)


class PlanSteps:
    """One plan's mapped steps: (batch, new tokens, cached tokens) -> its figures (`StepFigures`), each mapped once."""

    def __init__(self, model: ModelHandle, hw: HardwareProfile, options: PlanOptions, bound: BoundSteps | None = None):
        self.model, self.hw, self.options = model, hw, options
        self._bound = bound or BoundSteps(model)
        self._page: int | None = None
        self._mapped: dict[tuple[int, int, int], StepFigures] = {}
        self._memory: dict[tuple[int, int, int], MemoryPlan] = {}  # steps only a KV budget read: mapped to memory
        self._budgets: dict[tuple[int, int], KvBudget] = {}  # (token budget, id of the draft's steps or 0)

    @property
    def mapped(self) -> int:
        """Steps this plan has mapped (to their figures, or to their memory plan alone)."""
        return len(self._mapped.keys() | self._memory.keys())

    def figures(self, batch: int, seq: int, past: int) -> StepFigures:
        key = (batch, seq, past)
        found = self._mapped.get(key)
        if found is None:
            result = map_workload(self._bound.workload(batch, seq, past), self.hw, self.options)
            found = self._mapped[key] = StepFigures.of(result)
        return found

    def memory(self, batch: int, seq: int, past: int) -> MemoryPlan | None:
        """The step's memory plan: its figures' where it was mapped, else the stages before the cost alone
        (`pipeline.map_memory`: a KV budget's one-token and profile steps are often read for nothing else)."""
        key = (batch, seq, past)
        found = self._mapped.get(key)
        if found is not None:
            return found.memory
        if key not in self._memory:
            self._memory[key] = map_memory(self._bound.workload(batch, seq, past), self.hw, self.options)
        return self._memory[key]

    def latency(self, batch: int, seq: int, past: int) -> float:
        return self.figures(batch, seq, past).latency_s

    def kv_budget(self, token_budget: int, draft: PlanSteps | None = None) -> KvBudget:
        """`serve.llm.kv_budget` from this plan's mappings (one token, and a prefill of the token budget); with a
        speculative draft's steps (the same plan), its weights and cache beside the target's. Kept by token
        budget: a plan's caps and pools ask for the same ones again."""
        key = (token_budget, 0 if draft is None else id(draft))
        if key not in self._budgets:
            self._budgets[key] = self._kv_budget(token_budget, draft)
        return self._budgets[key]

    def _kv_budget(self, token_budget: int, draft: PlanSteps | None) -> KvBudget:
        name = self.model.name
        one = cache_memory(self.memory(1, 1, 0), name)
        profile = cache_memory(self.memory(1, token_budget, 0), name)
        if self._page is None:
            self._page = kv_page_tokens(self.model, self.hw, self.options)
        budget = device_budget(self.hw, one, profile, token_budget, self._page)
        if draft is None:
            return budget
        d_one = cache_memory(draft.memory(1, 1, 0), draft.model.name)
        d_profile = cache_memory(draft.memory(1, token_budget, 0), draft.model.name)
        return replace(
            budget,
            activation_bytes=max(budget.activation_bytes, d_profile.activation_bytes),
            draft=draft.model.source or draft.model.name,
            draft_weight_bytes=d_one.weight_bytes,
            draft_kv_bytes_per_token=d_one.kv_cache_bytes,
        )

    def grids(self, max_batch: int, prompt: int, context: int, chunk: int) -> tuple[LazyGrid, LazyGrid]:
        """Prefill and decode on `engine_step_times`' grids for this cap, these lengths and this chunk."""
        batches, prompts, contexts = step_grids(max_batch, prompt, context, chunk)
        prefill = LazyGrid(lambda b, t: self.latency(b, t, 0), batches, prompts)
        decode = LazyGrid(lambda b, t: self.latency(b, 1, t), batches, contexts)
        return prefill, decode

    def energy_per_token_j(self, grid: LazyGrid, running: float, context: int, prompt: int, output: int) -> float:
        """Joules an output token costs: the decode step's energy at the mean running batch (linear between the
        decode grid's batches around it, at the grid context nearest the mean) over its sequences, and the
        prompt's prefill spread over the request's output tokens."""
        running = min(max(running, 1.0), float(grid.batches[-1]))
        return self.step_energy_j(grid.batches, running, 1, context) / running + self.prefill_energy_j(prompt) / output

    def step_energy_j(self, batches: list[int], running: float, seq: int, past: int) -> float:
        """A step's energy at `running` sequences: linear between the grid's batches around it."""
        j = max(1, min(bisect.bisect_left(batches, running), len(batches) - 1))
        low, high = batches[max(j - 1, 0)], batches[min(j, len(batches) - 1)]
        energy = [self.figures(b, seq, past).energy_j for b in (low, high)]
        return float(np.interp(running, [low, high], energy)) if high > low else energy[0]

    def prefill_energy_j(self, prompt: int) -> float:
        """One prompt's prefill energy."""
        return self.figures(1, prompt, 0).energy_j
