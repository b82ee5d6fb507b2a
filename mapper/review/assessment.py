"""One assessment of a slice: the engine's one answer that every page, sheet, packet and command renders.

`assess_slice` maps the slice, serves it at the question's load (the rate given, or one derived and labelled
so: mapper.serve.question), runs the ordered checks once (capacity -> latency targets -> dominant bottleneck:
report.verdict), proposes the fixes for the first failure, re-maps each, rejects those that do not fit or do
not change the failing check, and chooses the best by ranking.RANKING. The result carries the Serving section
and the assessment section, so `mapping_document(assessment.result)` is the document every view reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapper.core.classes import Bottleneck, CandidateKind
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.core.result import MappingResult
from mapper.core.targets import TARGET_ROWS
from mapper.handle import ModelHandle
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.report.document import mapping_document
from mapper.report.verdict import Finding, first_failure
from mapper.review import steps
from mapper.review.candidates import LATENCY_TARGET, Candidate, larger_batches, propose
from mapper.review.disaggregation import disaggregation
from mapper.review.ranking import best, chosen_because, rank
from mapper.review.speculation import speculation, speculative_of
from mapper.serve.llm import DEFAULT_OUTPUT_TOKENS, follow_batch, is_decoder, mapped_batch, serve_model
from mapper.serve.question import DECODER_REQUESTS, QUEUE_REQUESTS, Question, ServedLoad, serve_at_load

CANDIDATE_FIELDS = ("label", "kind", "owner", "evidence", "latency_s", "gain", "fits", "fixes", "rejected", "cost")


@dataclass(frozen=True, slots=True)
class Assessment:
    """The slice's one answer (see the module docstring). `result` carries the Serving and assessment sections."""

    question: Question
    result: MappingResult
    load: ServedLoad
    failure: Finding
    dominant: str
    decode: bool  # a decoder at a decode step: its latency is the time per output token
    candidates: tuple[Candidate, ...]  # ranked: the choosable first, the rejected last with their reasons
    chosen: Candidate | None
    chosen_reason: str

    def document(self) -> dict:
        return mapping_document(self.result)


def is_decode_step(model: ModelHandle, dims: dict[str, int]) -> bool:
    """A decoder (it has a KV cache) bound at one new token: its latency is a time per output token."""
    return is_decoder(model) and any(dims.get(n) == 1 for n, r in model.roles.items() if r == "seq")


def slice_question(model: ModelHandle, dims: dict[str, int], question: Question, decoder: bool) -> Question:
    """The question completed from the slice: a decoder's prompt is its context (the KV cache the slice binds,
    else its sequence) unless the question gives one; asking a request queue for TTFT/TPOT is refused."""
    unanswerable = question.targets.unanswerable(decoder)
    if unanswerable:
        raise MapperError(
            f"{' and '.join(unanswerable)} targets apply to decoders (continuous batching); {model.name} is served"
            " as a request queue: give --p99-target-ms for its request latency"
        )
    serve = question.serve
    requests = question.requests or (DECODER_REQUESTS if decoder else QUEUE_REQUESTS)
    serve = replace(serve, serving=replace(serve.serving, requests=requests))
    if decoder:
        roles = model.roles
        context = max((dims.get(n, 0) for n, r in roles.items() if r == "past"), default=0)
        prompt = context or max((dims.get(n, 0) for n, r in roles.items() if r == "seq"), default=0)
        serve = replace(serve, prompt_tokens=question.prompt_tokens or max(1, prompt))
    return replace(question, serve=serve)


def assess_slice(
    model: ModelHandle,
    dims: dict[str, int],
    hw: HardwareProfile,
    options: PlanOptions = PlanOptions(),
    question: Question | None = None,
    created_utc: str = "",
) -> Assessment:
    """Map, serve, check, propose, choose: the slice's one assessment (see the module docstring)."""
    workload = model.bind(dims)
    dims = dict(workload.graph.dims)  # the slice's complete bindings (the model's defaults filled in)
    decoder = is_decoder(model)
    question = slice_question(model, dims, question or Question(), decoder)
    mapped = map_workload(workload, hw, options)
    mapped = replace(mapped, created_utc=created_utc) if created_utc else mapped
    load = serve_at_load(model, hw, options, question, dims, mapped)
    result = replace(mapped, serving=serving_section(load, decoder, question, mapped_batch(model, dims)))
    doc = mapping_document(result)
    failure, dominant = first_failure(doc, question.targets), steps.dominant_class(doc)
    decode = is_decode_step(model, dims)
    base = (workload, hw, options)
    candidates = propose(failure.check, dominant, base, doc, decoder, decode)
    if decode and dominant == Bottleneck.MEMORY and mapped.memory.fits:  # more tokens per weight read
        candidates += larger_batches(model, dims, base, doc)
        candidates += speculation(model, dims, base, doc, question.serve.speculative)
    if failure.check == LATENCY_TARGET:
        candidates = tuple(_served(c, model, hw, question, load, dims) for c in candidates)
        if decoder:  # served at the load by its own simulation, after the others
            candidates += disaggregation(model, hw, options, question.targets, load, doc)
    ranked = rank(candidates, failure.check)
    chosen, reason = best(ranked), chosen_because(ranked, failure.check)
    section = assessment_section(question, load, failure, dominant, ranked, chosen, reason) | {"decode_step": decode}
    return Assessment(
        question, replace(result, assessment=section), load, failure, dominant, decode, ranked, chosen, reason
    )


def serving_section(load: ServedLoad, decoder: bool, question: Question, batch: int | None) -> dict:
    """The Serving section at the assessment's load; at the saturation rate, the load without percentiles."""
    if load.run is not None:
        return load.run.section() | {"load": load.section()}
    serving = question.serve.serving  # as serve_model would have batched it (follow_batch: the mapped batch)
    if question.serve.follow_mapped_batch:
        serving = follow_batch(serving, batch, decoder)
    return {
        "policy": "continuous" if decoder else serving.policy,
        "max_batch": serving.max_batch,
        "offered_rate_per_s": load.rate_per_s,
        "capacity_per_s": load.saturation_per_s,
        "requests": 0,
        "load": load.section(),
        "assumptions": [load.sentence()],
    }


def _served(c: Candidate, model, hw, question: Question, load: ServedLoad, dims) -> Candidate:
    """A candidate served at the assessment's load (the latency check's figures), where it fits."""
    if not c.fits or c.kind not in (CandidateKind.PLAN, CandidateKind.SERVING):
        return c
    request = replace(question.serve, serving=replace(question.serve.serving, rate_per_s=load.rate_per_s))
    if c.kind == CandidateKind.SERVING:  # speculative decoding: the same plan, served with its draft
        request = replace(request, speculative=speculative_of(c))
    section = serve_model(model, hw, c.options, request, dims).section()  # a trace, if any, replayed as given
    checks = question.targets.checks(section)
    return replace(c, target_checks=checks, p99_s=section.get("p99_s", section.get("latency_p99_s")))


def assessment_section(question, load, failure, dominant, ranked, chosen, reason) -> dict:
    """The assessment as the document carries it (JSON-ready): every view renders this section."""
    return {
        "question": {
            "rate_per_s": question.serve.serving.rate_per_s if question.rate_given else None,
            "max_batch": None if question.serve.follow_mapped_batch else question.serve.serving.max_batch,
            **question.targets.as_dict(),
            "flags": question_flags(question),
        },
        "load": load.section(),
        "first_failure": {
            "check": failure.check,
            "sentence": failure.sentence,
            "owner": str(failure.owner),
            "kpis_unreachable": failure.kpis_unreachable,
        },
        "dominant": dominant,
        "candidates": [candidate_record(c) for c in ranked],
        "chosen": candidate_record(chosen) if chosen else None,
        "chosen_reason": reason,
    }


def candidate_record(c: Candidate) -> dict:
    return {
        **{f: getattr(c, f) for f in CANDIDATE_FIELDS},
        "changes": c.option_text(),
        "gain_text": c.gain_text(),
        "p99_s": c.p99_s,
        "target_checks": [t.as_dict() for t in c.target_checks],
    }


def question_flags(question: Question) -> list[str]:
    """The flags of `map`, `serve` and `review` that ask this question again (defaults left out)."""
    serving, flags = question.serve.serving, []
    if question.rate_given:
        flags.append(f"--rate={serving.rate_per_s:g}")
    if not question.serve.follow_mapped_batch:
        flags.append(f"--max-batch={serving.max_batch}")
    if serving.max_wait_s:
        flags.append(f"--max-wait-ms={serving.max_wait_s * 1e3:g}")
    for row in TARGET_ROWS:
        value = getattr(question.targets, row.field)
        if value is not None:
            flags.append(f"--{row.flag}={value * 1e3:g}")
    if question.prompt_tokens:
        flags.append(f"--prompt-tokens={question.prompt_tokens}")
    if question.serve.output_tokens != DEFAULT_OUTPUT_TOKENS:
        flags.append(f"--output-tokens={question.serve.output_tokens}")
    if question.requests:
        flags.append(f"--requests={question.requests}")
    if question.serve.load_curve:
        flags.append("--load-curve")
    if question.serve.speculative is not None:
        flags += question.serve.speculative.flags()
    return flags
