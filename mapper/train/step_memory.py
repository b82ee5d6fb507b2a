"""The memory per device of a training step's busiest pipeline stage (`train.memory`'s parts, summed).

Part of the train stage (`train.totals`): each stage's weights, gradients and optimizer state from the parameters
its kernels read, its layers' kept activations times the micro-batches in flight on it, full recompute's one
rebuilt layer, and the last stage's fp32 logits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapper.core.graph import LayerType
from mapper.core.vocab import KernelRule, PipelineSchedule, Recompute, Shard
from mapper.hardware.profile import HardwareProfile
from mapper.ops.backward import holds_parameters
from mapper.train.forward import Forward, stage_of
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


@dataclass(frozen=True, slots=True)
class Holdings:
    """The model's parameters by place, whole (every TP rank's), in bytes at the step's weight precision: one
    layer's split by TP and kept whole on each rank, and those before the layers (the embedding) and after them
    (the last norm, the LM head). Any plan's stages are read off it without mapping again."""

    layer_split: float
    layer_whole: float
    pre_split: float
    pre_whole: float
    post_split: float
    post_whole: float
    tied_split: float  # a LM head tied to the embedding: its own copy only on a last stage apart from the first
    tied_whole: float
    weight_bytes: float
    layers: int

    @staticmethod
    def of(forward: Forward, tp: int, weight_bytes: float, ep: int = 1) -> Holdings:
        """Each kernel's parameters by place; an embedding table split over TP as Megatron's VocabParallelEmbedding
        splits it (the mapped forward's gather reads it whole)."""
        places = ("layer_split", "layer_whole", "pre_split", "pre_whole", "post_split", "post_whole", "tied_split",
                  "tied_whole")  # fmt: skip
        sums = dict.fromkeys(places, 0.0)
        last = forward.dims.layers
        for k, layer in zip(forward.kernels, forward.layers):
            if not holds_parameters(k):
                continue
            place = "pre" if layer < 0 else "tied" if k.name in forward.tied else "post" if layer >= last else "layer"
            split = k.shard != Shard.REPLICATED
            whole = k.weight_bytes * (tp if split else 1) / (ep if k.name in forward.experts else 1)
            split = split or k.layer_type == LayerType.EMBEDDING
            sums[f"{place}_{'split' if split else 'whole'}"] += whole
        sums["layer_split"] /= max(last, 1)
        sums["layer_whole"] /= max(last, 1)
        return Holdings(**sums, weight_bytes=weight_bytes, layers=last)

    def stage(self, o: TrainOptions, stage: int, layers: int) -> StageHeld:
        """What one device of `stage` holds under `o` (its `layers` of the model)."""
        layer = self.layer_split / o.tp + self.layer_whole
        held = layers * layer
        if stage == 0:
            held += self.pre_split / o.tp + self.pre_whole
        if stage == o.pp - 1:
            held += self.post_split / o.tp + self.post_whole
        if stage == o.pp - 1 and o.pp > 1:  # Megatron keeps the tied embedding's copy on the last stage too
            held += self.tied_split / o.tp + self.tied_whole
        w = self.weight_bytes
        return StageHeld(stage, held / w, layers * layer / w, layers, w)

    @property
    def parameters(self) -> float:
        """The model's parameters, each once (a tied head's are the embedding's)."""
        places = (self.layer_split + self.layer_whole) * self.layers
        return (places + self.pre_split + self.pre_whole + self.post_split + self.post_whole) / self.weight_bytes


def stage_counts(layers: int, pp: int) -> list[int]:
    """Layers each stage holds (`forward.stage_of`)."""
    counts = [0] * pp
    for layer in range(layers):
        counts[stage_of(layer, layers, pp)] += 1
    return counts


def plan_memory(hw: HardwareProfile, forward: Forward, holdings: Holdings, o: TrainOptions) -> TrainMemory:
    """The busiest stage's memory per device under `o` (`forward`: any mapping of the model; its widths and
    attention kernel are what is read)."""
    counts = stage_counts(forward.dims.layers, o.pp)
    stages = [stage_memory(hw, forward, o, holdings.stage(o, s, c)) for s, c in enumerate(counts)]
    return max(stages, key=lambda m: m.per_device_bytes)
