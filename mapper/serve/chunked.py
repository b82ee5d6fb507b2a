"""Chunked prefill (Sarathi-Serve, OSDI'24; vLLM's default scheduler): each engine step decodes one token for every
running sequence and prefills up to a chunk of the admitted prompts, with the KV cache filled on demand and the
latest admitted preempted (recomputed on readmission) when decoding would overflow it.

The step loop is O(1) a step (serve/scheduler.py's `Decoding`: one decode-step counter for every sequence, a heap of
their finish steps); the decode steps between events (no chunk, no finish, no preemption, no admission) run in one
tight loop on the grid's row (`decode_run`), the same float operations as one by one.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from mapper.core.errors import MapperError
from mapper.serve.scheduler import Decoding, Jitter, SchedulerRun, StepTime, Timeline


def mixed_step_time(prefill_time: StepTime, decode_time: StepTime, weights_s: float) -> Callable:
    """A chunked step's time: the decode step plus the prompt chunk's prefill, less the weight read they share
    (`weights_s`: a one-token prefill, about one pass over the weights), never below either alone."""

    chunks: dict[int, float] = {}  # a chunk's prefill by its length (most steps take the full chunk)

    def time(batch: int, context: float, chunk: int) -> float:
        if not chunk:
            return decode_time(batch, context)
        p = chunks.get(chunk)
        if p is None:
            p = chunks[chunk] = prefill_time(1, float(chunk))
        if not batch:
            return p
        d = decode_time(batch, context)
        return d + p - min(weights_s, d, p)

    return time


class ChunkedState:
    """Chunked prefill's bookkeeping: the active requests in admission order (the last is preempted first),
    the prompts still prefilling (request, tokens left), the preempted waiting to be recomputed, and the KV
    cache filled on demand (a prompt at admission, a token per sequence per decode step)."""

    __slots__ = ("active", "dec", "kv_used", "made_before", "preemptions", "prefilling", "prompt", "requeued")

    def __init__(self, prompt: list, output: list):
        self.active: dict[int, None] = {}
        self.prefilling: deque[list[int]] = deque()
        self.requeued: deque[int] = deque()
        self.made_before = [0] * len(prompt)  # tokens a request made before its current prefill
        self.kv_used, self.preemptions = 0, 0
        self.dec = Decoding(prompt, output)
        self.prompt = prompt

    def held(self, rid: int) -> int:
        """KV tokens a request holds: its prompt and every token made but the newest (not yet fed back)."""
        if rid in self.dec.joined:
            return self.prompt[rid] + self.dec.made(rid) - 1
        return self.prompt[rid] + self.made_before[rid]

    def admit(self, rid: int) -> None:
        self.active[rid] = None
        self.prefilling.append([rid, self.prompt[rid] + self.made_before[rid]])
        self.kv_used += self.prompt[rid] + self.made_before[rid]

    def preempt_for(self, tokens: int, capacity: int) -> None:
        """Free the cache for `tokens` more by preempting the latest admitted (recomputed later: vLLM's
        default); the oldest always keeps its place, so every request finishes."""
        while self.kv_used + tokens > capacity and len(self.active) > 1:
            rid = next(reversed(self.active))
            del self.active[rid]
            self.kv_used -= self.held(rid)
            if rid in self.dec.joined:
                self.made_before[rid] = self.dec.leave(rid)
                tokens -= 1
            else:
                self.prefilling.pop()  # the latest admitted: the last prompt in line
            self.requeued.appendleft(rid)
            self.preemptions += 1

    def prefilled(self, rid: int, now: float, first_token: list[float], finish: list[float]) -> None:
        """A prompt whose last chunk ran at `now`: its next token made (the first, or a preempted request's next),
        then decoding, or finished where that was its last."""
        made = self.made_before[rid] + 1
        if made == 1:
            first_token[rid] = now
        if made >= self.dec.output[rid]:
            finish[rid] = now
            self.kv_used -= self.prompt[rid] + self.made_before[rid]
            del self.active[rid]
        else:
            self.dec.join(rid, made)

    def take_chunk(self, chunk_tokens: int) -> tuple[int, list[int]]:
        """Prompt tokens for this step, first come first served: (tokens taken, requests whose prompt ends)."""
        budget, ended = chunk_tokens, []
        for entry in self.prefilling:
            take = min(entry[1], budget)
            entry[1] -= take
            budget -= take
            if entry[1]:
                break
            ended.append(entry[0])
            if not budget:
                break
        for _ in ended:
            self.prefilling.popleft()
        return chunk_tokens - budget, ended


RUN_MIN = 4  # decode steps the heap and the cache leave room for, at least, before a run is tried


def decode_run(
    run: SchedulerRun, s: ChunkedState, step: int, now: float, busy: float, arrival: float
) -> tuple[float, float, int] | None:
    """Decode steps with nothing between them, run in one tight loop: no prompt chunk, no sequence finishing (the
    heap's first finish tick), no preemption (the cache holds each step's tokens) and no arrival admitted
    (`arrival`, the next request's time where a slot is free; one refused for the cache stays refused as the cache
    fills). Each step's seconds are the decode grid's (`grid_row`: the same interpolation, in the same float
    operations, as a call) times its jitter factor, added to the clock and the busy time one after another, so the
    run ends where the steps one by one would; a column the grid has not read ends it (a call reads it). (now, busy,
    step) after the run; None where no step ran."""
    dec, jitter = s.dec, run.jitter
    batch = dec.count
    bound = min(dec.heap[0][0] - dec.tick - 1, (run.capacity - s.kv_used) // batch)
    if bound < RUN_MIN:
        return None
    row, xs = run.decode_time.grid_row(batch)  # type: ignore[attr-defined]
    context = dec.context_sum
    span = _Span(row, xs, context, batch, bound, jitter, step, arrival)
    at_once = bound >= RUN_ARRAY_MIN and step + bound <= len(jitter.drawn)  # every factor already drawn
    reach = _reach(span, now) if at_once else 0
    if reach >= RUN_ARRAY_MIN:
        k, now, busy = _at_once(span._replace(bound=reach), now, busy)
    else:
        k, now, busy = _one_by_one(span, now, busy)
    if not k:
        return None
    dec.tick += k
    dec.context_sum = context + k * batch
    s.kv_used += k * batch
    return now, busy, step + k


RUN_ARRAY_MIN = 256  # steps a run may take, at least, for numpy's evaluation of them to beat the loop's


class _Span(NamedTuple):
    """What a run's steps read: the decode grid's row at the batch and its columns' tokens, the context and batch
    at the start, the most steps, the jitter and the first step's index, and the next arrival."""

    row: list
    xs: list[float]
    context: int
    batch: int
    bound: int
    jitter: Jitter
    step: int
    arrival: float


def _reach(span: _Span, now: float) -> int:
    """The most steps the run can take: its bound, and before the arrival at most one step more than the arrival
    leaves room for at the shortest step (the least grid value read times the least factor), with a margin for
    the clock's rounding."""
    read = [v for v in span.row if v is not None]
    if not read or math.isinf(span.arrival):
        return span.bound
    shortest = min(read) * float(span.jitter.drawn[span.step : span.step + span.bound].min())
    if shortest <= 0:
        return span.bound
    return min(span.bound, int((span.arrival - now) / shortest * (1 + 1e-9)) + 2)


def _one_by_one(span: _Span, now: float, busy: float) -> tuple[int, float, float]:
    """(steps run, now, busy) of `decode_run`'s steps, one after another."""
    row, xs, context, batch, bound, jitter, step, arrival = span
    first, last, drawn, k = xs[0], xs[-1], jitter.values, 0
    while k < bound and (not k or now < arrival):
        tokens = context / batch
        if tokens <= first:
            value = row[0]
        elif tokens >= last:
            value = row[-1]
        else:
            i = bisect.bisect_right(xs, tokens)
            a, b = row[i - 1], row[i]
            if a is None or b is None:
                break
            value = a + (b - a) * (tokens - xs[i - 1]) / (xs[i] - xs[i - 1])
        if value is None:
            break
        j = step + k
        dt = value * (drawn[j] if j < len(drawn) else jitter[j])
        now += dt
        busy += dt * batch
        context += batch
        k += 1
    return k, now, busy


def _at_once(span: _Span, now: float, busy: float) -> tuple[int, float, float]:
    """`_one_by_one` in numpy: the same operations on each step's figures (the context a whole number of tokens,
    divided as Python divides; the interpolation's terms in its order; the clock and busy time as running sums,
    which add one after another), and the same stop: the first step a read column is missing for, or the first
    past the arrival."""
    row, xs, context, batch, bound, jitter, step, arrival = span
    tokens = (context + np.arange(bound, dtype=np.int64) * batch) / batch
    grid, missing = np.asarray(xs), np.array([v is None for v in row])
    values = np.array([np.nan if v is None else v for v in row])
    i = np.clip(np.searchsorted(grid, tokens, side="right"), 1, len(grid) - 1)
    low, high = tokens <= grid[0], tokens >= grid[-1]
    with np.errstate(all="ignore"):
        a, b, x0 = values[i - 1], values[i], grid[i - 1]
        inner = a + (b - a) * (tokens - x0) / (grid[i] - x0)
    value = np.where(low, values[0], np.where(high, values[-1], inner))
    unread = np.where(low, missing[0], np.where(high, missing[-1], missing[i - 1] | missing[i]))
    cut = int(np.argmax(unread)) if unread.any() else bound
    if not cut:
        return 0, now, busy
    dt = value[:cut] * jitter.drawn[step : step + cut]
    clock = np.cumsum(np.concatenate(([now], dt)))  # clock[k]: the time after k steps
    past = clock[1:cut] >= arrival  # a step k >= 1 runs only while the clock is before the arrival
    k = int(np.argmax(past)) + 1 if past.any() else cut
    spent = np.cumsum(np.concatenate(([busy], dt[:k] * batch)))
    return k, float(clock[k]), float(spent[-1])


def run_chunked(run: SchedulerRun, *, chunk_tokens: int) -> Timeline:
    """Chunked prefill (Sarathi-Serve): every step decodes one token for each running sequence and prefills up
    to `chunk_tokens` prompt tokens of the requests admitted, first come first served; a request is admitted
    while a slot is free and the cache holds its prompt and the batch's next tokens, and when decoding would
    overflow the cache the latest admitted is preempted and its tokens recomputed on readmission."""
    n = len(run.reqs.arrival)
    arr, prompt, output = run.reqs.arrival.tolist(), run.reqs.prompt.tolist(), run.reqs.output.tolist()
    first_token, finish = [0.0] * n, [0.0] * n
    s = ChunkedState(prompt, output)
    dec, step_time = s.dec, mixed_step_time(run.prefill_time, run.decode_time, run.prefill_time(1, 1.0))
    decode_time, capacity, max_batch, jitter = run.decode_time, run.capacity, run.max_batch, run.jitter
    active, requeued, drawn = s.active, s.requeued, jitter.values  # the loop's reads, bound once (same arithmetic)
    together = hasattr(decode_time, "grid_row")  # a grid's step times: decode steps run together (`decode_run`)
    now, nxt, step, busy = 0.0, 0, 0, 0.0
    while nxt < n or active or requeued:
        if not active and not requeued and arr[nxt] > now:
            now = arr[nxt]  # idle until the next arrival
        while len(active) < max_batch:
            rid = requeued[0] if requeued else (nxt if nxt < n and arr[nxt] <= now else None)
            if rid is None or s.kv_used + prompt[rid] + s.made_before[rid] + dec.count > capacity and active:
                break
            if requeued:
                requeued.popleft()
            else:
                nxt += 1
            s.admit(rid)
        batch = dec.count
        if s.kv_used + batch > capacity:
            s.preempt_for(batch, capacity)
            batch = dec.count
        tokens, ended = s.take_chunk(chunk_tokens) if s.prefilling else (0, ())
        if not (batch or tokens):
            raise MapperError("internal: the chunked scheduler stalled with nothing to run")
        if not tokens and not requeued and together:  # decode steps alone: as many at once as can be
            arrival = arr[nxt] if nxt < n and len(active) < max_batch and arr[nxt] > now else math.inf
            ran = decode_run(run, s, step, now, busy, arrival)
            if ran is not None:
                now, busy, step = ran
                continue
        factor = drawn[step] if step < len(drawn) else jitter[step]
        if tokens:
            dt = step_time(batch, dec.context_sum / batch if batch else 0.0, tokens) * factor
        else:  # a decode step alone: `mixed_step_time`'s own answer without a chunk
            dt = decode_time(batch, dec.context_sum / batch) * factor
        now += dt
        busy += dt * batch
        step += 1
        s.kv_used += batch
        for rid in dec.step() if batch else ():
            finish[rid] = now
            s.kv_used -= prompt[rid] + output[rid] - 1
            del active[rid]
        for rid in ended:
            s.prefilled(rid, now, first_token, finish)
    return Timeline(np.array(first_token), np.array(finish), busy, s.preemptions)
