"""Tensor parallelism, Megatron-style: column- and row-parallel GEMMs, heads split, collectives inserted.

Between layout and cost. A tensor is "sharded" once a column-parallel GEMM produced it. A weight GEMM
that reads a replicated activation is column-parallel (its output dim N is split: Q/K/V, FFN up and
gate, the LM head); one that reads a sharded activation is row-parallel (its K is split: attention's
output projection, FFN down) and its partial sums are all-reduced. Everything else that reads a
sharded tensor (attention on its heads, SwiGLU, RoPE, the KV-cache concat) works on 1/tp of the data;
the rest (norms, residual adds, embeddings) is replicated. A sharded graph output is all-gathered.
(Shoeybi et al., "Megatron-LM", 2019, section 3.)

Latent attention (DeepSeek's MLA, zoo/mla.py) adds two cases, as vLLM and SGLang split it: a low-rank down
projection whose output is normalized over its width (q_a_proj, kv_a_proj_with_mqa: a norm over a split axis
would need a collective) runs whole on every rank (vLLM's ReplicatedLinear), and a GEMM batched over heads
(the absorbed W^UK, W^UV) splits its heads and their weights without partial sums (`Shard.HEADS`). The latent
cache it writes is replicated: every rank holds it whole and its attention reads it whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from mapper.core.graph import Graph, LayerType, OpClass
from mapper.core.result import Kernel, MatrixShape, replace_matrix
from mapper.core.timeline import Kernels
from mapper.core.vocab import Collective, Engine, KernelRule, Shard
from mapper.plan.precision import Sizer
from mapper.plan.runtime import find_kv_appends
from mapper.work.ops import classify_op


def _boundary(graph: Graph, nodes: tuple[str, ...], index_of: dict[str, int]) -> tuple[list[str], list[str]]:
    """(activation tensors read from outside, tensors written for outside) of a kernel of `nodes`. `index_of`:
    each live node's index (what `graph.consumers` holds), so that users are compared as indices, not as nodes."""
    members = [graph.nodes[index_of[n]] for n in nodes]
    inside = {index_of[n] for n in nodes}
    made = {t for n in members for t in n.outputs if t}
    weights, tensors, outputs, consumers = graph.weights, graph.tensors, graph.output_set, graph.consumers
    ins = [t for n in members for t in n.inputs if t and t not in made and t not in weights and t in tensors]
    outs = [t for t in made if t in outputs or not inside.issuperset(consumers.get(t, ()))]
    return ins, outs


def through_views(graph: Graph, tensor: str) -> str:
    """The tensor a chain of free views (Reshape, Unsqueeze...) was made from: views have no kernel."""
    for _ in range(16):
        node = graph.producer(tensor)
        if node is None or classify_op(node.op_type) is not OpClass.VIEW or not node.inputs:
            return tensor
        tensor = node.inputs[0]
    return tensor


# How far a GEMM's output is followed to a norm over its width: Split (MLA's kv_a_proj into the latent and the
# rotary key) and the RMSNorm's square; a view would reshape the width into heads (Qwen3's per-head q_norm)
NORMALIZED_PATH_OPS = frozenset({"Split", "Pow", "Cast"})
WIDTH_NORMS = frozenset({"ReduceMean", "ReduceSumSquare", "LayerNormalization", "SimplifiedLayerNormalization"})
NORMALIZED_PATH_DEPTH = 3
BATCHED_WEIGHT_RANK = 3  # [heads, K, N]: a weight GEMM batched over heads


def _normalized(graph: Graph, tensor: str) -> bool:
    """Whether a GEMM's output reaches a norm over its width (its last axis) through NORMALIZED_PATH_OPS."""
    frontier = [tensor]
    for _ in range(NORMALIZED_PATH_DEPTH):
        reached: list[str] = []
        for t in frontier:
            for user in graph.users(t):
                if user.op_type in WIDTH_NORMS and _reduces_last_axis(graph, user):
                    return True
                if user.op_type in NORMALIZED_PATH_OPS:
                    reached.extend(o for o in user.outputs if o)
        frontier = reached
    return False


def _reduces_last_axis(graph: Graph, node) -> bool:
    if node.op_type != "ReduceMean" and node.op_type != "ReduceSumSquare":
        return int(node.attr("axis", -1)) == -1
    axes = node.attr("axes", None)
    rank = len(graph.tensors[node.inputs[0]].shape) if node.inputs and node.inputs[0] in graph.tensors else 0
    return axes is not None and list(axes) in ([-1], [rank - 1])


def _batched_weight(graph: Graph, gemm) -> bool:
    return any(
        t in graph.weights and len(graph.tensors[t].shape) >= BATCHED_WEIGHT_RANK
        for t in gemm.inputs
        if t in graph.tensors
    )


def _gemm_role(graph: Graph, gemm, reads_sharded: bool, experts: frozenset[str]) -> Shard:
    """A weight GEMM's role: row-parallel on a sharded input (split by heads where its weight is batched over
    heads), column-parallel on a replicated one, replicated where its output is normalized over its width."""
    if reads_sharded:
        return Shard.HEADS if gemm.name not in experts and _batched_weight(graph, gemm) else Shard.ROW
    if gemm.outputs and gemm.name not in experts and _normalized(graph, gemm.outputs[0]):
        return Shard.REPLICATED
    return Shard.COLUMN


def assign_roles(
    graph: Graph, kernels: Sequence[Kernel], whole: frozenset[str] = frozenset(), experts: frozenset[str] = frozenset()
) -> tuple[list[Kernel], list[list[str]]]:
    """Each kernel's tensor-parallel role (computed whatever tp is: memory planning needs it too), and the
    tensors each writes for outside (`_boundary`), which `shard_kernels` sizes. A kernel holding a node of
    `whole` runs whole on its rank (experts laid over the tensor-parallel ranks: plan/experts.py); `experts`
    (a mixture of experts' nodes) are sliced as Megatron slices an MLP, never split by heads."""
    index_of = {n.name: k for k, n in enumerate(graph.nodes)}
    sharded: set[str] = set()
    out: list[Kernel] = []
    written: list[list[str]] = []
    for k in kernels:
        if not k.nodes or (whole and not whole.isdisjoint(k.nodes)):  # inserted kernels (layout transposes)
            out.append(k.replaced(shard=Shard.REPLICATED))  # follow their neighbours: replicated
            written.append(_boundary(graph, k.nodes, index_of)[1] if k.nodes else [])
            continue
        ins, outs = _boundary(graph, k.nodes, index_of)
        written.append(outs)
        reads_sharded = any(through_views(graph, t) in sharded for t in ins)
        weight_gemm = (
            k.matrix is not None
            and k.weight_bytes > 0
            and k.rule != KernelRule.FLASH_ATTENTION
            and k.layer_type in (LayerType.LINEAR, LayerType.CONV)
            and not k.matrix.depthwise
        )
        if weight_gemm:  # split by what the GEMM itself reads: its epilogue may read a sharded tensor
            # (SwiGLU's up projection multiplies by the column-parallel gate) and stay column-parallel
            gemm = graph.nodes[index_of[k.nodes[0]]]
            gemm_reads_sharded = any(
                through_views(graph, t) in sharded
                for t in gemm.inputs
                if t and t not in graph.weights and t in graph.tensors
            )
            role = _gemm_role(graph, gemm, gemm_reads_sharded, experts)
        else:
            role = Shard.SHARDED if reads_sharded else Shard.REPLICATED
        if role in (Shard.COLUMN, Shard.SHARDED, Shard.HEADS):
            sharded.update(outs)
        out.append(k.replaced(shard=role))
    return out, written


def role_key(kernels: Sequence[Kernel]) -> tuple:
    """What `assign_roles` reads of each kernel (its nodes, rule, layer type and whether it is a weight GEMM's):
    kernels equal in these get equal roles, whatever their sizes. The facts are read off each template once
    (`Kernels.template_at` says which positions hold one: its bytes and the nodes' key are hashed in C), not once a
    position."""
    columns = Kernels.of(kernels)
    return columns.nodes_key, columns.template_at.tobytes(), tuple(_role_facts(k) for k in columns.templates)


def _role_facts(k: Kernel) -> tuple:
    return k.rule, k.layer_type, k.matrix is not None and not k.matrix.depthwise, k.weight_bytes > 0


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """What the tensor-parallel split reads besides the kernels' roles, found with them once a fusion plan (the same
    at every binding and degree): the positions each rank runs a share of (`split`), those whose output size the
    split reads with the tensors they write for outside (`sized`: a row-parallel kernel's partial sums, a
    column-parallel graph output's gather), those reading a KV cache every rank holds whole with its tensors
    (`kept`), and the collective after a position (`collectives`: the partial sums all-reduced, except those flowing
    into a later row-parallel kernel's sum and summed once after it, `_summed_on`; column-parallel logits gathered)."""

    split: np.ndarray  # bool per position: not replicated
    sized: tuple[tuple[int, tuple[str, ...]], ...]
    kept: tuple[tuple[int, tuple[str, ...]], ...]
    collectives: tuple[tuple[int, Collective], ...]


def split_plan(graph: Graph, full: Sequence[Kernel], written: Sequence[Sequence[str]]) -> SplitPlan:
    """`SplitPlan` of kernels carrying their roles (`assign_roles`)."""
    shards = [Shard(k.shard) for k in full]
    outs = [tuple(w) for w in written]
    summed_on = _summed_on(graph, shards, [k.nodes for k in full], outs)
    whole = _whole_caches(graph, full)
    index_of = {n.name: k for k, n in enumerate(graph.nodes)} if whole else {}
    sized, kept, collectives = [], [], []
    for i, (k, shard, out) in enumerate(zip(full, shards, outs, strict=True)):
        if shard == Shard.REPLICATED:
            continue
        row = shard == Shard.ROW
        gathered = shard == Shard.COLUMN and any(t in graph.output_set for t in out)
        if row or gathered:
            sized.append((i, out))
        if whole:  # a replicated cache (MLA's latent) is read whole by every rank's heads
            read = sorted(whole.intersection(_boundary(graph, k.nodes, index_of)[0]))
            if read:
                kept.append((i, tuple(read)))
        if row and i not in summed_on:
            collectives.append((i, Collective.ALL_REDUCE))
        elif gathered:
            collectives.append((i, Collective.ALL_GATHER))
    split = np.array([s != Shard.REPLICATED for s in shards], dtype=bool)
    split.flags.writeable = False  # kept in the model's cache
    return SplitPlan(split, tuple(sized), tuple(kept), tuple(collectives))


def assigned_roles(
    graph: Graph, kernels: Sequence[Kernel], whole: frozenset[str], experts: frozenset[str], caches
) -> tuple[Kernels, SplitPlan]:
    """`assign_roles` through the model's cache (`ModelCaches.tensor_roles`): the roles of equal kernels at another
    binding or TP degree are the ones assigned before, applied to these kernels (a source and role once)."""

    def assigned() -> tuple[np.ndarray, SplitPlan]:
        full, written = assign_roles(graph, kernels, whole, experts)
        codes = np.array([SHARD_CODES[Shard(k.shard)] for k in full], dtype=np.int64)
        codes.flags.writeable = False  # kept in the model's cache: read by every binding after
        return codes, split_plan(graph, full, written)

    key = (role_key(kernels), experts)
    roles, split = caches.tensor_roles(graph.structure, key, whole, assigned)
    return Kernels.of(kernels).remade(roles, _with_role), split


SHARDS = tuple(Shard)  # a role's code in the roles `assigned_roles` keeps, and in the memory plan's columns
SHARD_CODES = {role: i for i, role in enumerate(SHARDS)}


def _with_role(k: Kernel, code: int) -> Kernel:
    role = SHARDS[code]
    return k if k.shard == role else k.replaced(shard=role)


def _whole_caches(graph: Graph, kernels: Sequence[Kernel]) -> frozenset[str]:
    """The KV caches every rank holds whole: past and present of each cache update left replicated (MLA's latent,
    one key head all query heads share; a GQA/MHA cache is split with its heads)."""
    appends = find_kv_appends(graph)
    if not appends:
        return frozenset()
    replicated = {n for k in kernels if k.shard == Shard.REPLICATED for n in k.nodes}
    return frozenset(t for a in appends if a.node in replicated for t in (a.past, a.present))


def _split(shape: MatrixShape | None, role: str, tp: int) -> MatrixShape | None:
    if shape is None:
        return None
    if role == Shard.COLUMN:
        return replace_matrix(shape, n=math.ceil(shape.n / tp))
    if role == Shard.ROW:
        return replace_matrix(shape, k=math.ceil(shape.k / tp), a_elements=math.ceil(shape.a_elements / tp))
    if shape.kv_heads:  # attention on its heads: 1/tp of the query heads; K/V heads split, or replicated below tp
        heads, kv_heads = math.ceil(shape.heads / tp), math.ceil(shape.kv_heads / tp)
        return replace_matrix(shape, batch=math.ceil(shape.batch / tp), heads=heads, kv_heads=min(kv_heads, heads))
    return replace_matrix(shape, batch=math.ceil(shape.batch / tp))


def collective_kernel(name: str, kind: Collective, message_bytes: float, devices: int, stage: int = 0) -> Kernel:
    return Kernel(
        name=name,
        nodes=(),
        op_types=(kind.op_type,),
        rule=KernelRule.COLLECTIVE,
        engine=Engine.INTERCONNECT,
        layer_type=LayerType.COLLECTIVE,
        flops=0.0,
        matrix_flops=0.0,
        sfu_ops=0.0,
        dram_bytes=message_bytes,
        weight_bytes=0.0,
        collective=kind,
        devices=devices,
        shard=Shard.REPLICATED,
        stage=stage,
        note=f"{kind} of {message_bytes / 1e6:.3g} MB over {devices} devices",
    )


def shard_kernels(kernels: Sequence[Kernel], split: SplitPlan, tp: int, sizer: Sizer) -> Sequence[Kernel]:
    """Per-device kernels at tensor-parallel degree `tp`, with the collectives each split implies.
    `kernels` carry their roles and `split` where each is split and what it writes (`assigned_roles`). A source
    split under one output size (and cache kept whole) is split once, and the collectives of one message size are
    one source: the binding's sizes are read only at the positions the plan names."""
    if tp <= 1:
        return kernels
    columns = Kernels.of(kernels)
    size = sizer.bytes_of
    # the output's size: a row-parallel kernel's partial sums, and the message of a collective after it
    full_out = {i: sum(size(t) for t in outs) for i, outs in split.sized}
    kept = {i: sum(size(t) for t in read) for i, read in split.kept}
    figures: dict[tuple[float, float], int] = {(0.0, 0.0): 0}
    codes = np.where(split.split, 0, -1)
    for i in full_out.keys() | kept.keys():
        codes[i] = figures.setdefault((full_out.get(i, 0.0), kept.get(i, 0.0)), len(figures))
    by_code = list(figures)
    shares = columns.remade(codes, lambda k, code: _split_kernel(k, *by_code[code], tp))
    # partial sums of every rank are summed; column-parallel logits are gathered (sharded outputs such as the KV
    # cache stay on their ranks)
    after = [(i, kind, full_out[i], f"{shares.names[i]}:{kind}") for i, kind in split.collectives]
    return shares.inserted([_collective_after(i, kind, message, name, tp) for i, kind, message, name in after])


def _collective_after(i: int, kind: Collective, message: float, name: str, tp: int) -> tuple:
    """`Kernels.inserted`'s entry for the collective `name` after position i: one source a kind and message size."""
    return i + 1, (kind, message), name, partial(collective_kernel, name, kind, message, tp)


def _split_kernel(k: Kernel, full_out: float, kept: float, tp: int) -> Kernel:
    """One rank's share of a kernel of its role: 1/tp of its work and traffic (a row-parallel GEMM writes its whole
    output, `full_out`, of partial sums; a cache kept whole, `kept`, is read whole)."""
    dram = (k.dram_bytes - kept) / tp + kept + (full_out * (1 - 1 / tp) if k.shard == Shard.ROW else 0.0)
    return k.replaced(
        flops=k.flops / tp,
        matrix_flops=k.matrix_flops / tp,
        sfu_ops=k.sfu_ops / tp,
        dram_bytes=dram,
        weight_bytes=k.weight_bytes / tp,
        matrix=_split(k.matrix, k.shard, tp),
        reduction_rows=math.ceil(k.reduction_rows / tp),
    )


ACCUMULATING_OPS = frozenset({"Add", "Sum"})  # linear in each input: a sum of partial sums is a partial sum


def _summed_on(
    graph: Graph, shards: Sequence[Shard], nodes: Sequence[tuple[str, ...]], written: Sequence[Sequence[str]]
) -> frozenset[int]:
    """Row-parallel kernels whose partial sums only flow on into another row-parallel kernel's accumulating Add
    (a mixture-of-experts layer's experts, combined one into the next): their ranks' partial sums are summed once,
    after the last (what serving engines do: one all-reduce after the expert combine, not one per expert)."""
    kernel_of = {n: i for i, own in enumerate(nodes) for n in own}
    out = set()
    for i, (shard, outs) in enumerate(zip(shards, written, strict=True)):
        if shard != Shard.ROW or not outs or any(t in graph.output_set for t in outs):
            continue
        readers = [graph.nodes[j] for t in outs for j in graph.consumers.get(t, ())]
        if readers and all(
            r.op_type in ACCUMULATING_OPS
            and shards[kernel_of.get(r.name, i)] == Shard.ROW
            and kernel_of.get(r.name, i) != i
            for r in readers
        ):
            out.add(i)
    return frozenset(out)
