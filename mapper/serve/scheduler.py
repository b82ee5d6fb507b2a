"""The iteration-level schedulers of continuous batching: prefill-first, decode-first and chunked prefill.

serve/continuous.py validates the config and summarises; this module runs the steps. One loop iteration
per engine step with O(1) bookkeeping per step (a global decode-step counter stands in for every
sequence's token count, a heap holds their finish steps), so 100,000 requests take seconds.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
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
