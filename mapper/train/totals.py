"""A training step's totals: the pipeline's time, what data parallelism leaves exposed, the optimizer, the memory,
and the step's MFU and HFU under a stated FLOP convention.

Last part of the train stage (`train.step` gives each stage's costed micro-batch, `StageWork`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mapper.core.graph import LayerType
from mapper.core.result import Kernel
from mapper.core.vocab import Collective, Engine, KernelRule, Phase
from mapper.cost.estimate import estimate_cost
from mapper.hardware.profile import HardwareProfile
from mapper.hardware.target import Target
from mapper.ops.backward import ATTENTION_BACKWARD_FLOPS
from mapper.train.forward import Forward
from mapper.train.memory import TrainMemory
from mapper.train.optimizer import optimizer_kernels
from mapper.train.options import TrainOptions
from mapper.train.parallel import GradientSync, bubble_share, gradient_sync, group_time, pipeline_time
from mapper.train.step_memory import Holdings, plan_memory, stage_counts

FLOP_CONVENTION = (
    "model FLOPs = 3 x the forward's matrix FLOPs (each weight GEMM's 2 x parameters x tokens, the LM head"
    " included and the embedding lookup not: 6N over the GEMMs' parameters) plus attention's two matmuls on the"
    " causal triangle (3 x; FlashAttention's skipped blocks not counted); HFU adds the recomputed forward's"
    " matrix FLOPs and FlashAttention-2's backward recompute of the scores (0.5 x its forward)"
)


OFFLOAD_CAVEAT = (
    "optimizer state offloaded: the host's AdamW update and the gradients' and parameters' trips over the host"
    " link are not timed (the step counts only the gradient norm on the device); treat its step time as a floor"
)


@dataclass(slots=True)
class StageWork:
    """One pipeline stage's micro-batch, summed while the kernels are read (then read only)."""

    stage: int
    phase_s: dict[Phase, float] = field(default_factory=dict)
    layer_type_s: dict[str, float] = field(default_factory=dict)
    collective_s: float = 0.0  # tensor-parallel (and expert all-to-all) collectives on the stream
    model_flops: float = 0.0  # forward matrix FLOPs of the whole model's share on this stage
    recompute_flops: float = 0.0
    flash_flops: float = 0.0  # the whole model's fused attention forward matrix FLOPs (its backward recomputes S)
    attention_s: float = 0.0  # the forward's attention kernels (what ring attention's passing hides under)
    parameters: float = 0.0  # on one device of the stage
    layer_parameters: float = 0.0
    whole_parameters: float = 0.0
    stall_s: float = (
        0.0  # the kernels' memory-stalled time  # the model's parameters on this stage (bytes, every TP rank's)
    )

    @staticmethod
    def empty(stage: int) -> StageWork:
        return StageWork(stage)

    def add(self, k: Kernel, phase: Phase, time_s: float, whole: float, stall_s: float) -> None:
        """A kernel's time (`stall_s` of it memory-stalled: `schedule.rollup`'s definition) and FLOPs; `whole`: how
        many devices' share of the model's work its FLOPs are (TP ranks that split it, x CP)."""
        self.phase_s[phase] = self.phase_s.get(phase, 0.0) + time_s
        self.stall_s += stall_s
        kind = str(k.layer_type)
        self.layer_type_s[kind] = self.layer_type_s.get(kind, 0.0) + time_s
        if k.engine == Engine.INTERCONNECT:
            self.collective_s += time_s
        if phase == Phase.FORWARD:
            self.model_flops += k.matrix_flops * whole
            if k.layer_type == LayerType.ATTENTION and k.matrix is not None:
                self.attention_s += time_s
            if k.rule == KernelRule.FLASH_ATTENTION:
                self.flash_flops += k.matrix_flops * whole
        elif phase == Phase.RECOMPUTE:
            self.recompute_flops += k.matrix_flops * whole

    @property
    def micro_batch_s(self) -> float:
        return sum(self.phase_s.values())


@dataclass(frozen=True, slots=True)
class TrainTotals:
    step_time_s: float
    tokens_per_step: int
    tokens_per_s_per_device: float
    mfu: float
    hfu: float
    model_flops: float  # a step's, whole model (FLOP_CONVENTION)
    hardware_flops: float
    peak_flops_per_s: float  # a device's, at the step's precision
    bubble_share: float
    exposed_communication_share: float  # DP exposed + pipeline sends + ring attention's exposed passing
    tensor_parallel_share: float  # TP collectives on the stream
    recompute_share: float
    optimizer_share: float
    memory_stall_fraction: float
    dtype: str
    flop_convention: str = FLOP_CONVENTION


@dataclass(frozen=True, slots=True)
class TrainingResult:
    """A training step on a device plan: what `mapper train` prints and its `--json`."""

    model_name: str
    hardware_name: str
    options: TrainOptions
    parameters: float  # the model's, whole
    totals: TrainTotals
    memory: TrainMemory
    sync: GradientSync
    micro_batch_s: tuple[tuple[str, float], ...]  # the slowest stage's micro-batch by phase
    layer_shares: tuple[tuple[str, float], ...]  # the step's time by layer type (and bubble, DP, optimizer)
    stage_times_s: tuple[float, ...]  # each stage's micro-batch
    assumptions: tuple[str, ...]
    forward: Forward
    weight_element_bytes: float  # a weight element at the step's precision


def _p2p_s(hw: HardwareProfile, forward: Forward, o: TrainOptions) -> float:
    """A micro-batch's pipeline sends on a stage: its activations forward and their gradient back, each
    b x s x h at 16 bits (over tp with sequence parallelism), v times with virtual stages."""
    if o.pp <= 1:
        return 0.0
    split = o.tp if o.sequence_parallel else 1
    message = 2.0 * o.micro_batch * (o.seq // o.cp) * forward.dims.hidden / split
    return 2 * o.vp * group_time(hw, Collective.P2P, 2, o.tp * o.cp * o.dp, message)


def _ring_s(hw: HardwareProfile, forward: Forward, o: TrainOptions, attention_s: float, layers: int) -> float:
    """Ring attention's exposed K/V passing on a stage's micro-batch: cp - 1 passes of a chunk's K and V a layer
    forward, K, V, dK and dV backward, under the attention it overlaps (forward 1x, backward 2.5x)."""
    if o.cp <= 1:
        return 0.0
    chunk = 2 * 2.0 * o.micro_batch * (o.seq // o.cp) * forward.dims.kv_width / o.tp  # K and V, 16-bit
    one = group_time(hw, Collective.P2P, 2, o.tp, chunk)
    per_layer_attention = attention_s / max(layers, 1)
    ahead = max((o.cp - 1) * one - per_layer_attention, 0.0)
    back = max(2 * (o.cp - 1) * one - ATTENTION_BACKWARD_FLOPS * per_layer_attention, 0.0)
    return (ahead + back) * layers


def _optimizer_s(hw: HardwareProfile, target: Target, o: TrainOptions, parameters: float, shards: int) -> float:
    """AdamW over the parameters this device updates (1/dp of them under ZeRO 1-3): a memory-bound pass, costed
    as a vector kernel by the cost stage; the gradients' norm for clipping (one read) and its all-reduce of one
    number over every device; offloaded, the update runs on the host and its gradients and parameters cross
    the host link (not modelled: the device time is the norm alone)."""
    local = parameters / (shards if o.zero >= 1 else 1)
    kernels = optimizer_kernels(local, o.offload_optimizer)
    clip = group_time(hw, Collective.ALL_REDUCE, o.devices, 1, 4.0)
    return sum(estimate_cost(k, target).time_s for k in kernels) + clip


def _experts_s(hw: HardwareProfile, forward: Forward, o: TrainOptions, layers: int) -> float:
    """Expert parallelism over the data-parallel ranks (Megatron-LM's EP, ranks tp x cp apart): each MoE layer's
    dispatch and combine all-to-alls of the routed tokens forward and their gradients' backward, on a stage's
    share of the MoE layers, not overlapped (DeepSpeed-MoE sec. 5; the engine's `plan.experts` traffic)."""
    if o.ep <= 1 or not forward.dispatch_bytes:
        return 0.0
    per_layer = sum(group_time(hw, Collective.ALL_TO_ALL, o.ep, o.tp * o.cp, b) for b in forward.dispatch_bytes)
    return 4 * per_layer * layers / max(forward.dims.layers, 1)


@dataclass(frozen=True, slots=True)
class StepTiming:
    """Where a step's time goes: the pipeline over the slowest stage, the sends, DP's exposed part, the optimizer."""

    per_stage_s: tuple[float, ...]  # each stage's micro-batch with its sends and ring attention's exposed passing
    slowest: int
    sends_s: float  # a micro-batch's pipeline sends and ring passing on the slowest stage
    pipeline_s: float
    sync: GradientSync
    optimizer_s: float

    @property
    def step_s(self) -> float:
        return self.pipeline_s + self.sync.exposed_s + self.optimizer_s


def step_timing(hw: HardwareProfile, o: TrainOptions, forward: Forward, target: Target, work) -> StepTiming:
    m, weight = o.micro_batches, target.weight_bytes
    counts = stage_counts(forward.dims.layers, o.pp)
    p2p = _p2p_s(hw, forward, o)
    ring = [_ring_s(hw, forward, o, w.attention_s, c) + _experts_s(hw, forward, o, c) for w, c in zip(work, counts)]
    per_stage = tuple(w.micro_batch_s + p2p + r for w, r in zip(work, ring))
    slowest = max(range(o.pp), key=lambda s: per_stage[s])
    busiest = work[slowest]
    holdings = Holdings.of(forward, o.tp, weight, o.ep)
    params_stage = max(holdings.stage(o, s, c).parameters for s, c in enumerate(counts))
    sync = gradient_sync(
        hw, params_stage, weight, o.zero, o.dp * o.cp, o.tp, m, o.overlap_grad_reduce,
        busiest.phase_s.get(Phase.FORWARD, 0.0), busiest.phase_s.get(Phase.BACKWARD, 0.0),
    )  # fmt: skip
    return StepTiming(
        per_stage, slowest, p2p + ring[slowest], pipeline_time(o.pipeline, o.pp, m, o.vp, per_stage[slowest]), sync,
        _optimizer_s(hw, target, o, params_stage, o.dp * o.cp),
    )  # fmt: skip


def step_totals(o: TrainOptions, target: Target, work, timing: StepTiming) -> TrainTotals:
    """MFU, HFU and the shares of the step (FLOP_CONVENTION)."""
    m, step, busiest = o.micro_batches, timing.step_s, work[timing.slowest]
    model_flops = 3 * sum(w.model_flops for w in work) * m * o.dp
    recompute = sum(w.recompute_flops for w in work) * m * o.dp
    attention_recompute = 0.5 * sum(w.flash_flops for w in work) * m * o.dp
    peak = target.matrix_peak_flops_per_s
    denominator = step * o.devices * peak
    tokens = o.sequences * o.seq
    bubble = bubble_share(o.pipeline, o.pp, m, o.vp)
    return TrainTotals(
        step_time_s=step,
        tokens_per_step=tokens,
        tokens_per_s_per_device=tokens / step / o.devices,
        mfu=model_flops / denominator,
        hfu=(model_flops + recompute + attention_recompute) / denominator,
        model_flops=model_flops,
        hardware_flops=model_flops + recompute + attention_recompute,
        peak_flops_per_s=peak,
        bubble_share=bubble * timing.pipeline_s / step,
        exposed_communication_share=(timing.sync.exposed_s + m * timing.sends_s) / step,
        tensor_parallel_share=busiest.collective_s * m / step,
        recompute_share=busiest.phase_s.get(Phase.RECOMPUTE, 0.0) * m / step,
        optimizer_share=timing.optimizer_s / step,
        memory_stall_fraction=busiest.stall_s * m / step,
        dtype=target.dtype,
    )


def step_result(
    name: str, hw: HardwareProfile, o: TrainOptions, forward: Forward, target: Target, work
) -> TrainingResult:
    """The step's totals from each stage's micro-batch (see the module)."""
    weight, timing = target.weight_bytes, step_timing(hw, o, forward, target, work)
    busiest, m = work[timing.slowest], o.micro_batches
    bubble = bubble_share(o.pipeline, o.pp, m, o.vp) * timing.pipeline_s
    shares = _layer_shares(busiest, m, timing.step_s, bubble, timing.sync.exposed_s, timing.optimizer_s,
                           m * timing.sends_s)  # fmt: skip
    return TrainingResult(
        model_name=name,
        hardware_name=hw.name,
        options=o,
        parameters=Holdings.of(forward, o.tp, weight).parameters,
        totals=step_totals(o, target, work, timing),
        memory=plan_memory(hw, forward, Holdings.of(forward, o.tp, weight, o.ep), o),
        sync=timing.sync,
        micro_batch_s=tuple(sorted((str(phase), s) for phase, s in busiest.phase_s.items())),
        layer_shares=shares,
        stage_times_s=timing.per_stage_s,
        assumptions=(FLOP_CONVENTION, timing.sync.kind)
        + ((OFFLOAD_CAVEAT,) if o.offload_optimizer else ())
        + ((forward.caveat,) if forward.caveat else ()),
        forward=forward,
        weight_element_bytes=weight,
    )


def _layer_shares(busiest: StageWork, m: int, step: float, bubble: float, dp: float, optimizer: float, sends: float):
    rows = [(kind, m * t / step) for kind, t in sorted(busiest.layer_type_s.items(), key=lambda kv: -kv[1])]
    rows += [
        ("pipeline bubble", bubble / step),
        ("data-parallel (exposed)", dp / step),
        ("optimizer", optimizer / step),
    ]
    rows += [("sends (pipeline, ring attention, experts)", sends / step)]
    return tuple(rows)
