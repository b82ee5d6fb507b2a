"""A training step from the engine's forward: backward, recompute, pipeline, data parallelism, optimizer, totals.

The train stage, above the pipeline beside serving (`mapper train`): `train_step` maps one micro-batch's forward
(`train.forward`), derives each kernel's backward (`train.backward`) and the recomputed forward, costs them all with
the forward's own cost stage (`cost.assess.estimate_kernels` on the same target), lays the layers over pipeline
stages, adds the pipeline's bubble, the data-parallel gradient traffic left exposed, the optimizer step and the
gradient clipping (`train.parallel`), and the memory per device (`train.memory`).
"""

from __future__ import annotations

from mapper.core.graph import LayerType
from mapper.core.result import Kernel
from mapper.core.vocab import Engine, KernelRule, Phase, Recompute, Shard
from mapper.cost.assess import estimate_kernels
from mapper.handle import open_model
from mapper.hardware.profile import HardwareProfile
from mapper.hardware.target import UNPACKED_DECODE, Target, device_target
from mapper.ops.backward import Grad
from mapper.plan.precision import PLAN_DTYPE_BYTES
from mapper.train.backward import backward_of
from mapper.train.forward import Forward, map_forward, stage_of
from mapper.train.options import TrainOptions
from mapper.train.totals import StageWork, TrainingResult, step_result


def train_step(source, hw: HardwareProfile, options: TrainOptions) -> TrainingResult:
    """One training step of the model (`source`: a built-in, a path, a config or a handle) under the plan."""
    model = open_model(source)
    forward = map_forward(model, hw, options)
    dtype = forward.mapping.totals.dtype
    target = training_target(hw, dtype)
    act = PLAN_DTYPE_BYTES[dtype]
    kernels, phases, layers = step_kernels(forward, options, Grad(act, act))
    estimates = estimate_kernels(kernels, target, model.caches)
    times = [(a.time_s, a.stall_fraction * a.time_s) for a in estimates.assessments]
    work = stage_work(forward, options, kernels, phases, layers, times)
    return step_result(model.name, hw, options, forward, target, work)


def training_target(hw: HardwareProfile, dtype: str) -> Target:
    """The target the training step's kernels are costed on: the forward's (the `training` runtime preset's:
    eager launches, causal attention) at the step's precision, every element at it."""
    size = PLAN_DTYPE_BYTES[dtype]
    return device_target(hw, dtype, (size, size, size), None, False, hw.kernel_launch_s, UNPACKED_DECODE, True)


def recomputed(k: Kernel, layer: int, last: int, recompute: Recompute) -> bool:
    """Whether the backward runs `k`'s forward again: selective, the attention core (Korthikanti et al. 2022 sec.
    5: scores, softmax and its dropout, the values' product; FlashAttention's kernel whole); full, every kernel of
    a layer (its input is what was kept)."""
    if recompute == Recompute.NONE or k.engine == Engine.INTERCONNECT and recompute == Recompute.SELECTIVE:
        return False
    if recompute == Recompute.SELECTIVE:
        core = k.rule == KernelRule.FLASH_ATTENTION or (k.layer_type == LayerType.ATTENTION and k.weight_bytes == 0)
        return core and 0 <= layer < last
    return 0 <= layer < last


def step_kernels(forward: Forward, options: TrainOptions, grad: Grad) -> tuple[list[Kernel], list[Phase], list[int]]:
    """Every kernel a micro-batch runs on each stage: the forward, the backward (each forward kernel's, in reverse)
    and the recomputed forward, with each one's phase and layer."""
    kernels, phases, layers = list(forward.kernels), [Phase.FORWARD] * len(forward.kernels), list(forward.layers)
    last = forward.dims.layers
    for k, layer in zip(reversed(forward.kernels), reversed(forward.layers)):
        if recomputed(k, layer, last, Recompute(options.recompute)):
            kernels.append(k.replaced(name=f"{k.name} · recomputed"))
            phases.append(Phase.RECOMPUTE)
            layers.append(layer)
        for b in backward_of(k, grad):
            kernels.append(b)
            phases.append(Phase.BACKWARD)
            layers.append(layer)
    return kernels, phases, layers


def stage_work(
    forward: Forward, options: TrainOptions, kernels: list[Kernel], phases: list[Phase], layers: list[int], times
) -> tuple[StageWork, ...]:
    """Each pipeline stage's micro-batch: its time by phase, by layer type, its collectives and its FLOPs."""
    pp, last = options.pp, forward.dims.layers
    work = [StageWork.empty(s) for s in range(pp)]
    for k, phase, layer, (t, stall) in zip(kernels, phases, layers, times):
        stage = work[stage_of(layer, last, pp)]
        whole = (options.tp if k.shard != Shard.REPLICATED else 1) * options.cp  # the FLOPs of the whole model
        stage.add(k, phase, t, whole, stall)
    return tuple(work)
