"""A training step's forward: the engine's mapping of one micro-batch, as a training framework runs it.

First part of the train stage (`train.step`): the model bound at the micro-batch and the sequence a device holds
(over context parallelism) and mapped by `pipeline.map_workload` under the tensor-parallel plan and the
`training` runtime preset (causal fused attention, every logit); then what training changes in that forward: no
KV cache is written, logits are not gathered (Megatron's vocab-parallel cross-entropy), sequence parallelism,
ring attention over context-parallel ranks, the loss. Each kernel's pipeline stage and layer come from its name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mapper.core.errors import MapperError
from mapper.core.graph import Graph, LayerType
from mapper.core.options import PlanOptions
from mapper.core.result import Kernel, MappingResult
from mapper.core.timeline import KernelEstimates
from mapper.core.vocab import Collective, Engine, KernelRule, MatrixKind, PlanDtype, Runtime, Shard
from mapper.handle import ModelHandle
from mapper.hardware.profile import HardwareProfile
from mapper.pipeline import map_workload
from mapper.plan.runtime import find_kv_appends
from mapper.plan.sharding import collective_kernel
from mapper.train.backward import sequence_parallel
from mapper.train.memory import LOGITS_BYTES, LayerDims
from mapper.train.options import TrainOptions

LAYER_INDEX = re.compile(r"\.(?:layers|layer|h|blocks)\.(\d+)\.")  # model.layers.12.mlp..., transformer.h.3.attn...
GATED_PROJECTIONS = 2  # a gated MLP's column-parallel GEMMs after the attention: gate and up
TABLE_ELEMENTS = 1 << 16  # a tied table is vocabulary x hidden: the scalars an epilogue reads (a softcap) are not
MLA_HEAD_DIM = 128  # DeepSeek-V2/V3's per-head width (qk_nope_head_dim, v_head_dim)
ROUTER_WIDTH_SHARE = 4  # a GEMM after the attention narrower than hidden / 4 is a MoE router (its experts' count)
LOSS_FLOPS_PER_LOGIT = 5  # max, subtract, exp's sum, log, the gradient's scale (vocab-parallel cross-entropy)
TRAINABLE = frozenset({"fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8"})  # precisions a training step's GEMMs run at
LOSS_REDUCTIONS = 3  # Megatron's vocab-parallel cross-entropy all-reduces the max, the exps' sum, the target logit


@dataclass(frozen=True, slots=True)
class Forward:
    """One micro-batch's forward on one device of each stage, and where each kernel sits."""

    mapping: MappingResult  # the engine's mapping of the slice (before training's changes)
    kernels: tuple[Kernel, ...]  # as training runs them
    layers: tuple[int, ...]  # each kernel's layer (-1 before the first, L after the last)
    dims: LayerDims
    tied: frozenset[str] = frozenset()  # kernels whose parameters an earlier kernel reads (a tied LM head)
    experts: frozenset[str] = frozenset()  # a mixture of experts' expert kernels (their weights over EP)
    dispatch_bytes: tuple[float, ...] = ()  # each MoE layer's routed activations: tokens x top-k x hidden x 2
    caveat: str = ""  # the precision the step runs at, where it is not the model's release


def map_forward(model: ModelHandle, hw: HardwareProfile, options: TrainOptions) -> Forward:
    """The micro-batch's forward as the training step runs it (see the module)."""
    if options.tp > max(hw.interconnect.max_devices, 1):
        raise MapperError(
            f"tp={options.tp} spans more than one NVLink domain of {hw.interconnect.max_devices} {hw.name} devices;"
            " keep --tp within a node and add --pp or --dp"
        )
    seq = options.seq // options.cp
    dims = {name: 0 for name, role in model.roles.items() if role == "past"}
    dims.update({name: seq for name, role in model.roles.items() if role == "total"})
    dims.update({name: 0 for name, role in model.roles.items() if role == "branch"})  # a merged decoder: no cache
    workload = model.bind(dims, batch=options.micro_batch, seq=seq)
    # experts mapped resident (ep 1: each device runs every expert on its own micro-batch's tokens, the work a
    # Megatron EP rank does on the tokens dispatched to its E/ep experts); their weights and all-to-alls over EP
    # are the step's (train.step_memory, train.totals)
    plan = PlanOptions(
        dtype=options.dtype, tp=options.tp, runtime=Runtime.TRAINING, attention_fusion=options.fused_attention
    )
    mapping = map_workload(workload, hw, plan)
    caveat = ""
    if mapping.totals.dtype not in TRAINABLE:  # auto on a quantized release (int8, int4, FP4): trained in bf16
        caveat = f"the model is released at {mapping.totals.dtype}, not a training precision: the step runs in bf16"
        mapping = map_workload(workload, hw, replace(plan, dtype=PlanDtype.BF16))
    appends = {a.node for a in find_kv_appends(workload.graph)}
    kept = [
        k
        for k in _kernels(mapping)
        if not (k.nodes and appends.issuperset(k.nodes)) and k.collective != Collective.ALL_GATHER
    ]
    dims_ = layer_dims(kept, _layer_indexes(kept), options.tp)
    top_k = max((g.top_k for g in workload.expert_gemms.values()), default=1)
    dims_ = replace(dims_, experts_per_token=top_k)
    sp = options.tp > 1 and options.sequence_parallel
    kernels = ring_attention(sequence_parallel(kept, options.tp) if sp else kept, options.cp)
    loss = loss_kernels(options, seq, dims_.vocab, mapping.totals.dtype)
    layers = _layer_indexes(kernels)
    tied = tied_kernels(workload.graph, kept)
    gemms = workload.expert_gemms
    experts = frozenset(k.name for k in kept if any(n in gemms for n in k.nodes))
    routing = {g.layer: g for g in gemms.values()}  # one routing a MoE layer
    if options.ep > 1 and (not routing or any(g.experts % options.ep for g in routing.values())):
        what = "has no experts" if not routing else f"has {next(iter(routing.values())).experts} experts a layer"
        raise MapperError(f"--ep {options.ep}: the model {what}; expert parallelism splits whole experts (--ep 1)")
    dispatch = tuple(2.0 * g.tokens * g.top_k * g.hidden / options.tp for g in routing.values())
    loss_layers = [dims_.layers] * len(loss)
    return Forward(mapping, (*kernels, *loss), (*layers, *loss_layers), dims_, tied, experts, dispatch, caveat)


def tied_kernels(graph: Graph, kernels: Sequence[Kernel]) -> frozenset[str]:
    """The kernels whose every parameter an earlier kernel reads: a LM head tied to the embedding (GPT-2, Llama-3.2
    1B) holds no parameter of its own (on one stage; Megatron keeps a copy on each of two stages)."""
    nodes = {n.name: n for n in graph.nodes}
    seen: set[str] = set()
    tied = set()
    for k in kernels:
        reads = {
            t
            for name in k.nodes
            if name in nodes
            for t in nodes[name].inputs
            if t in graph.weights and graph.tensors[t].elements >= TABLE_ELEMENTS
        }
        if reads and reads <= seen and k.weight_bytes > 0:
            tied.add(k.name)
        seen |= reads
    return frozenset(tied)


def _layer_indexes(kernels: Sequence[Kernel]) -> list[int]:
    """Each kernel's layer: its name's index; before the first indexed kernel -1, after the last L."""
    found = [LAYER_INDEX.search(k.name) for k in kernels]
    indexes = [int(m.group(1)) if m else None for m in found]
    numbered = [i for i in indexes if i is not None]
    if not numbered:
        raise MapperError("training needs a model of repeated layers (model.layers.N ...): none found in its kernels")
    last, seen = max(numbered) + 1, False  # L: the layers' count
    out = []
    for i in indexes:
        seen = seen or i is not None
        out.append(i if i is not None else (last if seen else -1))
    return out


def stage_of(layer: int, layers: int, pp: int) -> int:
    """The pipeline stage of a layer: L / p consecutive layers a stage, the embedding on the first and the head
    and loss on the last (Megatron-LM's default split)."""
    if layer < 0:
        return 0
    if layer >= layers:
        return pp - 1
    return min(layer * pp // max(layers, 1), pp - 1)


def layer_count(kernels: Sequence[Kernel]) -> int:
    """L: the repeated layers the kernels' names number."""
    return 1 + max((int(m.group(1)) for k in kernels if (m := LAYER_INDEX.search(k.name))), default=-1)


def layer_dims(kernels: Sequence[Kernel], layers: Sequence[int], tp: int) -> LayerDims:
    """The layer's widths read off layer 0's kernels (per device under `tp`, so x tp): the hidden width from its
    first norm, heads from its attention, the projections before the attention and the MLP's after it."""
    first = [k for k, i in zip(kernels, layers) if i == 0]
    norm = next((k for k in first if k.rule == KernelRule.NORM), None)
    core = next((k for k in first if k.layer_type == LayerType.ATTENTION and k.matrix is not None), None)
    if norm is None or core is None:
        raise MapperError("training needs a transformer: layer 0 has no norm or no attention among its kernels")
    at = first.index(core)
    hidden = norm.reduction_length or norm.row_length
    gemms = [k for k in first if k.layer_type == LayerType.LINEAR and k.matrix is not None]
    before = [k for k in gemms if first.index(k) < at]
    # after the attention: its output projection, then the MLP's (a router's few columns aside) up projections,
    # which read the hidden width whole (column-parallel: K unsplit), and the down projection
    after = [k for k in gemms if first.index(k) > at]
    projection = next((i for i, k in enumerate(after) if k.shape.n == hidden), 0)  # writes the hidden width back
    after = after[projection + 1 :]
    ups = [k for k in after if k.shape.k == hidden and k.shape.n * tp >= hidden // ROUTER_WIDTH_SHARE]
    qkv = sum(k.shape.n for k in before) * tp
    heads = core.shape.heads * tp if core.shape.heads else core.shape.batch * tp
    query = heads * core.shape.k
    # MLA as served (absorbed, one latent head): counted as multi-head
    if core.shape.kind == MatrixKind.LATENT_ATTENTION:
        heads, query, qkv = hidden // MLA_HEAD_DIM, hidden, 3 * hidden
    count = layer_count(kernels)
    head_lm = [k for k, i in zip(kernels, layers) if i == count and k.matrix is not None]
    vocab = head_lm[-1].shape.n * (tp if head_lm[-1].shard == Shard.COLUMN else 1) if head_lm else 0
    return LayerDims(
        hidden=hidden,
        heads=heads,
        kv_width=max((qkv - query) // 2, 1),  # the Q, K, V projections less the queries' width
        query_width=query,
        ffn=ups[0].shape.n * tp if ups else 4 * hidden,
        gated=len(ups) >= GATED_PROJECTIONS,
        layers=count,
        vocab=vocab,
    )


def ring_attention(kernels: Sequence[Kernel], cp: int) -> list[Kernel]:
    """Attention over context-parallel ranks as ring attention with load-balanced causal chunks (Liu et al. 2023,
    "Ring Attention"; Megatron-LM's context parallelism): each rank's queries meet every key, so its attention
    does 1/cp of the whole sequence's (cp x the work of its own chunk's causal attention) and streams the K/V it
    is passed; the passing itself is costed by the step (`train.step`)."""
    if cp <= 1:
        return list(kernels)
    return [
        k.replaced(
            flops=k.flops * cp,
            matrix_flops=k.matrix_flops * cp,
            sfu_ops=k.sfu_ops * cp,
            dram_bytes=k.dram_bytes * cp,
            note=f"ring attention over {cp} ranks",
        )
        if k.rule == KernelRule.FLASH_ATTENTION
        else k
        for k in kernels
    ]


def loss_kernels(options: TrainOptions, seq: int, vocab: int, dtype: str) -> list[Kernel]:
    """The vocab-parallel cross-entropy (Megatron-LM): fp32 logits read, the loss and its gradient written over
    each rank's 1/tp of the vocabulary, and three all-reduces of one fp32 number a token."""
    rows, width = options.micro_batch * seq, max(vocab // options.tp, 1)
    elements = float(rows * width)
    loss = Kernel(
        name="loss · vocab-parallel cross-entropy",
        nodes=(),
        op_types=("SoftmaxCrossEntropyLoss",),
        rule=KernelRule.SINGLE,
        engine=Engine.VECTOR,
        layer_type=LayerType.OTHER,
        flops=LOSS_FLOPS_PER_LOGIT * elements,
        matrix_flops=0.0,
        sfu_ops=elements,
        dram_bytes=2 * LOGITS_BYTES * elements,
        weight_bytes=0.0,
        rows=rows,
        row_length=width,
        shard=Shard.SHARDED,
        note=f"the loss over {width:,} of {vocab:,} logits a token ({dtype} GEMMs, fp32 loss)",
    )
    if options.tp <= 1:
        return [loss]
    reduce = collective_kernel("loss · all-reduce", Collective.ALL_REDUCE, 4.0 * rows, options.tp)
    return [loss, *[reduce] * LOSS_REDUCTIONS]


def _kernels(mapping: MappingResult) -> Sequence[Kernel]:
    """The mapping's kernels as its columns hold them (no estimate written)."""
    estimates = mapping.kernels
    return estimates.kernels if isinstance(estimates, KernelEstimates) else [e.kernel for e in estimates]
