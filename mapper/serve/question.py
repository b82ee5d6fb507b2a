"""The load a slice's percentiles are read at: the rate the user gave, or one derived from the question.

No percentile is shown at an invented load. Without a rate, the load is derived and labelled so: the
highest rate that meets every latency target (bisection over the simulated queue), or, without a target,
the saturation rate, where a queue has no steady state and so no percentile is reported at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from mapper.core.errors import MapperError, error_line
from mapper.core.targets import Targets
from mapper.core.units import format_number
from mapper.serve.llm import ServeRequest, ServingRun, is_decoder, serve_model
from mapper.serve.load_curve import LoadCurve
from mapper.serve.serving import validate_config

LIGHTEST_LOAD = 0.05  # of the saturation rate: the lightest load a decoder's target search probes
HEAVIEST_LOAD = 0.98  # of the saturation rate: the heaviest (a queue at 1.0 has no steady state)
SEARCH_STEPS = 7  # bisection steps of a decoder's target search (1/128 of the range)
QUEUE_REQUESTS = 20_000  # a request queue's run: a p99 from 200 tail samples, milliseconds a run
DECODER_REQUESTS = 1_000  # a decoder's continuous-batching run (each request decodes its output tokens)
PROBE_REQUESTS = 64  # a decoder's capacity probe: the capacity depends on the lengths, not on how many


class LoadSource(StrEnum):
    GIVEN = "given"
    TARGET = "highest rate meeting the target"
    UNMET = "no rate meets the target"
    SATURATION = "saturation rate"
    REFUSED = "not served"


@dataclass(frozen=True, slots=True)
class ServedLoad:
    """The load of a slice's serving question and the run at it (None at the saturation rate)."""

    rate_per_s: float
    source: LoadSource
    saturation_per_s: float
    run: ServingRun | None
    curve: LoadCurve | None = None  # a request queue's percentiles against load, where one was simulated
    refusal: str = ""  # why the slice cannot be served (REFUSED): the engine's one line

    @property
    def derived(self) -> bool:
        return self.source != LoadSource.GIVEN

    def sentence(self) -> str:
        rate, sat = format_number(self.rate_per_s), format_number(self.saturation_per_s)
        return {
            LoadSource.GIVEN: f"{rate} req/s (given; saturation {sat} req/s)",
            LoadSource.TARGET: f"{rate} req/s, derived: the highest rate meeting the target (saturation {sat} req/s)",
            LoadSource.UNMET: f"{rate} req/s, derived: the lightest load probed, since no rate meets the target"
            f" (saturation {sat} req/s)",
            LoadSource.SATURATION: f"{sat} req/s, derived: the saturation rate (no rate or target given, so no"
            " percentile: a queue at capacity has no steady state)",
            LoadSource.REFUSED: f"not served: {self.refusal}",
        }[self.source]

    def section(self) -> dict:
        return {
            "rate_per_s": self.rate_per_s,
            "source": str(self.source),
            "derived": self.derived,
            "saturation_per_s": self.saturation_per_s,
            "sentence": self.sentence(),
        }


@dataclass(frozen=True, slots=True)
class Question:
    """The serving question of a slice, under the same names in every command and on every page: the load and
    batching (`serve`: its rate read only when `rate_given`; its max batch the mapped batch while it follows
    it), a decoder's request lengths, and the latency targets."""

    serve: ServeRequest = field(default_factory=lambda: ServeRequest(follow_mapped_batch=True))
    rate_given: bool = False
    targets: Targets = field(default_factory=Targets)
    prompt_tokens: int | None = None  # a decoder's prompt; None: the slice's context (its KV cache, else its seq)
    requests: int | None = None  # simulated requests; None: QUEUE_REQUESTS or DECODER_REQUESTS by the model's kind


def serve_at_load(model, hw, options, question: Question, dims, mapped=None) -> ServedLoad:
    """Serve at the given rate, or derive the load (see the module docstring); where the engine cannot serve the
    slice (a decoder whose weights leave no room for a KV cache), the refusal as the load. A question that is
    itself wrong (a rate or a batch out of range) is the user's error, raised."""
    validate_config(question.serve.serving)
    try:
        return _serve_at_load(model, hw, options, question, dims, mapped)
    except MapperError as e:
        return ServedLoad(0.0, LoadSource.REFUSED, 0.0, None, refusal=error_line(e))


def _serve_at_load(model, hw, options, question: Question, dims, mapped) -> ServedLoad:
    request, targets = replace(question.serve, p99_target_s=question.targets.p99_s), question.targets
    if question.rate_given or request.serving.trace is not None:
        run = serve_model(model, hw, options, request, dims, mapped)
        return ServedLoad(run.result.offered_rate_per_s, LoadSource.GIVEN, run.result.capacity_per_s, run, run.curve)
    decoder = is_decoder(model) if request.decoder is None else request.decoder
    if decoder and request.service_time_s is None:
        return _decoder_load(model, hw, options, request, dims, targets)
    return _queue_load(model, hw, options, request, dims, mapped, targets)


def _queue_load(model, hw, options, request: ServeRequest, dims, mapped, targets: Targets) -> ServedLoad:
    """A request queue: the load curve gives the saturation rate and the highest rate meeting the p99 target."""
    probe = serve_model(model, hw, options, replace(request, load_curve=True, p99_target_s=targets.p99_s), dims, mapped)
    curve = probe.curve
    if curve is None:  # pragma: no cover - serve_model returns a curve whenever one is asked
        raise AssertionError("a request queue's load curve was asked and not returned")
    keep = curve if request.load_curve else None
    if targets.p99_s is None:
        return ServedLoad(curve.saturation_rate_per_s, LoadSource.SATURATION, curve.saturation_rate_per_s, None, keep)
    best = curve.max_rate_meeting_target_per_s
    rate, source = (best, LoadSource.TARGET) if best else (curve.points[0].offered_rate_per_s, LoadSource.UNMET)
    run = serve_model(model, hw, options, at_rate(request, rate), dims, mapped)
    return ServedLoad(rate, source, curve.saturation_rate_per_s, replace(run, curve=keep), keep)


def _decoder_load(model, hw, options, request: ServeRequest, dims, targets: Targets) -> ServedLoad:
    """A decoder: its capacity from a short probe; with targets, the highest rate meeting them (bisection)."""
    probe_request = replace(request, serving=replace(request.serving, requests=PROBE_REQUESTS, trace=None))
    saturation = serve_model(model, hw, options, probe_request, dims).result.capacity_per_s
    if not targets.given():
        return ServedLoad(saturation, LoadSource.SATURATION, saturation, None)

    def run(rate: float) -> ServingRun:
        return serve_model(model, hw, options, at_rate(request, rate), dims)

    lo, hi = LIGHTEST_LOAD * saturation, HEAVIEST_LOAD * saturation
    lightest = run(lo)
    if not targets.met(lightest.section()):
        return ServedLoad(lo, LoadSource.UNMET, saturation, lightest)
    heaviest = run(hi)
    if targets.met(heaviest.section()):
        return ServedLoad(hi, LoadSource.TARGET, saturation, heaviest)
    best = lightest
    for _ in range(SEARCH_STEPS):
        mid = (lo + hi) / 2
        at_mid = run(mid)
        if targets.met(at_mid.section()):
            lo, best = mid, at_mid
        else:
            hi = mid
    return ServedLoad(lo, LoadSource.TARGET, saturation, best)


def at_rate(request: ServeRequest, rate: float) -> ServeRequest:
    """The request at this Poisson rate (a trace's own arrivals set aside)."""
    return replace(request, serving=replace(request.serving, rate_per_s=rate, trace=None))
