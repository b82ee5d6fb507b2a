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

import numpy as np

from mapper.core.errors import MapperError
from mapper.serve.scheduler import Decoding, SchedulerRun, StepTime, Timeline


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
    first, last, drawn = xs[0], xs[-1], jitter.values
    context, k = dec.context_sum, 0
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
    if not k:
        return None
    dec.tick += k
    dec.context_sum = context
    s.kv_used += k * batch
    return now, busy, step + k


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
