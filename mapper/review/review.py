"""A review in the five steps of the meeting (docs/manual.md, "The review meeting"): the frozen slice and its
KPIs, the first mechanism failure, the artifact that proves it, a bounded fix with an owner (proposed
by candidates.py and re-mapped), and the validation matrix with its rollback boundary (matrix.py).

`run_review` is what the Review page and `mapper review` both run; packet.py writes its result.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime

from mapper.core.classes import OWNERS, CandidateKind, Owner, TargetKind
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.core.result import MappingResult
from mapper.core.version import __version__
from mapper.evidence.compare import compare_measured
from mapper.evidence.measure import measurement_from_profile
from mapper.evidence.profiles import read_bounded
from mapper.explore.compare_inputs import PlanSpec, plan_spec
from mapper.handle import open_model
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.report.document import mapping_document
from mapper.report.verdict import Finding
from mapper.review import steps
from mapper.review.assessment import Assessment, assess_slice, question_flags
from mapper.review.candidates import Candidate, option_value, remap
from mapper.review.first_slice import Target, first_failing_slice
from mapper.review.matrix import Grid, Validation, default_grid, validate_fix
from mapper.review.ranking import judge
from mapper.serve.question import Question

UPLOADED = "(uploaded)"  # the model source of bytes uploaded without a file name
UPLOADED_FILE = "upload.onnx"  # the file name a packet gives bytes uploaded without one


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    model: str | bytes  # a built-in name, a path, or uploaded bytes
    dims: dict[str, int]  # the frozen slice's bindings (completed from the model's defaults)
    hardware: HardwareProfile
    options: PlanOptions = PlanOptions()
    question: Question = field(default_factory=Question)  # the load and the latency targets (mapper.serve.question)
    fix: str = ""  # KEY=VALUE[,KEY=VALUE] plan options; "": the best proposed fix
    owner: str = ""  # "" : the fix's own owner
    note: str = ""
    grid: Grid | None = None  # None: half, same and double batch and length around the frozen slice
    target: Target | None = None  # the first failing slice's KPI target (None: memory fit)
    max_length: int = 0  # the first failing slice's cap on the length axis (0: the model's own maximum context)
    file_name: str = ""  # the uploaded model's file name ("" for built-ins and paths)
    created_utc: str = ""  # pinned into every file (reproduce.sh passes it); "": now
    trace: str | bytes = ""  # a run of the slice: a PyTorch trace, an Nsight export or an ORT profile (path or bytes)
    trace_name: str = ""  # an uploaded trace's file name ("" for paths)


@dataclass(frozen=True, slots=True)
class Review:
    request: ReviewRequest
    assessment: Assessment  # steps 1, 2 and 4 as every view shows them (mapper.review.assessment)
    created_utc: str
    frozen: dict  # step 1: the slice as provenance (hashes, dims, options, engine version)
    kpis: dict
    failure: Finding  # step 2
    dominant: str
    mechanism: str
    behind: list[dict]
    artifact: dict  # step 3
    candidates: tuple[Candidate, ...]  # step 4, best first
    chosen: Candidate | None
    chosen_reason: str  # "chosen because ..." (ranking.RANKING), or the user's --fix
    owner: str
    follow_ups: list[dict]
    validation: Validation | None  # step 5
    first_slice: dict
    baseline: MappingResult = field(repr=False)
    fixed: MappingResult | None = field(repr=False)
    trace_file: dict | None = None  # the attached trace: name beside reproduce.sh, sha256, its summary


def fix_changes(text: str, request: ReviewRequest) -> dict:
    """ "weight_dtype=int4,tp=2" -> the plan-option fields it changes (validated as `mapper compare`'s plans)."""
    spec = plan_spec(text, request.model, request.hardware, request.options)
    if spec.model != request.model or spec.hardware is not request.hardware:
        raise MapperError("a fix changes plan options only: leave model= and hw= out of --fix")
    return {
        f.name: getattr(spec.options, f.name)
        for f in fields(PlanOptions)
        if getattr(spec.options, f.name) != getattr(request.options, f.name)
    }


def _choose(request: ReviewRequest, assessment: Assessment, base) -> tuple[Candidate | None, str]:
    """The user's --fix (re-mapped and judged like any candidate), else the assessment's choice."""
    if not request.fix:
        return assessment.chosen, assessment.chosen_reason
    changes = fix_changes(request.fix, request)
    if not changes:
        raise MapperError(f"fix {request.fix!r} changes no plan option of the baseline")
    check = assessment.failure.check
    same = next((c for c in assessment.candidates if c.kind == CandidateKind.PLAN and dict(c.changes) == changes), None)
    mine = same or judge((remap("your fix", changes, None, base, assessment.document()),), check)[0]
    return mine, "chosen by you (--fix)" + (f"; note: it {mine.rejected}" if mine.rejected else "")


def run_review(request: ReviewRequest, progress=None, assessment: Assessment | None = None) -> Review:
    """The five steps on the frozen slice (see the module docstring). `assessment`: the slice's assessment where
    the caller holds it (the dashboard's, cached), else assessed here: the same function, the same answer."""
    if request.owner and request.owner not in OWNERS:
        raise MapperError(f"owner {request.owner!r} must be one of: {', '.join(OWNERS)}")
    created = request.created_utc or datetime.now(UTC).isoformat(timespec="seconds")
    model = open_model(request.model, file_name=request.file_name or None)
    dims = dict(model.bind(request.dims).graph.dims)
    hw = request.hardware
    if assessment is None:
        assessment = assess_slice(model, dims, hw, request.options, request.question, created)
    baseline = replace(assessment.result, created_utc=created)
    trace_file = None
    if request.trace:  # the proving artifact from a real run: the trace scored against the slice's own plan
        measured, trace_file = trace_evidence(request, baseline, model_source(model, request.file_name), created)
        baseline = replace(baseline, measured=measured)
    doc = mapping_document(baseline)
    failure, dominant = assessment.failure, assessment.dominant
    chosen, reason = _choose(request, assessment, (model.bind(dims), hw, request.options))
    fixed = _fixed(model.bind(dims), hw, chosen, created)
    validation = None
    if chosen is not None:
        source = model.source if model.builtin else model.data  # a file and its upload: the same bytes, one text
        grid = request.grid or default_grid(dims, model.roles)
        plans = (PlanSpec(source, hw, request.options), PlanSpec(source, hw, chosen.options))
        validation = validate_fix(*plans, grid, dims, model.roles)
    source = model_source(model, request.file_name)
    return Review(
        request=request,
        assessment=assessment,
        created_utc=created,
        frozen=frozen_slice(baseline, model, request.file_name),
        kpis=steps.kpis(doc, assessment.question.targets, assessment.decode),
        failure=failure,
        dominant=dominant,
        mechanism=steps.mechanism(doc, failure, hw, assessment.decode),
        behind=steps.behind(doc, dominant),
        artifact=steps.artifact(doc, dominant),
        candidates=assessment.candidates,
        chosen=chosen,
        chosen_reason=reason,
        owner=request.owner or (chosen.owner if chosen else failure.owner),
        follow_ups=follow_ups(doc, dominant, "MODEL.onnx" if source == UPLOADED else source, hw.name),
        validation=validation,
        first_slice=first_failing_slice(
            model, dims, hw, request.options, request.target or Target(TargetKind.FIT), request.max_length
        ),
        baseline=baseline,
        fixed=fixed,
        trace_file=trace_file,
    )


def trace_file_name(request: ReviewRequest, raw: bytes) -> str:
    """What names the trace beside reproduce.sh: a path's or an upload's file name (never its folder), else a name
    of its kind."""
    given = request.trace_name if isinstance(request.trace, bytes) else str(request.trace)
    name = re.split(r"[\\/]", given)[-1]
    if name in ("", ".", "..") or not re.fullmatch(r"[A-Za-z0-9_.+-]{1,120}", name):
        name = "trace.sqlite" if raw.startswith(b"SQLite format 3\x00") else "trace.json"
    return name


def trace_evidence(request: ReviewRequest, baseline: MappingResult, source: str, created: str) -> tuple[dict, dict]:
    """The trace's Measured section (compare_measured against the baseline: the plan the slice ran) and the file
    record the packet carries (name, sha256, summary). Pinned to the review's date and named by file name only, so
    a rebuild beside reproduce.sh writes the same bytes."""
    raw, _label = read_bounded(request.trace)
    measurement = replace(
        measurement_from_profile(request.trace, request.model, baseline.model_name),
        created_utc=created,
        source=source,
    )
    summary = measurement.trace or {"runtime": measurement.provider, "runs": len(measurement.latencies_s)}
    record = {"name": trace_file_name(request, raw), "sha256": hashlib.sha256(raw).hexdigest(), "summary": summary}
    return compare_measured(baseline, measurement), record


def _fixed(workload, hw, chosen: Candidate | None, created: str) -> MappingResult | None:
    if chosen is None:
        return None
    return replace(map_workload(workload, hw, chosen.options), created_utc=created)


def model_source(model, file_name: str) -> str:
    """What names the model in the packet, the same when reproduce.sh rebuilds it beside the file: a built-in's
    name, a file's name (never its folder), an upload's file name, else "upload.onnx" (a file of that name opens
    as a model named "upload", as the bytes were)."""
    if model.builtin:
        return model.source
    name = re.split(r"[\\/]", model.source or file_name)[-1]  # a browser may send C:\dir\name.onnx
    return UPLOADED_FILE if name in ("", ".", "..") else name


def frozen_slice(result: MappingResult, model, file_name: str = "") -> dict:
    return {
        "model": result.model_name,
        "model_source": model_source(model, file_name),
        "model_sha256": result.model_sha256,
        "dims": dict(result.dims),
        "hardware": result.hardware_name,
        "hardware_sha256": result.hardware_sha256,
        "options": asdict(result.options),
        "engine_version": __version__,
    }


def follow_ups(doc: dict, dominant: str, model: str, hw: str) -> list[dict]:
    """What the performance modeling owner signs: measure the slice, calibrate the profile's assumptions."""
    owner = str(Owner.PERFORMANCE_MODELING)
    return [
        {
            "owner": owner,
            "action": "measure the frozen slice and compare it with this prediction"
            f" (`mapper measure -- {shlex.quote(model)}` on a machine that runs it, or score a profile made there"
            " with --profile)",
        },
        {
            "owner": owner,
            "action": f"calibrate {hw}'s efficiency curves behind the {dominant or 'dominant'} kernels"
            f" (`mapper calibrate --hw={shlex.quote(hw)} --on={shlex.quote(model)} --out=calibrated.toml`)"
            " and re-run the review on it",
        },
    ]


def option_flags(options: PlanOptions) -> list[str]:
    """The `mapper map` flags that give these plan options (defaults left out)."""
    flags: list[str] = []
    for f in fields(PlanOptions):
        value, default = getattr(options, f.name), f.default
        if value == default:
            continue
        name = "--" + f.name.replace("_", "-")
        if f.name == "overlap_collectives":
            flags.append(name)
        else:
            flags += [name, option_value(value)]
    return flags


def review_flags(review: Review, hw_arg: str) -> list[str]:
    """The `mapper review` flags that rebuild this review's packet byte for byte, the model argument aside. Free text
    and names are written as --flag=value, so no value can be read as an option."""
    r = review.request
    args = [f"--hw={hw_arg}"]
    for name, value in sorted(review.frozen["dims"].items()):
        args.append(f"--dim={name}={value}")
    args += option_flags(r.options)
    args += question_flags(r.question)
    if r.fix and review.chosen is not None:  # the default pick re-derives itself (and keeps its reason)
        args += ["--fix", review.chosen.option_text()]
    if r.owner:
        args.append(f"--owner={r.owner}")
    if r.note:
        args.append(f"--note={r.note}")
    if r.target is not None:
        args += ["--target", _target_text(r.target)]
    if r.max_length:
        args += ["--max-length", str(r.max_length)]
    if review.trace_file is not None:
        args.append(f"--trace=./{review.trace_file['name']}")
    if r.grid is not None:
        args += ["--matrix-batch", ",".join(map(str, r.grid.batches))]
        if r.grid.axis:
            args += ["--matrix-length", ",".join(map(str, r.grid.lengths))]
    return [*args, f"--created-utc={review.created_utc}"]


def _target_text(target: Target) -> str:
    return (
        "fit"
        if target.kind == TargetKind.FIT
        else f"{target.kind}={target.value * 1e3 if target.kind == TargetKind.P99 else target.value:g}"
    )
