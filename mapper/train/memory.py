"""A training step's memory per device, exactly: weights, gradients, optimizer state and activations.

Part of the train stage (`train.step`). Activations follow Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", sec. 4.1, eq. 1-3: sbh(34 + 5as/h) bytes a GPT layer at 16-bit
activations and 1-byte dropout masks), written per tensor so that a gated MLP, grouped-query attention, fused
(FlashAttention) attention and models without dropout count what they keep; the states follow ZeRO (Rajbhandari
et al. 2020, sec. 5: P_os, P_g, P_p over the data-parallel ranks) with Megatron-LM's mixed precision (16-bit
weights, fp32 main gradients, fp32 master weights and two Adam moments).
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.vocab import PipelineSchedule, Recompute

MASK_BYTES = 1  # a dropout mask element (Korthikanti sec. 4.1: "1 byte")
LSE_BYTES = 4  # FlashAttention's log-sum-exp a query row, fp32, kept for its backward
MAIN_GRAD_BYTES = 4  # fp32 main gradients (Megatron-LM's bf16 default: --accumulate-allreduce-grads-in-fp32)
OPTIMIZER_BYTES = 12  # AdamW: fp32 master weights, first and second moments (Rajbhandari et al. 2020, sec. 3.1)
LOGITS_BYTES = 4  # the cross-entropy's logits in fp32 (Korthikanti sec. 4.3: 4sbv/t)
ZERO_GRADIENTS = 2  # the ZeRO stage that shards gradients too (P_os+g)
ZERO_PARAMETERS = 3  # the ZeRO stage that shards parameters too (P_os+g+p; FSDP's full sharding)
FSDP_UNSHARDED_LAYERS = 2  # ZeRO-3/FSDP: the layer computing and the next one prefetched held whole


@dataclass(frozen=True, slots=True)
class LayerDims:
    """A transformer layer's widths (whole, before tensor parallelism), read off the mapped forward."""

    hidden: int  # h
    heads: int  # a
    kv_width: int  # the K and V projections' width each (h under multi-head attention, less under GQA)
    ffn: int  # the MLP's intermediate width f
    gated: bool  # a gated MLP (SwiGLU): gate and up projections
    layers: int  # L
    vocab: int  # the LM head's width
    query_width: int = 0  # the queries' and the attention output's width (heads x head dim); 0: the hidden width
    experts_per_token: int = 1  # a mixture of experts' top-k: each token's MLP activations in k experts


@dataclass(frozen=True, slots=True)
class ActivationCase:
    """What one layer keeps depends on: the tokens, the split, the recompute policy and the kernels."""

    seq: int  # s: tokens a sequence on this device (the sequence over cp)
    micro_batch: int  # b
    tp: int
    sequence_parallel: bool
    recompute: Recompute
    fused_attention: bool  # FlashAttention: no score matrix kept
    dropout: bool
    act_bytes: float = 2.0  # a 16-bit activation (fp8 GEMMs keep their inputs at 16 bits too)


def layer_activation_bytes(d: LayerDims, c: ActivationCase) -> float:
    """Bytes one layer keeps for its backward (Korthikanti et al. 2022, sec. 4.1-5), per device. A GPT layer
    (f = 4h, multi-head, dropout, attention not fused, no parallelism) keeps sbh(34 + 5as/h); with TP and
    sequence parallelism all of it over t; with TP alone the norms' inputs, the QKV and fc1 inputs and the dropout
    masks (10sbh) stay whole; selective recompute drops the attention core (5as^2b); full recompute keeps only the
    layer's input (2sbh, over t with SP)."""
    s, b, e, h, t = c.seq, c.micro_batch, c.act_bytes, d.hidden, c.tp
    sbh = s * b * h
    whole_split = c.tp if c.sequence_parallel else 1  # the part TP alone leaves whole
    if c.recompute == Recompute.FULL:
        return e * sbh / whole_split
    mask = MASK_BYTES * sbh if c.dropout else 0.0
    # kept whole under TP alone: both norms' inputs, the QKV and fc1 inputs, the attention and MLP dropout masks
    whole = 2 * e * sbh + e * sbh + e * sbh + 2 * mask
    kv, q = d.kv_width, d.query_width or h
    attention = (
        e * s * b * (q + kv) + e * s * b * kv + e * s * b * q
    )  # Q and K for the scores, V, the projection's input
    # gate and up outputs and their product, or fc1's output and GeLU's; in each of a token's k experts
    mlp = (3 if d.gated else 2) * e * s * b * d.ffn * d.experts_per_token
    core = _core(d, c)
    return whole / whole_split + (attention + mlp + core) / t


def _core(d: LayerDims, c: ActivationCase) -> float:
    """The attention core's keeps: the softmax (and its dropout's mask and output) unfused: 5as^2b with dropout
    (2 + 1 + 2), 2as^2b without; fused, only FlashAttention's log-sum-exp a query row. Selective recompute: none."""
    if c.recompute == Recompute.SELECTIVE:
        return 0.0
    asb = d.heads * c.seq * c.micro_batch
    if c.fused_attention:
        return LSE_BYTES * asb
    scores = asb * c.seq
    return c.act_bytes * scores + ((MASK_BYTES + c.act_bytes) * scores if c.dropout else 0.0)


def in_flight(schedule: PipelineSchedule, pp: int, vp: int, micro_batches: int) -> float:
    """Micro-batches' worth of a stage's layers the first stage holds at its peak: GPipe all m; 1F1B p
    (PipeDream-Flush's warm-up, Narayanan et al. 2021 sec. 2.2.1); interleaved, Megatron-LM's warm-up of
    2(p-1) + (v-1)p chunks and the one running (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving), each chunk 1/v of the stage's layers."""
    if pp == 1:  # gradient accumulation: one micro-batch's forward and backward at a time
        return 1.0
    if schedule == PipelineSchedule.GPIPE:
        return float(micro_batches)
    if schedule == PipelineSchedule.INTERLEAVED and vp > 1:
        return min(2 * (pp - 1) + (vp - 1) * pp + 1, micro_batches * vp) / vp
    return float(min(pp, micro_batches))


@dataclass(frozen=True, slots=True)
class StateCase:
    """The parameters one device holds before ZeRO and how they are sharded."""

    parameters: float  # parameters on the device under TP x PP (x EP)
    layer_parameters: float  # one layer's, under TP (FSDP's unsharded units)
    weight_bytes: float  # a weight element as the GEMMs read it (`held_weight_bytes`: what a device keeps of one)
    zero: int
    shards: int  # the data-parallel ranks ZeRO shards over (dp x cp)
    offload_optimizer: bool


MODEL_WEIGHT_BYTES = 2  # the model's own weights under mixed precision: 16-bit (Megatron-LM, Transformer Engine)


def held_weight_bytes(gemm_bytes: float) -> float:
    """Bytes a device keeps a parameter's weights in: 16-bit, plus an 8-bit (or block-scaled) copy where the GEMMs
    run narrower (Transformer Engine casts the bf16 weights to fp8 and keeps the cast for the micro-batches); fp32
    where the step runs in fp32."""
    return gemm_bytes if gemm_bytes >= MODEL_WEIGHT_BYTES else MODEL_WEIGHT_BYTES + gemm_bytes


def state_bytes(c: StateCase) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) on one device (ZeRO: Rajbhandari et al. 2020, Figure 1)."""
    n, dp, kept = c.parameters, c.shards, held_weight_bytes(c.weight_bytes)
    weights = kept * n
    if c.zero >= ZERO_PARAMETERS:  # FSDP: a shard, and the layer computing and the one prefetched whole
        weights = weights / dp + FSDP_UNSHARDED_LAYERS * kept * c.layer_parameters
    grads = MAIN_GRAD_BYTES * n / (dp if c.zero >= ZERO_GRADIENTS else 1)
    optimizer = 0.0 if c.offload_optimizer else OPTIMIZER_BYTES * n / (dp if c.zero >= 1 else 1)
    return weights, grads, optimizer


@dataclass(frozen=True, slots=True)
class TrainMemory:
    """Memory per device of the busiest pipeline stage: the `memory` section of `mapper train --json`."""

    weight_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    activation_bytes: float  # the layers' kept activations of the micro-batches in flight
    recompute_working_bytes: float  # full recompute: the one layer rebuilt during its backward
    logits_bytes: float  # the last stage's fp32 logits for the loss
    host_optimizer_bytes: float  # optimizer state offloaded to the host
    capacity_bytes: float
    stage: int  # the pipeline stage these are for (the one with the most)

    @property
    def per_device_bytes(self) -> float:
        return (
            self.weight_bytes
            + self.gradient_bytes
            + self.optimizer_bytes
            + self.activation_bytes
            + self.recompute_working_bytes
            + self.logits_bytes
        )

    @property
    def fits(self) -> bool:
        return self.per_device_bytes <= self.capacity_bytes

    @property
    def shortfall_bytes(self) -> float:
        return max(self.per_device_bytes - self.capacity_bytes, 0.0)
