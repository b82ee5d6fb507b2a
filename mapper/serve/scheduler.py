"""The iteration-level schedulers of continuous batching: prefill-first and decode-first here, chunked prefill in
serve/chunked.py, on the requests, step loop state and jitter defined here.

serve/continuous.py validates the config and summarises; these modules run the steps. One loop iteration
per engine step with O(1) bookkeeping per step (a global decode-step counter stands in for every
sequence's token count, a heap holds their finish steps), so 100,000 requests take seconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from mapper.core.errors import MapperError
from mapper.serve.serving import draw_jitter, kept_jitter_draw

StepTime = Callable[[int, float], float]  # (batch, tokens) -> seconds


class Scheduler(StrEnum):
    """`LLMServingConfig.scheduler`: which work an engine step runs (Sarathi-Serve, OSDI'24, s2-3)."""

    PREFILL_FIRST = "prefill-first"  # Orca / vLLM v0: new prompts prefill as one step while decodes wait
    DECODE_FIRST = "decode-first"  # FasterTransformer: the running batch drains before new prompts prefill
    CHUNKED = "chunked"  # Sarathi-Serve / vLLM's default: each step decodes every sequence plus a prompt chunk


@dataclass(frozen=True, slots=True)
class Requests:
    """Each request's arrival time and prompt and output lengths (tokens), and the cache's page (tokens a block
    of a paged KV cache holds; 0: one contiguous cache per sequence)."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    page_tokens: int = 0

    @property
    def need(self) -> np.ndarray:
        """KV tokens reserved at admission (prefill-first, decode-first): prompt + output in whole pages."""
        tokens = self.prompt + self.output
        return -(-tokens // self.page_tokens) * self.page_tokens if self.page_tokens > 1 else tokens


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the loop produced: per-request first-token and finish times, the time-weighted batch, preemptions."""

    first_token: np.ndarray
    finish: np.ndarray
    busy_weighted: float
    preemptions: int


class Decoding:
    """The sequences in their decode phase. `tick` counts decode steps run; a sequence that joined at tick
    t0 having made m0 tokens has made m0 + tick - t0, so a step costs O(1) whatever the batch."""

    __slots__ = ("context_sum", "count", "heap", "joined", "output", "prompt", "tick")

    def __init__(self, prompt: list, output: list):
        self.tick, self.count, self.context_sum = 0, 0, 0
        self.heap: list[tuple[int, int]] = []  # (finish tick, request); stale entries skipped on pop
        self.joined: dict[int, tuple[int, int, int]] = {}  # request -> (join tick, tokens made then, finish tick)
        self.prompt, self.output = prompt, output

    def join(self, rid: int, made: int) -> None:
        end = self.tick + self.output[rid] - made
        self.joined[rid] = (self.tick, made, end)
        self.count += 1
        self.context_sum += self.prompt[rid] + made
        heapq.heappush(self.heap, (end, rid))

    def made(self, rid: int) -> int:
        t0, m0, _ = self.joined[rid]
        return m0 + self.tick - t0

    def leave(self, rid: int) -> int:
        """Remove a sequence; the tokens it had made."""
        made = self.made(rid)
        del self.joined[rid]
        self.count -= 1
        self.context_sum -= self.prompt[rid] + made
        return made

    def step(self) -> list[int]:
        """One decode step for every sequence; those that made their last token (removed)."""
        self.tick += 1
        self.context_sum += self.count
        done = []
        heap = self.heap
        while heap and heap[0][0] <= self.tick:
            end, rid = heapq.heappop(heap)
            entry = self.joined.get(rid)
            if entry is not None and entry[2] == end:
                self.leave(rid)
                done.append(rid)
        return done


JITTER_READ = 4096  # factors made Python floats at a time: a run reads its steps' few, not the whole draw


class Jitter:
    """Per-step multiplicative factors: the first draw sized for the usual step count (one step an output token,
    an upper bound), more drawn on demand (preemption's recomputed prefills) from the same generator, as many again
    as drawn so far, so a run is reproducible. `values` holds the factors read so far as Python floats (the step
    loop's fast reads), converted JITTER_READ at a time from the draws: the same factors in the same order."""

    def __init__(self, drawn: np.ndarray, draw: Callable[[int], np.ndarray]):
        self.values: list[float] = []
        self.drawn, self.draw = drawn, draw

    @classmethod
    def for_requests(cls, reqs: Requests, cv: float, dist: str, rng: np.random.Generator) -> Jitter:
        """A run's factors from `rng`: one for every step serving `reqs` could take (two a request and one an output
        token), drawn first (the draw kept across runs: `serving.kept_jitter_draw`), more as the run reads past them."""
        first = kept_jitter_draw(2 * len(reqs.arrival) + int(reqs.output.sum()), cv, dist, rng)
        return cls(first, lambda count: draw_jitter(count, cv, dist, rng))

    def __getitem__(self, step: int) -> float:
        values = self.values
        while step >= len(values):
            at = len(values)
            if at >= len(self.drawn):
                self.drawn = np.concatenate([self.drawn, self.draw(len(self.drawn))])
            values.extend(self.drawn[at : at + JITTER_READ].tolist())
        return values[step]


@dataclass(frozen=True, slots=True)
class SchedulerRun:
    """What every scheduler runs on: the step-time models, the requests, the batch and KV-cache limits
    (sequences, tokens) and the per-step jitter."""

    prefill_time: StepTime
    decode_time: StepTime
    reqs: Requests
    max_batch: int
    capacity: int
    jitter: Jitter


def run_whole_prefill(run: SchedulerRun, *, decode_first: bool) -> Timeline:
    """Prefill-first or decode-first. Each step admits waiting requests first come first served while a slot
    is free and the cache holds their prompt + output (reserved, so nothing is preempted); their prefill runs
    as one step (their count, longest prompt) and yields their first token; else the running batch decodes
    one token at its mean context. Decode-first admits only once the running batch has drained."""
    n = len(run.reqs.arrival)
    arr, prompt, output, need = (
        a.tolist() for a in (run.reqs.arrival, run.reqs.prompt, run.reqs.output, run.reqs.need)
    )
    first_token, finish = [0.0] * n, [0.0] * n
    dec = Decoding(prompt, output)
    prefill_time, decode_time, max_batch, capacity, jitter = (
        run.prefill_time, run.decode_time, run.max_batch, run.capacity, run.jitter
    )  # fmt: skip  # the loop's reads, bound once (same arithmetic)
    drawn = jitter.values
    now, nxt, kv_used, step, busy = 0.0, 0, 0, 0, 0.0
    while nxt < n or dec.count:
        count = dec.count
        if not count and arr[nxt] > now:
            now = arr[nxt]  # idle until the next arrival
        admitted: list[int] = []
        if not (decode_first and count):
            while nxt < n and arr[nxt] <= now and count + len(admitted) < max_batch and kv_used + need[nxt] <= capacity:
                admitted.append(nxt)
                kv_used += need[nxt]
                nxt += 1
        if admitted:
            factor = drawn[step] if step < len(drawn) else jitter[step]
            dt = prefill_time(len(admitted), float(max(map(prompt.__getitem__, admitted)))) * factor
            now += dt
            busy += dt * count
            for rid in admitted:
                first_token[rid] = now
                if output[rid] <= 1:
                    finish[rid] = now
                    kv_used -= need[rid]
                else:
                    dec.join(rid, 1)
        elif count:
            factor = drawn[step] if step < len(drawn) else jitter[step]
            dt = decode_time(count, dec.context_sum / count) * factor
            now += dt
            busy += dt * count
            for rid in dec.step():
                finish[rid] = now
                kv_used -= need[rid]
        else:  # nothing running and the head request does not fit: excluded by the capacity check
            raise MapperError("internal: the scheduler stalled with an empty batch")
        step += 1
    return Timeline(np.array(first_token), np.array(finish), busy, 0)
