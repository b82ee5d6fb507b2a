"""The memory per device of a training step's busiest pipeline stage (`train.memory`'s parts, summed).

Part of the train stage (`train.totals`): each stage's weights, gradients and optimizer state from the parameters
its kernels read, its layers' kept activations times the micro-batches in flight on it, full recompute's one
rebuilt layer, and the last stage's fp32 logits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapper.core.vocab import KernelRule, PipelineSchedule, Recompute
from mapper.hardware.profile import HardwareProfile
from mapper.train.forward import Forward
from mapper.train.memory import (
    LOGITS_BYTES,
    OPTIMIZER_BYTES,
    ActivationCase,
    StateCase,
    TrainMemory,
    in_flight,
    layer_activation_bytes,
    state_bytes,
)
from mapper.train.options import TrainOptions


@dataclass(frozen=True, slots=True)
class StageHeld:
    """What a pipeline stage's devices hold: its parameters (one device's, under TP) and layers."""

    stage: int
    parameters: float
    layer_parameters: float  # of its layers (not the embedding or the head)
    layers: int
    weight_bytes: float  # a weight element


def activation_case(forward: Forward, o: TrainOptions, recompute: Recompute | None = None) -> ActivationCase:
    fused = any(k.rule == KernelRule.FLASH_ATTENTION for k in forward.kernels)
    return ActivationCase(
        seq=o.seq // o.cp,
        micro_batch=o.micro_batch,
        tp=o.tp,
        sequence_parallel=o.sequence_parallel and o.tp > 1,
        recompute=Recompute(o.recompute if recompute is None else recompute),
        fused_attention=fused,
        dropout=o.dropout,
    )


def stage_memory(hw: HardwareProfile, forward: Forward, o: TrainOptions, held: StageHeld) -> TrainMemory:
    """One stage's memory per device (see the module)."""
    stage, parameters, layers = held.stage, held.parameters, held.layers
    case = activation_case(forward, o)
    per_layer = layer_activation_bytes(forward.dims, case)
    # 1F1B: stage i holds p - i micro-batches; GPipe: every stage all of them
    gpipe = o.pp > 1 and o.pipeline == PipelineSchedule.GPIPE
    flight = float(o.micro_batches) if gpipe else in_flight(o.pipeline, o.pp - stage, o.vp, o.micro_batches)
    working = layer_activation_bytes(forward.dims, replace(case, recompute=Recompute.NONE))
    weights, grads, optimizer = state_bytes(
        StateCase(
            parameters,
            held.layer_parameters / max(layers, 1),
            held.weight_bytes,
            o.zero,
            o.dp * o.cp,
            o.offload_optimizer,
        )
    )
    shards = o.dp * o.cp if o.zero >= 1 else 1
    last = stage == o.pp - 1
    logits = LOGITS_BYTES * o.micro_batch * (o.seq // o.cp) * forward.dims.vocab / o.tp if last else 0.0
    return TrainMemory(
        weight_bytes=weights,
        gradient_bytes=grads,
        optimizer_bytes=optimizer,
        activation_bytes=per_layer * layers * flight,
        recompute_working_bytes=working if o.recompute == Recompute.FULL else 0.0,
        logits_bytes=logits,
        host_optimizer_bytes=OPTIMIZER_BYTES * parameters / shards if o.offload_optimizer else 0.0,
        capacity_bytes=float(hw.dram_bytes),
        stage=stage,
    )


def step_memory(hw: HardwareProfile, forward: Forward, o: TrainOptions, work, counts: list[int], weight_bytes: float):
    """The busiest stage's memory per device."""
    stages = [
        stage_memory(
            hw,
            forward,
            o,
            StageHeld(w.stage, w.parameters / weight_bytes, w.layer_parameters / weight_bytes, c, weight_bytes),
        )
        for w, c in zip(work, counts)
    ]
    return max(stages, key=lambda m: m.per_device_bytes)
