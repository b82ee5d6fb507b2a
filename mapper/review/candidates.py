"""Step 4 of a review: candidate fixes for the first mechanism failure, each re-mapped by the engine.

CANDIDATES is the table: the failing check (capacity, latency target) or the dominant bottleneck class
-> rows of plan-option changes, owner, blast-radius rule and the quality evidence and fallback a
precision or sparsity change needs (a precision or sparsity win is never declared without them: the
manual's review section). `propose` re-maps every applicable row on the frozen slice (ranking.py picks the best);
`larger_batches` offers a memory-bound decode step the slice change the table cannot: 2x and 4x its batch.
A decoder whose KV cache is at least half of a step's DRAM bytes is offered its cache in fp8 alone
(`--kv-dtype fp8`, the lever a serving engineer reaches for first); fp8 compute sizes the cache at 1 byte an
element too, and says so in its label. A profile with an FP4 matrix peak (B200) is offered FP4 weights and
activations (NVFP4, else MXFP4) with the 4-bit quality caveat; a decoder keeps its cache in fp8 there, as FP4
checkpoints are served.
review/speculation.py adds a memory-bound decode step's speculative decoding (a serving change).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from mapper.core.classes import Bottleneck, CandidateKind, Owner
from mapper.core.graph import LayerType
from mapper.core.options import PlanOptions
from mapper.core.result import MappingResult
from mapper.core.targets import TargetCheck
from mapper.core.units import format_duration
from mapper.core.vocab import GqaDecode, KvDtype, PlanDtype, Sparsity
from mapper.handle import ModelHandle
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.plan.precision import PLAN_DTYPE_BYTES, SCALED_FORMATS
from mapper.review.blast import blast_radius
from mapper.work.workload import Workload

PRECISION_EVIDENCE = (
    "needs quality evidence (perplexity or accuracy on production data against the unquantized model);"
    " fallback: the baseline precision, kept deployable"
)
SPARSITY_EVIDENCE = (
    "needs accuracy evidence of the 2:4-pruned (and fine-tuned) model on production data;"
    " fallback: the dense weights, kept deployable"
)
KV_EVIDENCE = (
    "needs quality evidence of the model with its KV cache in fp8 (scales calibrated on production prompts;"
    " long-context accuracy against the unquantized cache); fallback: the cache at the compute precision"
)
FP4_EVIDENCE = (
    "needs quality evidence of the model in 4-bit floats (block scales calibrated on production data, or"
    " quantization-aware training; perplexity or accuracy against the unquantized model, sensitive layers kept"
    " wider); fallback: fp8 or the baseline precision, kept deployable"
)
NO_GAIN = 0.0
KV_CACHE_TOO = " (activations and KV cache in fp8)"  # what fp8 compute stores in fp8 on a decoder
FP4_KV_CACHE = " (KV cache in fp8)"  # what the FP4 candidate keeps a decoder's cache in
FP4_FORMATS = (PlanDtype.NVFP4, PlanDtype.MXFP4)  # the FP4 candidate's format: the first the profile has a peak for
BATCH_FACTORS = (2, 4)  # a memory-bound decode step's slice candidates: its weights read once for 2x, 4x the tokens


@dataclass(frozen=True, slots=True)
class Context:
    """What a row reads to decide its changes: the baseline's options, its document and the device."""

    options: PlanOptions
    doc: dict
    hardware: HardwareProfile
    decoder: bool


Changes = Callable[[Context], dict | None]  # None: the row does not apply here


NO_CHANGE = 0.005  # a gain under half a percent reads "no change" (the figures print to the percent)


def gain_text(gain: float, kpi: str) -> str:
    """A gain as people read it: a latency gain as a speed-up and the time it saves ("2.25x faster: latency
    -56%"), never "+125% on latency"; a throughput gain as its change ("+272% throughput per device")."""
    if kpi.startswith("throughput"):
        return f"{gain:+.0%} {kpi}"
    if gain <= -1 or abs(gain) < NO_CHANGE:
        return f"no change on {kpi}" if gain > -1 else f"{kpi}: no gain"
    ratio, change = 1 + gain, -gain / (1 + gain)
    return f"{ratio:.2f}x faster: {kpi} {change:+.0%}" if gain > 0 else f"{1 / ratio:.2f}x slower: {kpi} {change:+.0%}"


@dataclass(frozen=True, slots=True)
class CandidateRow:
    label: str
    changes: Changes
    owner: Owner
    blast: str  # a BLAST_RULES key: which kernels the change touches
    evidence: str = ""  # the quality evidence and fallback it needs ("" for none)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One proposed fix, re-mapped on the frozen slice."""

    label: str
    changes: tuple[tuple[str, object], ...]  # plan-option field -> new value
    options: PlanOptions
    owner: str
    blast_kernels: int
    blast_layer_types: tuple[str, ...]
    blast_rule: str
    evidence: str
    latency_s: float
    gain: float  # baseline latency / candidate latency - 1 on the primary KPI (positive: faster)
    fits: bool
    caveats: tuple[str, ...]
    p99_s: float | None = None  # the request latency p99 at the assessment's load (a latency target's check)
    kind: CandidateKind = CandidateKind.PLAN
    slice_changes: tuple[tuple[str, int], ...] = ()  # dim -> new value (CandidateKind.SLICE)
    serving_changes: tuple[tuple[str, object], ...] = ()  # serving flag -> value (SERVING: speculation)
    kpi: str = "latency"  # what `gain` is measured on
    cost: str = ""  # what the change costs on another KPI (a larger batch's TPOT)
    per_device_bytes: float = 0.0  # memory it needs per device (against capacity_bytes)
    capacity_bytes: float = 0.0
    target_checks: tuple[TargetCheck, ...] = ()  # each latency target at the assessment's load (latency check)
    fixes: bool = False  # clears the failing check (ranking.judge)
    rejected: str = ""  # why it cannot be chosen ("" : it can)

    def gain_text(self) -> str:
        return gain_text(self.gain, self.kpi)

    def option_text(self) -> str:
        pairs = {CandidateKind.PLAN: self.changes, CandidateKind.SERVING: self.serving_changes}.get(
            self.kind, self.slice_changes
        )
        return ",".join(f"{k}={option_value(v)}" for k, v in pairs)


def option_value(value) -> str:
    """How a plan option is written on the command line (`--fix KEY=VALUE`, attention_fusion on/off)."""
    return (
        {True: "on", False: "off", None: "auto"}.get(value, str(value))
        if isinstance(value, bool | None)
        else str(value)
    )


def _set(**changes) -> Changes:
    def apply(ctx: Context) -> dict | None:
        todo = {k: v for k, v in changes.items() if getattr(ctx.options, k) != v}
        return todo or None

    return apply


def _weights(dtype: str) -> Changes:
    """Weight-only quantization of a decoder, except on a plan computing in a block-scaled format (its weights are
    in that format already: no kernel feeds integer weights to an FP4 or MX matrix instruction)."""

    def apply(ctx: Context) -> dict | None:
        scaled = ctx.doc["totals"]["dtype"] in SCALED_FORMATS
        return {"weight_dtype": dtype} if ctx.decoder and ctx.options.weight_dtype != dtype and not scaled else None

    return apply


def _dtype(dtype: str) -> Changes:
    def apply(ctx: Context) -> dict | None:
        current = ctx.doc["totals"]["dtype"]
        return {"dtype": dtype} if current != dtype and ctx.hardware.has_matrix_peak(dtype) else None

    return apply


def _fp4(ctx: Context) -> dict | None:
    """FP4 weights and activations where the profile has an FP4 matrix peak and the plan is wider; a decoder's
    cache, at the plan's width now, is kept in fp8 (an FP4 checkpoint's usual serving: FP8 KV cache)."""
    fmt = next((f for f in FP4_FORMATS if ctx.hardware.has_matrix_peak(f)), None)
    if fmt is None or PLAN_DTYPE_BYTES[ctx.doc["totals"]["dtype"]] <= PLAN_DTYPE_BYTES[fmt]:
        return None
    keep_cache = ctx.decoder and ctx.options.kv_dtype == KvDtype.SAME
    return {"dtype": fmt} | ({"kv_dtype": KvDtype.FP8} if keep_cache else {})


DECODE_ATTENTION_ROW = "runtime.decode_attention"  # the assumptions row saying how decode attention runs GQA heads
KV_DOMINANT_SHARE = 0.5  # the KV cache's share of a step's DRAM bytes at which its precision is offered


def _kv_fp8(ctx: Context) -> dict | None:
    """The KV cache stored in fp8, where it is the larger part of what a decode step reads and is wider now."""
    kv, total = (ctx.doc.get("memory") or {}).get("kv_cache_bytes", 0.0), ctx.doc["totals"]["dram_bytes"]
    fp8 = PLAN_DTYPE_BYTES[KvDtype.FP8]  # narrower than the cache now: the compute's width, the same rule as its caveat
    wider = ctx.options.kv_dtype == KvDtype.SAME and PLAN_DTYPE_BYTES[ctx.doc["totals"]["dtype"]] > fp8
    return {"kv_dtype": "fp8"} if ctx.decoder and wider and total and kv >= KV_DOMINANT_SHARE * total else None


def _gqa_packed(ctx: Context) -> dict | None:
    """Grouped-query decode attention with a K/V head's query heads packed into one kernel's rows, where the plan
    runs one work item per query head (`--gqa-decode per-head`, or a runtime preset that does) on a GQA model."""
    grouped = any((k.get("query_heads_per_kv") or 1) > 1 for k in ctx.doc["kernels"])
    mode = next((a["value"] for a in ctx.doc["assumptions"] if a["name"] == DECODE_ATTENTION_ROW), None)
    return {"gqa_decode": "packed"} if ctx.decoder and grouped and mode == GqaDecode.PER_HEAD else None


def _sparse(ctx: Context) -> dict | None:
    dtype = ctx.doc["totals"]["dtype"]
    ok = ctx.options.sparsity != Sparsity.TWO_FOUR and dtype in ctx.hardware.sparse_matrix_peak_flops_per_s
    return {"sparsity": "2:4"} if ok else None


def _smallest_fit(ctx: Context) -> dict | None:
    fit = (ctx.doc.get("memory") or {}).get("smallest_fit")
    return {"tp": fit["tp"], "pp": fit["pp"]} if fit else None


def _lower_tp(ctx: Context) -> dict | None:
    return {"tp": ctx.options.tp // 2} if ctx.options.tp > 1 else None


def _more_replicas(ctx: Context) -> dict | None:
    return {"dp": ctx.options.dp * 2}


def _attention_on(ctx: Context) -> dict | None:
    """Fused attention, where the model has attention kernels and the plan does not fuse them yet."""
    attention = any(k["layer_type"] == LayerType.ATTENTION for k in ctx.doc["kernels"])
    return {"attention_fusion": True} if attention and ctx.options.attention_fusion is not True else None


CAPACITY = "capacity"
LATENCY_TARGET = "latency target"
# The failing check or class -> its rows, in the order a review tries them (ties in gain keep this order).
CANDIDATES: dict[str, tuple[CandidateRow, ...]] = {
    CAPACITY: (
        CandidateRow("shard over the smallest TP x PP that fits", _smallest_fit, Owner.RUNTIME, "weight GEMMs"),
        CandidateRow("int4 weights", _weights("int4"), Owner.ML_COMPILER, "weight GEMMs", PRECISION_EVIDENCE),
        CandidateRow("int8 weights", _weights("int8"), Owner.ML_COMPILER, "weight GEMMs", PRECISION_EVIDENCE),
    ),
    LATENCY_TARGET: (
        CandidateRow("one more data-parallel replica", _more_replicas, Owner.RUNTIME, "every kernel"),
        CandidateRow("packed GQA decode attention", _gqa_packed, Owner.RUNTIME, "attention kernels"),
        CandidateRow("fp8 KV cache", _kv_fp8, Owner.RUNTIME, "attention kernels", KV_EVIDENCE),
        CandidateRow("int4 weights", _weights("int4"), Owner.ML_COMPILER, "weight GEMMs", PRECISION_EVIDENCE),
        CandidateRow("fp8 compute", _dtype("fp8"), Owner.ML_COMPILER, "every kernel", PRECISION_EVIDENCE),
        CandidateRow("FP4 weights and activations", _fp4, Owner.ML_COMPILER, "every kernel", FP4_EVIDENCE),
    ),
    Bottleneck.MEMORY: (
        CandidateRow("fp8 KV cache", _kv_fp8, Owner.RUNTIME, "attention kernels", KV_EVIDENCE),
        CandidateRow("packed GQA decode attention", _gqa_packed, Owner.RUNTIME, "attention kernels"),
        CandidateRow("int4 weights", _weights("int4"), Owner.ML_COMPILER, "weight GEMMs", PRECISION_EVIDENCE),
        CandidateRow("int8 weights", _weights("int8"), Owner.ML_COMPILER, "weight GEMMs", PRECISION_EVIDENCE),
        CandidateRow("fp8 compute", _dtype("fp8"), Owner.ML_COMPILER, "every kernel", PRECISION_EVIDENCE),
        CandidateRow("FP4 weights and activations", _fp4, Owner.ML_COMPILER, "every kernel", FP4_EVIDENCE),
        CandidateRow("fused attention", _attention_on, Owner.ML_COMPILER, "attention kernels"),
        CandidateRow("aggressive fusion", _set(fusion="aggressive"), Owner.ML_COMPILER, "memory-bound kernels"),
        CandidateRow("2:4 sparse weights", _sparse, Owner.ML_COMPILER, "weight GEMMs", SPARSITY_EVIDENCE),
    ),
    Bottleneck.COMPUTE_MATRIX: (
        CandidateRow("bf16 compute", _dtype("bf16"), Owner.ML_COMPILER, "matrix kernels", PRECISION_EVIDENCE),
        CandidateRow("fp8 compute", _dtype("fp8"), Owner.ML_COMPILER, "matrix kernels", PRECISION_EVIDENCE),
        CandidateRow("FP4 weights and activations", _fp4, Owner.ML_COMPILER, "matrix kernels", FP4_EVIDENCE),
        CandidateRow("2:4 sparse weights", _sparse, Owner.ML_COMPILER, "weight GEMMs", SPARSITY_EVIDENCE),
    ),
    Bottleneck.COMPUTE_VECTOR: (
        CandidateRow("fused attention", _attention_on, Owner.ML_COMPILER, "attention kernels"),
        CandidateRow("aggressive fusion", _set(fusion="aggressive"), Owner.ML_COMPILER, "vector kernels"),
    ),
    Bottleneck.OCCUPANCY: (
        CandidateRow("packed GQA decode attention", _gqa_packed, Owner.RUNTIME, "attention kernels"),
        CandidateRow("aggressive fusion", _set(fusion="aggressive"), Owner.ML_COMPILER, "occupancy-bound kernels"),
        CandidateRow("2:4 sparse weights", _sparse, Owner.ML_COMPILER, "weight GEMMs", SPARSITY_EVIDENCE),
    ),
    Bottleneck.ALIGNMENT: (),  # the fix is the model's shapes (the class's row says how), not a plan option
    Bottleneck.LAUNCH: (
        CandidateRow("CUDA graph replay", _set(launch="graph"), Owner.RUNTIME, "every kernel"),
        CandidateRow("aggressive fusion", _set(fusion="aggressive"), Owner.ML_COMPILER, "launch-bound kernels"),
    ),
    Bottleneck.SYNCHRONIZATION: (
        CandidateRow("aggressive fusion", _set(fusion="aggressive"), Owner.ML_COMPILER, "synchronization kernels"),
    ),
    Bottleneck.INTERCONNECT: (
        CandidateRow("overlap collectives", _set(overlap_collectives=True), Owner.RUNTIME, "collectives"),
        CandidateRow("halve the TP degree", _lower_tp, Owner.RUNTIME, "collectives"),
    ),
    Bottleneck.HOST: (),
}


def remap(
    label: str, changes: dict, row: CandidateRow | None, base: tuple[Workload, HardwareProfile, PlanOptions], doc: dict
) -> Candidate:
    """Map the frozen slice with the changes applied and measure the gain against the baseline."""
    workload, hardware, options = base
    new = replace(options, **changes)
    result: MappingResult = map_workload(workload, hardware, new)
    rule = row.blast if row else "every kernel"
    kernels, layer_types = blast_radius(rule, doc)
    latency = result.totals.latency_s
    gain = doc["totals"]["latency_s"] / latency - 1 if latency > 0 else NO_GAIN
    order = [f.name for f in fields(PlanOptions)]
    return Candidate(
        label=label,
        changes=tuple(sorted(changes.items(), key=lambda kv: order.index(kv[0]))),
        options=new,
        owner=str(row.owner if row else Owner.PERFORMANCE_MODELING),
        blast_kernels=kernels,
        blast_layer_types=layer_types,
        blast_rule=rule,
        evidence=row.evidence if row else "",
        latency_s=latency,
        gain=gain,
        fits=result.memory.fits,
        caveats=tuple(c for c in result.caveats if c not in doc["caveats"]),
        per_device_bytes=result.memory.per_device_bytes,
        capacity_bytes=result.memory.capacity_bytes,
    )


def rows_for(check: str, dominant: str) -> tuple[CandidateRow, ...]:
    """The failing check's rows, then the dominant class's (a capacity failure still has a bottleneck)."""
    rows = CANDIDATES.get(check, ()) + CANDIDATES.get(dominant, ())
    return tuple({(r.label, r.blast): r for r in rows}.values())


def propose(
    check: str,
    dominant: str,
    base: tuple[Workload, HardwareProfile, PlanOptions],
    doc: dict,
    decoder: bool,
    decode: bool = False,
) -> tuple[Candidate, ...]:
    """Every applicable row re-mapped, in table order (ranking.rank orders them for the review)."""
    ctx = Context(base[2], doc, base[1], decoder)
    out, seen = [], []
    kpi = "TPOT" if decode else "latency"  # a decode step's latency is the time per output token
    for row in rows_for(check, dominant):
        changes = row.changes(ctx)
        if changes and changes not in seen:  # two rows may ask for the same change (fp8 for two reasons)
            seen.append(changes)
            label = f"{row.label}{_label_tail(changes, decoder)}"
            out.append(replace(remap(label, changes, row, base, doc), kpi=kpi))
    return tuple(out)


def _label_tail(changes: dict, decoder: bool) -> str:
    """What a precision change also stores narrower on a decoder, said in its label."""
    if not decoder or "dtype" not in changes:
        return ""
    if changes.get("kv_dtype") == KvDtype.FP8:
        return FP4_KV_CACHE
    return KV_CACHE_TOO if changes["dtype"] == PlanDtype.FP8 else ""


def larger_batches(model: ModelHandle, dims: dict[str, int], base: tuple, doc: dict) -> tuple[Candidate, ...]:
    """A memory-bound decode step at 2x and 4x its batch: the same weights read once for more tokens.
    The gain is throughput per device; the cost, the longer step (TPOT) every sequence of the batch waits."""
    batch_name = next((n for n, r in model.roles.items() if r == "batch"), None)
    if batch_name is None:
        return ()
    _, hardware, options = base
    tpot, throughput = doc["totals"]["latency_s"], doc["totals"]["throughput_per_s"]
    out = []
    for factor in BATCH_FACTORS:
        batch = dims[batch_name] * factor
        result = map_workload(model.bind({**dims, batch_name: batch}), hardware, options)
        t = result.totals
        cost = f"TPOT {t.latency_s / tpot - 1:+.0%} ({format_duration(tpot)} -> {format_duration(t.latency_s)})"
        out.append(
            offered(
                doc,
                options,
                label=f"{factor}x batch (batch {batch})",
                evidence="",
                latency_s=t.latency_s,
                gain=t.throughput_per_s / throughput - 1 if throughput > 0 else NO_GAIN,
                fits=result.memory.fits,
                caveats=tuple(c for c in result.caveats if c not in doc["caveats"]),
                per_device_bytes=result.memory.per_device_bytes,
                capacity_bytes=result.memory.capacity_bytes,
                kind=CandidateKind.SLICE,
                slice_changes=((batch_name, batch),),
                kpi="throughput per device",
                cost=cost,
            )
        )
    return tuple(out)


def offered(doc: dict, options: PlanOptions, **fields) -> Candidate:
    """A candidate beside the table: a slice or serving change on the same plan, owned by the runtime systems
    engineer, whose blast radius is every kernel of the baseline (`doc`); `fields`: the rest of its Candidate."""
    kernels, layer_types = blast_radius("every kernel", doc)
    return Candidate(
        changes=(),
        options=options,
        owner=str(Owner.RUNTIME),
        blast_kernels=kernels,
        blast_layer_types=layer_types,
        blast_rule="every kernel",
        **fields,
    )
