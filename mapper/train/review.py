"""A training step's review: the first failure (capacity, where the memory does not fit) with the smallest plan that
fits, and the levers a training team reaches for, each re-mapped for its gain with its owner and rollback boundary.

Above the train stage (`train.step`), in the shape of the inference review (`review.candidates`: a table of
changes, each re-mapped by the engine, never a guessed gain). The smallest fit is searched on the memory alone
(`train.step_memory.plan_memory`: no re-mapping per candidate), fewest devices at the same global batch first, then
the fewest changed options; the plan found is then mapped whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from mapper.core.classes import Owner
from mapper.core.errors import MapperError
from mapper.core.units import format_bytes
from mapper.core.vocab import PlanDtype, Recompute
from mapper.handle import open_model
from mapper.hardware.profile import HardwareProfile
from mapper.train.options import MAX_ZERO_STAGE, TrainOptions
from mapper.train.step import train_step
from mapper.train.step_memory import Holdings, plan_memory
from mapper.train.totals import TrainingResult

# what a fix may change (not CPU offload: the host's optimizer update is not timed, so its plans would look free)
FIT_FIELDS = ("tp", "pp", "dp", "micro_batch", "recompute", "zero")
TP_DEGREES = (1, 2, 4, 8, 16)  # within the NVLink domain (`train.forward.map_forward` refuses more)
MAX_FIT_DEVICES_FACTOR = 16  # the search looks up to 16x the plan's devices


@dataclass(frozen=True, slots=True)
class Lever:
    """One change to the plan, re-mapped: its step, memory and gain, who owns it and how it is undone."""

    change: str  # the flags that differ
    options: TrainOptions
    step_time_s: float
    tokens_per_s_per_device: float
    gain: float  # tokens per second per device over the baseline's, less 1
    per_device_bytes: float
    fits: bool
    owner: Owner
    rollback: str

    @property
    def text(self) -> str:
        fits = "fits" if self.fits else "does not fit"
        return (
            f"step {self.step_time_s:.3g} s, {self.tokens_per_s_per_device:,.0f} tok/s a device ({self.gain:+.1%}),"
            f" {format_bytes(self.per_device_bytes)} a device ({fits})"
        )


@dataclass(frozen=True, slots=True)
class TrainingReview:
    result: TrainingResult
    first_failure: str
    fix: Lever | None  # the smallest plan that fits, where the baseline does not
    levers: tuple[Lever, ...]


def changes(base: TrainOptions, new: TrainOptions) -> str:
    flags = []
    for name in ("tp", "pp", "dp", "cp", "vp", "micro_batch", "recompute", "zero", "dtype", "offload_optimizer",
                 "overlap_grad_reduce"):  # fmt: skip
        a, b = getattr(base, name), getattr(new, name)
        if a != b:
            flags.append(f"--{name.replace('_', '-')} {b}" if not isinstance(b, bool) else f"{name} {b}")
    return " ".join(flags) or "none"


def _lever(model, hw, base: TrainingResult, o: TrainOptions, owner: Owner, rollback: str) -> Lever:
    r = train_step(model, hw, o)
    t = r.totals
    return Lever(
        changes(base.options, o), o, t.step_time_s, t.tokens_per_s_per_device,
        t.tokens_per_s_per_device / base.totals.tokens_per_s_per_device - 1, r.memory.per_device_bytes,
        r.memory.fits, owner, rollback,
    )  # fmt: skip


def _halve_dp(o: TrainOptions, **more) -> TrainOptions | None:
    if o.dp % 2 or (o.global_batch and o.global_batch % (o.micro_batch * o.dp // 2)):
        return None
    return _made(o, dp=o.dp // 2, **more)


def _made(o: TrainOptions, **changed) -> TrainOptions | None:
    try:
        return replace(o, **changed)
    except MapperError:  # a combination the options refuse is no candidate
        return None


PARALLEL_ROLLBACK = "the launch's parallel layout; checkpoints re-sharded at the boundary (distributed checkpoint)"
# (lever, its options from the baseline's (None: not offered), owner, rollback boundary)
LEVERS: tuple[tuple[str, Callable[[TrainOptions, HardwareProfile], TrainOptions | None], Owner, str], ...] = (
    *(
        (
            f"recompute {policy}",
            lambda o, hw, p=policy: _made(o, recompute=p) if o.recompute != p else None,
            Owner.FRAMEWORK,
            "the launch flag (--recompute-granularity); no checkpoint or numerics change",
        )
        for policy in Recompute
    ),
    ("ZeRO + 1", lambda o, hw: _made(o, zero=o.zero + 1) if o.zero < MAX_ZERO_STAGE else None, Owner.FRAMEWORK,
     "the optimizer's sharding; checkpoints re-sharded at the boundary"),
    ("micro-batch x 2", lambda o, hw: _made(o, micro_batch=2 * o.micro_batch), Owner.FRAMEWORK,
     "the launch's micro-batch; the global batch and so the optimization unchanged"),
    ("TP x 2", lambda o, hw: _halve_dp(o, tp=2 * o.tp), Owner.FRAMEWORK, PARALLEL_ROLLBACK),
    ("PP x 2", lambda o, hw: _halve_dp(o, pp=2 * o.pp), Owner.FRAMEWORK, PARALLEL_ROLLBACK),
    ("CP x 2", lambda o, hw: _halve_dp(o, cp=2 * o.cp), Owner.FRAMEWORK, PARALLEL_ROLLBACK),
    ("fp8", lambda o, hw: _made(o, dtype=PlanDtype.FP8) if hw.has_matrix_peak("fp8") and o.dtype != "fp8" else None,
     Owner.ML_COMPILER, "bf16 GEMMs; needs loss-curve evidence against bf16 (Transformer Engine's fp8 recipe)"),
    ("overlap", lambda o, hw: _made(o, overlap_grad_reduce=True) if not o.overlap_grad_reduce else None,
     Owner.RUNTIME, "the launch flag (--overlap-grad-reduce); no numerics change"),
)  # fmt: skip


def _fit_candidates(o: TrainOptions, layers: int, heads: int, node: int):
    """Plans at the same global batch, fewest devices first, then fewest changed options (`FIT_FIELDS`)."""
    sequences = o.sequences
    tps = [t for t in TP_DEGREES if t <= node and heads % t == 0]
    pps = [p for p in range(1, layers + 1) if layers % p == 0]
    dps = [d for d in range(1, sequences + 1) if sequences % d == 0]
    out = []
    for tp, pp, dp in itertools.product(tps, pps, dps):
        devices = tp * pp * dp * o.cp
        if devices > MAX_FIT_DEVICES_FACTOR * o.devices:
            continue
        for mb, recompute, zero in itertools.product(
            [b for b in (1, 2, 4, 8) if (sequences // dp) % b == 0], Recompute, range(MAX_ZERO_STAGE + 1)
        ):
            values = (tp, pp, dp, mb, recompute, zero)
            changed = sum(getattr(o, f) != v for f, v in zip(FIT_FIELDS, values))
            out.append((devices, changed, values))
    out.sort(key=lambda c: (c[0], c[1]))
    return out


def smallest_fit(hw: HardwareProfile, result: TrainingResult) -> TrainOptions | None:
    """The smallest plan whose memory fits (see the module), or None within the search."""
    o, forward = result.options, result.forward
    holdings = Holdings.of(forward, o.tp, result.weight_element_bytes, o.ep)
    for _, _, values in _fit_candidates(o, forward.dims.layers, forward.dims.heads, hw.interconnect.max_devices):
        changed = dict(zip(FIT_FIELDS, values))
        candidate = _made(o, global_batch=o.sequences, **changed)
        if candidate is not None and plan_memory(hw, forward, holdings, candidate).fits:
            return candidate
    return None


def review_training(source, hw: HardwareProfile, options: TrainOptions, levers: bool = False) -> TrainingReview:
    """The step mapped, its first failure and fix, and (`levers`) every lever of `LEVERS` re-mapped."""
    model = open_model(source)
    options = replace(options, global_batch=options.sequences)  # the global batch every lever keeps
    result = train_step(model, hw, options)
    m, fix = result.memory, None
    if not m.fits:
        first = (
            f"capacity: {format_bytes(m.per_device_bytes)} a device on pipeline stage {m.stage} exceeds the"
            f" {format_bytes(m.capacity_bytes)} of {hw.name}"
        )
        found = smallest_fit(hw, result)
        if found is not None:
            fix = _lever(model, hw, result, found, Owner.FRAMEWORK, PARALLEL_ROLLBACK)
        else:
            first += "; no plan within 16x the devices at this global batch fits"
    else:
        top = max(result.layer_shares, key=lambda kv: kv[1])
        first = (
            f"none: the plan fits ({format_bytes(m.per_device_bytes)} of {format_bytes(m.capacity_bytes)}); the"
            f" largest share of the step is {top[0]} ({top[1]:.0%})"
        )
    found_levers = []
    if levers:
        for _, make, owner, rollback in LEVERS:
            candidate = make(options, hw)
            if candidate is None:
                continue
            try:
                found_levers.append(_lever(model, hw, result, candidate, owner, rollback))
            except MapperError:  # a plan the engine refuses (a group beyond a known network): not offered
                continue
    found_levers.sort(key=lambda lever: (not lever.fits, -lever.gain))
    return TrainingReview(result, first, fix, tuple(found_levers))
