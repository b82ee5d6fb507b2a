"""Request-level serving simulation: per-batch latency from the engine -> request latency percentiles.

Serving, above the pipeline (docs/manual.md, "Serving: p50/p95/p99 under load"). One batch's latency is
deterministic in the model; request latency is not.
Arrivals (Poisson or a trace) queue for one device that runs one batch at a time (FIFO); a batching
policy decides when a batch leaves; the batch's service time is the engine's latency at that batch
size (computed once per size) times run-to-run jitter. Batch-1 and static batching are the Lindley
recursion in closed form (numpy, no per-request loop); dynamic batching loops over batches, not requests.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.units import overload_sentence
from mapper.serve.trace import Trace

POLICIES = ("static", "dynamic")
JITTER_DISTS = ("none", "lognormal", "exponential")
MAX_REQUESTS, MAX_BATCH = limits.MAX_REQUESTS, limits.MAX_BATCH
PERCENTILES = (("p50_s", 50.0), ("p90_s", 90.0), ("p95_s", 95.0), ("p99_s", 99.0), ("p999_s", 99.9))
SAMPLE_POINTS = 1001  # quantiles kept for plotting a latency CDF (0%, 0.1%, ..., 100%)
QUANTILE_SAMPLE = 100_000  # requests (strided) those plotting quantiles are taken from

ServiceTime = float | Callable[[int], float]


@dataclass(frozen=True, slots=True)
class ServingConfig:
    """The scheduler and the load. `jitter_cv=None` means: take it from the hardware profile."""

    policy: str = "dynamic"  # static | dynamic
    max_batch: int = 1
    max_wait_s: float = 0.0  # dynamic: how long the oldest request may wait for the batch to fill
    rate_per_s: float = 100.0  # Poisson arrival rate (ignored with a trace)
    requests: int = 100_000  # ignored with a trace (every row is a request)
    seed: int = 0
    jitter_cv: float | None = None
    jitter_dist: str | None = None  # none | lognormal | exponential (None: the profile's)
    trace: Trace | None = None


@dataclass(frozen=True, slots=True)
class ServingResult:
    p50_s: float
    p90_s: float
    p95_s: float
    p99_s: float
    p999_s: float
    mean_s: float
    mean_wait_s: float
    throughput_per_s: float  # completed requests over the makespan
    utilization: float  # device busy time over the makespan
    mean_queue_length: float  # time-average number of requests waiting (total wait / makespan)
    mean_batch: float
    requests: int
    batches: int
    offered_rate_per_s: float
    assumptions: tuple[str, ...]
    # the requests' latencies (a strided sample of at most QUANTILE_SAMPLE): `latency_quantiles_s` reads
    # them only when a page plots the CDF (a load curve's dozen runs and the sheet's run never do: 1.8 ms each)
    latency_sample_s: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)
    capacity_per_s: float = 0.0  # the highest sustainable rate under this policy (capacity_per_s below)
    overload: str = ""  # the sentence when the offered rate is over the capacity (overload_sentence), else ""

    @property
    def latency_quantiles_s(self) -> tuple[float, ...]:
        """SAMPLE_POINTS quantiles (0%, 0.1%, ..., 100%) of the latencies, for a CDF; () without a sample."""
        if not len(self.latency_sample_s):
            return ()
        return tuple(np.quantile(self.latency_sample_s, np.linspace(0.0, 1.0, SAMPLE_POINTS)).tolist())


def validate_config(config: ServingConfig) -> ServingConfig:
    """Reject a configuration a person must fix; fill the jitter defaults (none)."""
    if config.policy not in POLICIES:
        raise MapperError(f"batch policy {config.policy!r} is not one of {', '.join(POLICIES)}")
    if not (isinstance(config.max_batch, int) and 1 <= config.max_batch <= MAX_BATCH):
        raise MapperError(f"max batch {config.max_batch!r} must be an integer from 1 to {MAX_BATCH}")
    if not (math.isfinite(config.max_wait_s) and config.max_wait_s >= 0):
        raise MapperError(f"max wait {config.max_wait_s!r} s must be finite and >= 0")
    if config.trace is None:
        if not (math.isfinite(config.rate_per_s) and config.rate_per_s > 0):
            raise MapperError(f"arrival rate {config.rate_per_s!r}/s must be finite and > 0")
        if not (isinstance(config.requests, int) and 1 <= config.requests <= MAX_REQUESTS):
            raise MapperError(
                f"requests {config.requests!r} must be an integer from 1 to {limits.limit_text('MAX_REQUESTS')}"
            )
    dist = config.jitter_dist or ("lognormal" if config.jitter_cv else "none")
    cv = 0.0 if config.jitter_cv is None or dist == "none" else float(config.jitter_cv)
    if dist not in JITTER_DISTS:
        raise MapperError(f"jitter distribution {dist!r} is not one of {', '.join(JITTER_DISTS)}")
    if not (math.isfinite(cv) and cv >= 0):
        raise MapperError(f"jitter coefficient of variation {config.jitter_cv!r} must be finite and >= 0")
    if dist == "exponential" and cv > 1:
        raise MapperError(f"exponential jitter has a CV of at most 1 (got {cv}); use lognormal for more")
    return replace(config, jitter_cv=cv, jitter_dist=dist)


# ---- inputs: arrivals, jitter, service times -------------------------------------------------


def draw_arrivals(config: ServingConfig, rng: np.random.Generator) -> np.ndarray:
    """Poisson arrivals as a cumulative sum of unit exponentials over the rate: the same seed at a
    different rate gives the same arrivals rescaled (common random numbers, so curves are smooth)."""
    if config.trace is not None:
        return np.asarray(config.trace.arrival_s, dtype=np.float64)
    return np.cumsum(rng.standard_exponential(config.requests)) / config.rate_per_s


def filled_jitter(cv: float | None, dist: str | None) -> tuple[float, str]:
    """A validated configuration's jitter CV and distribution, which `validate_config` fills in (never None)."""
    if cv is None or dist is None:
        raise ValueError("the jitter is not filled in: validate the configuration first")
    return cv, dist


def draw_jitter(n: int, cv: float, dist: str, rng: np.random.Generator) -> np.ndarray:
    """Multiplicative run-to-run factors, mean 1, coefficient of variation `cv`.

    lognormal: sigma^2 = ln(1 + cv^2), mu = -sigma^2/2. exponential: (1 - cv) + cv * Exp(1)
    (a shifted exponential; cv=1 is the textbook exponential service of M/M/1)."""
    if dist == "none" or cv == 0:
        return np.ones(n)
    if dist == "lognormal":
        sigma2 = math.log1p(cv * cv)
        return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), n)
    return (1.0 - cv) + cv * rng.standard_exponential(n)


JITTER_DRAWS_KEPT = 8  # draws `kept_jitter_draw` keeps: a search serves hundreds of configurations at one seed
_kept_draws: OrderedDict[tuple, tuple[np.ndarray, Mapping[str, Any]]] = OrderedDict()
_kept_lock = threading.Lock()


def kept_jitter_draw(n: int, cv: float, dist: str, rng: np.random.Generator) -> np.ndarray:
    """`draw_jitter(n, cv, dist, rng)`, kept by what it depends on: the generator's state (PCG64's, the default
    generator's) and the arguments. A kept draw is given back read-only and `rng` left in the state the draw left
    it, so what is drawn after it is the same too. A run draws a factor for every step it could take (100,400 for
    200 requests of 500 tokens): a deployment search's runs at one seed and request count draw the same ones."""
    state = rng.bit_generator.state
    if state.get("bit_generator") != "PCG64":
        return draw_jitter(n, cv, dist, rng)
    inner = state["state"]
    key = (inner["state"], inner["inc"], state["has_uint32"], state["uinteger"], n, cv, dist)
    with _kept_lock:
        kept = _kept_draws.get(key)
        if kept is not None:
            _kept_draws.move_to_end(key)
    if kept is not None:
        drawn, after = kept
        rng.bit_generator.state = after
        return drawn
    drawn = draw_jitter(n, cv, dist, rng)
    drawn.flags.writeable = False
    with _kept_lock:
        _kept_draws[key] = (drawn, rng.bit_generator.state)
        while len(_kept_draws) > JITTER_DRAWS_KEPT:
            _kept_draws.popitem(last=False)
    return drawn


class BatchTimes:
    """Service time by batch size, each size computed once (the engine is slow, the loop is not)."""

    def __init__(self, service_time: ServiceTime, max_batch: int):
        self.fixed = not callable(service_time)
        self.fn = service_time
        self.table: list[float | None] = [None] * (max_batch + 1)

    def __call__(self, batch: int) -> float:
        t = self.table[batch]
        if t is None:
            fn = self.fn
            t = float(fn(batch)) if callable(fn) else float(fn)  # a function of the batch, or `fixed`
            if not (math.isfinite(t) and t > 0):
                zero = (
                    " (the model takes no time: every node is free, e.g. Identity only; nothing queues)"
                    if t == 0
                    else ""
                )
                raise MapperError(f"service time at batch {batch} is {t!r} s; it must be finite and > 0{zero}")
            self.table[batch] = t
        return t

    def saturation_rate(self, max_batch: int, policy: str = "dynamic") -> float:
        """The highest sustainable request rate (mean jitter is 1): static batches always run full, so
        max_batch over its time; dynamic batching can form any size, so the best batch-size throughput."""
        if policy == "static":
            return max_batch / self(max_batch)
        return max(b / self(b) for b in _probe_sizes(max_batch))


def _probe_sizes(max_batch: int) -> list[int]:
    """1, powers of two and max_batch: enough to find the best throughput without computing every size."""
    sizes = {1, max_batch}
    b = 2
    while b < max_batch:
        sizes.add(b)
        b *= 2
    return sorted(sizes)


# ---- the queue ---------------------------------------------------------------------------------


def fifo_departures(ready_s: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """One server, FIFO: end_k = max(end_{k-1}, ready_k) + s_k (Lindley), in closed form:
    end_k = C_k + max_{j<=k}(ready_j - C_{j-1}) with C the cumulative service."""
    c = np.cumsum(service_s)
    return c + np.maximum.accumulate(ready_s - (c - service_s))


def dynamic_batches(
    arrival: np.ndarray, max_batch: int, max_wait_s: float, times: BatchTimes, jitter: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dynamic batching: a batch leaves when the device is free and either it is full or its oldest
    request has waited max_wait_s; it takes every waiting request (up to max batch). Returns each
    batch's first request, start time and service time. A batch's jitter is drawn per first request.

    Where the device is idle when a batch would leave, the batch depends on arrivals alone: its leave
    time, its end and the next batch's first request are precomputed for every request with numpy,
    and the loop just follows that chain while the device stays idle; only batches that find the
    device busy take the slow path (a bisection for the requests present when it frees)."""
    n = len(arrival)
    idx = np.arange(n)
    full_at = np.full(n, np.inf)
    full_at[: max(n - max_batch + 1, 0)] = arrival[max_batch - 1 :]
    leave_idle = np.minimum(arrival + max_wait_s, full_at)
    next_idle = np.minimum(np.searchsorted(arrival, leave_idle, side="right"), idx + max_batch)
    size_idle = next_idle - idx
    # the batch sizes idle windows mostly have: computed now (the engine is called once per size);
    # rarer sizes are computed by the loop when it meets them
    counts = np.bincount(size_idle, minlength=max_batch + 1)
    for size in np.flatnonzero(counts >= max(1, n // 1000)):
        times(int(size))
    known = np.array([t if t is not None else np.nan for t in times.table])
    end_idle = leave_idle + known[size_idle] * jitter
    stays_idle = np.zeros(n, dtype=bool)  # the device is free again before the next idle batch leaves
    inner = next_idle < n
    stays_idle[inner] = end_idle[inner] <= leave_idle[next_idle[inner]]  # NaN (unknown size) -> False
    arr, leave_l, next_l, ok_l = arrival.tolist(), leave_idle.tolist(), next_idle.tolist(), stays_idle.tolist()
    jit, table = jitter.tolist(), times.table
    heads, busy_at, busy_start = [], [], []
    free, i = -math.inf, 0
    while i < n:
        if free <= leave_l[i]:  # idle: follow the precomputed chain
            while ok_l[i]:
                heads.append(i)
                i = next_l[i]
            heads.append(i)
            j, t = next_l[i], leave_l[i]
        else:  # busy: the batch leaves when the device frees
            t = free
            j = bisect_right(arr, t, i + 1, min(i + max_batch, n))
            busy_at.append(len(heads))
            busy_start.append(t)
            heads.append(i)
        s = table[j - i]
        if s is None:
            s = times(j - i)
        free = t + s * jit[i]
        i = j
    first = np.array(heads, dtype=np.int64)
    sizes = np.diff(np.append(first, n))
    starts = leave_idle[first]
    starts[np.array(busy_at, dtype=np.int64)] = busy_start
    services = np.array(table, dtype=object)[sizes].astype(np.float64) * jitter[first]
    return starts, sizes, services


def simulate_serving(service_time: ServiceTime, config: ServingConfig) -> ServingResult:
    """Simulate `config.requests` requests (or the trace) through the batching policy; seeded.

    `service_time`: a fixed batch time in seconds (what-if, and for checking the queue itself) or a
    function batch size -> seconds (e.g. the engine's latency at that batch, see simulate_model_serving)."""
    config = validate_config(config)
    arrival_rng, jitter_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2))
    arrival = draw_arrivals(config, arrival_rng)
    n = len(arrival)
    if n == 0:
        raise MapperError("no requests to simulate (the trace is empty)")
    times = BatchTimes(service_time, config.max_batch)
    jitter = draw_jitter(n, *filled_jitter(config.jitter_cv, config.jitter_dist), jitter_rng)
    b = config.max_batch
    if b == 1 or config.policy == "static":
        sizes = np.full(-(-n // b), b, dtype=np.int64)
        sizes[-1] = n - b * (len(sizes) - 1)
        base = np.array([times(b)] * (len(sizes) - 1) + [times(int(sizes[-1]))])
        services = base * jitter[: len(sizes)]
        ready = arrival[np.minimum(np.arange(1, len(sizes) + 1) * b, n) - 1]  # full, or the last request
        ends = fifo_departures(ready, services)
        starts = ends - services
    else:
        starts, sizes, services = dynamic_batches(arrival, b, config.max_wait_s, times, jitter)
        ends = starts + services
    result = summarize(arrival, starts, ends, services, sizes, config, describe(service_time, config, n))
    capacity = times.saturation_rate(b, "static" if b == 1 else config.policy)
    return replace(result, capacity_per_s=capacity, overload=overload_sentence(result.offered_rate_per_s, capacity))


def summarize(
    arrival: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    services: np.ndarray,
    sizes: np.ndarray,
    config: ServingConfig,
    assumptions: tuple[str, ...],
) -> ServingResult:
    """Request statistics from each batch's start, end, service time and size (requests in arrival order)."""
    which = np.repeat(np.arange(len(sizes)), sizes)
    sojourn = ends[which] - arrival
    wait = starts[which] - arrival
    makespan = float(ends[-1] - arrival[0]) or float(services.sum())
    step = max(1, len(sojourn) // QUANTILE_SAMPLE)  # a strided sample is enough for a plotted CDF
    sample = np.ascontiguousarray(sojourn[::step])  # quantiles need no order: sorted only if a page plots them
    sample.setflags(write=False)
    pct = dict(zip((k for k, _ in PERCENTILES), np.percentile(sojourn, [p for _, p in PERCENTILES]).tolist()))
    n = len(arrival)
    offered = config.rate_per_s if config.trace is None else (n - 1) / max(float(arrival[-1] - arrival[0]), 1e-300)
    return ServingResult(
        **pct,
        mean_s=float(sojourn.mean()),
        mean_wait_s=float(wait.mean()),
        throughput_per_s=n / makespan,
        utilization=float(services.sum()) / makespan,
        mean_queue_length=float(wait.sum()) / makespan,
        mean_batch=n / len(sizes),
        requests=n,
        batches=len(sizes),
        offered_rate_per_s=offered,
        assumptions=assumptions,
        latency_sample_s=sample,
    )


def describe(service_time: ServiceTime, config: ServingConfig, n: int) -> tuple[str, ...]:
    """The scheduler assumptions behind a result, in words (every result carries them)."""
    if config.trace is not None:
        arrivals = f"arrivals: trace {config.trace.source or '(in memory)'}, {n:,} requests"
    else:
        arrivals = f"arrivals: Poisson at {config.rate_per_s:g}/s, {n:,} requests, seed {config.seed}"
    if config.max_batch == 1:
        policy = "policy: batch 1, first come first served"
    elif config.policy == "static":
        policy = (
            f"policy: static batching of {config.max_batch}: a batch starts when it is full and the device is"
            " free (the last, short batch at the final arrival)"
        )
    else:
        policy = (
            f"policy: dynamic batching, max batch {config.max_batch}, max wait {config.max_wait_s * 1e3:g} ms:"
            " a batch leaves when the device is free and it is full or its oldest request has waited max"
            " wait; it takes every waiting request up to max batch"
        )
    service = (
        f"service time: fixed {float(service_time):g} s per batch (what-if; the engine is not consulted)"
        if not callable(service_time)
        else "service time: the engine's latency at the batch size, computed once per size"
    )
    jitter = (
        "jitter: none"
        if config.jitter_dist == "none" or not config.jitter_cv
        else f"jitter: {config.jitter_dist}, multiplicative per batch, mean 1, CV {config.jitter_cv:g}"
    )
    return (
        arrivals,
        policy,
        "one device, one batch at a time, FIFO, unbounded queue, no preemption",
        service,
        jitter,
        "statistics over every request (no warm-up discarded)",
    )
