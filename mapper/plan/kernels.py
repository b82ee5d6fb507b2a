"""Fusion groups -> `Kernel` records: boundary traffic at the plan's precision, engine, layer type.

Part of the plan stage (pipeline.plan_kernels). A tensor made and used inside one kernel never reaches DRAM; what
crosses the boundary is read or written once, at its size under the plan's precision (`plan.precision.Sizer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mapper.core.graph import Graph, LayerType, Node, OpClass
from mapper.core.result import Kernel, MatrixShape, NodeWork
from mapper.core.timeline import Kernels
from mapper.core.vocab import Engine, KernelRule, MatrixKind
from mapper.hardware.profile import HardwareProfile
from mapper.plan.boundary import Boundary, GroupPlaces, Place
from mapper.plan.fusion import FusionPlan, Group
from mapper.plan.kernel_keys import PlanTable, kernel_classes
from mapper.plan.precision import Sizer
from mapper.work.layers import KV_PATH_OPS
from mapper.work.workload import Workload
from mapper.work.works import NodeWorks

LOW_REUSE_K = 16  # a matrix op with K below this has too little reuse for a matrix engine
# Skinny products (a decode step's GEMV, M of a few rows) are not sent to an engine here: the cost stage
# prices them on both the matrix engine (padded to its instruction tile) and the vector units (a GEMV
# kernel) and keeps the cheaper (`mapper.cost.estimate`).


def _layer_type(members: list[NodeWork]) -> LayerType:
    for w in members:
        if w.layer_type is LayerType.ATTENTION:
            return LayerType.ATTENTION
    for w in members:
        if w.matrix is not None:
            return w.layer_type
    return members[0].layer_type


KV_SOURCE_DEPTH = 6  # views and transposes between a cache and the attention MatMul reading it (layers.KV_PATH_OPS)


def _matrix_shape(members: list[NodeWork], rule: str, latent: bool = False) -> MatrixShape | None:
    """The kernel's matrix view: its first matrix member's; a fused attention's QK^T, (B*H) x Sq x Skv x d (PV has
    the same extents), latent where its keys are its values (MLA: `_keys_are_values`); its heads are read off the
    graph after (`_attention_heads`)."""
    shapes = [w.matrix for w in members if w.matrix is not None]
    if not shapes:
        return None
    if rule == KernelRule.FLASH_ATTENTION:
        qk = shapes[0]
        return MatrixShape(qk.batch, qk.m, qk.n, qk.k, MatrixKind.LATENT_ATTENTION if latent else MatrixKind.ATTENTION)
    return shapes[0]


QUERY_RANK = 4  # a decomposed attention's query [batch, heads, seq, head dim]
REPEATED_KV_RANK = 4  # repeat_kv's Expand writes [batch, kv heads, group, keys, head dim] (rank 4 or more)


def _attention_heads(graph: Graph, nodes: list[Node], head_dim: int) -> tuple[int, int]:
    """(query heads, key/value heads) of a decomposed fused attention: the heads axis of the first MatMul's query
    [B, H, Sq, d], and its key operand's heads where it has fewer that broadcast (MLA's one latent), or H over the
    group an Expand of K or V repeats them by (Hugging Face `repeat_kv`: Unsqueeze -> Expand -> Reshape; an Expand
    whose output ends in the head dim). (0, 0) where the query has no heads axis."""
    tensors = graph.tensors
    qk = next((n for n in nodes if n.op_type == "MatMul" and len(n.inputs) > 1), None)
    query = tensors.get(qk.inputs[0]) if qk is not None else None
    if qk is None or query is None or len(query.shape) != QUERY_RANK:
        return 0, 0
    heads, group = query.shape[1], 1
    key = tensors.get(qk.inputs[1])
    if key is not None and len(key.shape) == QUERY_RANK and 0 < key.shape[1] < heads and heads % key.shape[1] == 0:
        group = heads // key.shape[1]
    for n in nodes:
        if n.op_type != "Expand" or not n.inputs or not n.outputs:
            continue
        src, out = tensors.get(n.inputs[0]), tensors.get(n.outputs[0])
        if src is None or out is None or len(out.shape) < REPEATED_KV_RANK or out.shape[-1] != head_dim:
            continue
        if src.elements > 0 and out.elements % src.elements == 0:
            group = max(group, out.elements // src.elements)
    return (heads, heads // group) if group > 1 and heads % group == 0 else (heads, heads)


def _keys_are_values(graph: Graph, nodes: Sequence[str], index_of: dict[str, int]) -> bool:
    """Whether a fused attention's PV multiplies the very tensor its QK^T reads as keys (through the key path's
    views): MLA's latent cache, keys and values in one (zoo/mla.py), which FlashMLA loads once a tile."""
    matmuls = [graph.nodes[index_of[n]] for n in nodes if graph.nodes[index_of[n]].op_type == "MatMul"]
    if len(matmuls) < 2 or len(matmuls[0].inputs) < 2 or len(matmuls[-1].inputs) < 2:  # noqa: PLR2004 (QK, PV)
        return False
    return _kv_source(graph, matmuls[0].inputs[1]) == _kv_source(graph, matmuls[-1].inputs[1])


def _kv_source(graph: Graph, tensor: str) -> str:
    for _ in range(KV_SOURCE_DEPTH):
        node = graph.producer(tensor)
        if node is None or node.op_type not in KV_PATH_OPS or not node.inputs:
            return tensor
        tensor = node.inputs[0]
    return tensor


HOST_CLASSES = (OpClass.CONTROL, OpClass.UNMODELED)


def _engine(members: list[NodeWork], matrix: MatrixShape | None) -> Engine:
    for w in members:
        if w.op_class in HOST_CLASSES:
            return Engine.HOST
    if matrix is not None:
        if min(matrix.m, matrix.n, matrix.k, matrix.batch) == 0:
            return Engine.VECTOR  # an empty product (a dim bound to 0): nothing for the matrix engine to do
        return Engine.VECTOR if matrix.depthwise or matrix.k < LOW_REUSE_K else Engine.MATRIX
    return Engine.VECTOR


def _read_bytes(
    graph: Graph,
    boundary: Boundary,
    work: _ByName,
    sizer: Sizer,
    weight_shares: dict[str, float] | None,
    token_share: float,
) -> tuple[float, float]:
    """(bytes a kernel reads, of which weights): weights at the share read, activations at the tokens' share."""
    read = weight = 0.0
    for t, partial in boundary.reads:
        spec = graph.tensors.get(t)
        if spec is None:
            continue
        if t in graph.weights:
            full = sizer.bytes(spec) * (weight_shares.get(t, 1.0) if weight_shares else 1.0)
            weight += full
        else:
            full = sizer.bytes(spec) * token_share
        if partial and spec.bytes > 0:  # only the gathered/kept elements are read
            full = full * min(1.0, work[partial].bytes_read / spec.bytes)
        read += full
    return read, weight


def build_kernel(
    graph: Graph,
    group: Group,
    place: Place,
    work: _ByName,
    sizer: Sizer,
    weight_shares: dict[str, float] | None = None,
    token_share: float = 1.0,
) -> Kernel:
    """The group's kernel at its place (`GroupPlaces`: its boundary and name). `weight_shares`: weight -> the
    share of it read (a mixture of experts' routed weights, work/moe.py); `token_share`: the share of the
    tokens an expert kernel sees (k/E): it reads and writes only their activations."""
    boundary, name = place[0], place[1]
    members = [work[n] for n in group.nodes]
    tensors, size = graph.tensors, sizer.bytes
    read, weight = _read_bytes(graph, boundary, work, sizer, weight_shares, token_share)
    written = 0.0
    for t in boundary.writes:
        spec = tensors.get(t)
        if spec is not None:
            written += size(spec) * token_share
    rows, length = _rows(tensors, boundary.reduce_inputs)
    first = members[0]
    if len(members) == 1:
        flops, matrix_flops, sfu = first.flops, first.matrix_flops, first.sfu_ops
    else:
        flops, matrix_flops, sfu = 0.0, 0.0, 0.0
        for w in members:
            flops += w.flops
            matrix_flops += w.matrix_flops
            sfu += w.sfu_ops
    latent = group.rule == KernelRule.FLASH_ATTENTION and _keys_are_values(graph, group.nodes, work.index_of)
    matrix = _matrix_shape(members, group.rule, latent=latent)
    if matrix is not None and group.rule == KernelRule.FLASH_ATTENTION:
        heads, kv_heads = _attention_heads(graph, [graph.nodes[work.index_of[n]] for n in group.nodes], matrix.k)
        matrix = replace(matrix, heads=heads, kv_heads=kv_heads)
    out_rows, out_length = _rows(tensors, boundary.writes) if matrix is None else (0, 0)
    return Kernel(
        name=name,
        nodes=group.nodes,
        op_types=tuple(w.op_type for w in members),
        rule=group.rule,
        engine=_engine(members, matrix),
        layer_type=_layer_type(members),
        flops=flops,
        matrix_flops=matrix_flops,
        sfu_ops=sfu,
        dram_bytes=read + written,
        weight_bytes=weight,
        matrix=matrix,
        reduction_rows=rows,
        reduction_length=length,
        rows=out_rows,
        row_length=out_length,
    )


def _rows(tensors, names) -> tuple[int, int]:
    """(rows, elements per row) of the first of `names` with a shape: its last axis is the row."""
    for t in names:
        spec = tensors.get(t)
        if spec is not None and spec.shape:
            return spec.elements // max(spec.shape[-1], 1), spec.shape[-1]
    return 0, 0


def build_kernels(
    workload: Workload, groups: Sequence[Group], sizer: Sizer, hw: HardwareProfile, attention_fits
) -> Kernels:
    """Kernels for the groups; a flash-attention group whose tiles do not fit SRAM is split back.

    Kernels depend on the model, its bindings, the groups, the element sizes and (for attention) the
    SRAM size: a sweep that varies only the profile or between dtypes of one width builds them once.
    Group boundaries depend on the structure alone (the groups and which nodes were folded away):
    every binding of a sweep shares them (`GroupPlaces`)."""
    graph, caches = workload.graph, workload.caches
    flash = any(g.rule == KernelRule.FLASH_ATTENTION for g in groups)  # only fused attention asks the SRAM size
    groups_key = groups if isinstance(groups, FusionPlan) else FusionPlan(groups)  # hashed once a plan
    places = caches.group_boundaries(graph.structure, groups_key, lambda: GroupPlaces(graph, groups_key))
    table = caches.plan_table(graph.structure, groups_key, lambda: PlanTable.of(places))
    return caches.kernels(
        graph.sha256,
        graph.dims,
        groups_key,
        sizer.key,
        hw.sram_per_unit_bytes if flash else None,
        workload.cost_key,
        lambda: _build_kernels(workload, groups, sizer, hw, attention_fits, places, table),
    )


def _build_kernels(
    workload: Workload,
    groups: Sequence[Group],
    sizer: Sizer,
    hw: HardwareProfile,
    attention_fits,
    places: GroupPlaces,
    table: PlanTable,
) -> Kernels:
    graph = workload.graph
    out = _Timeline(workload, sizer, places, table)
    for g, (group, place) in enumerate(zip(groups, places.of_plan, strict=True)):
        if group.rule == KernelRule.FLASH_ATTENTION:
            members = [out.by_name[n] for n in group.nodes]
            shape = _matrix_shape(members, group.rule, latent=_keys_are_values(graph, group.nodes, places.index_of))
            if shape is None or not attention_fits(shape, sizer.act, hw):
                out.split_back(group)
                continue
        out.planned(g, group, place)
    return Kernels(out.sources, out.names, out.nodes, out.shared)


class _Timeline:
    """The kernels `_build_kernels` lays down, a group at a time: each plan group's kernel built once per class
    (`kernel_keys`: the first group whose kernel it shares), a split-back attention member's once per key."""

    def __init__(self, workload: Workload, sizer: Sizer, places: GroupPlaces, table: PlanTable):
        self.workload, self.sizer, self.places = workload, sizer, places
        self.by_name = _ByName(workload.nodes, places.index_of)  # a record is written only where a new kernel reads it
        self.codes = _member_codes(workload)
        experts, shares = workload.expert_gemms, workload.weight_shares
        self.classes = (
            None if self.codes is None else kernel_classes(table, self.codes, places.index_of, experts, shares).tolist()
        )
        self.built_at: dict[int, int] = {}  # a class -> the position its kernel was built at
        self.split: dict[tuple, int] = {}  # a split-back member's key -> its first position
        self.sources: list[Kernel] = []
        self.names: list[str] = []
        self.nodes: list[tuple[str, ...]] = []
        self.shared: list[int] = []

    def build(self, group: Group, place: Place) -> Kernel:
        w = self.workload
        routed = next((w.expert_gemms[n].token_share for n in group.nodes if n in w.expert_gemms), 1.0)
        return build_kernel(w.graph, group, place, self.by_name, self.sizer, w.weight_shares, routed)

    def planned(self, g: int, group: Group, place: Place) -> None:
        """Plan group `g`'s kernel: its class's, or built here."""
        of_class = -1 if self.classes is None else self.classes[g]
        first = self.built_at.get(of_class, -1) if of_class >= 0 else -1
        if first < 0:
            first = len(self.sources)
            if of_class >= 0:
                self.built_at[of_class] = first
            self.sources.append(self.build(group, place))
        else:
            self.sources.append(self.sources[first])
        self.shared.append(first)
        self.names.append(place[1])
        self.nodes.append(group.nodes)

    def split_back(self, group: Group) -> None:
        """A flash attention whose tiles do not fit SRAM, its members each a kernel of its own (its note)."""
        graph = self.workload.graph
        for n in group.nodes:
            single = Group((n,), KernelRule.SINGLE)
            at = self.places.of(graph, single)
            note = "flash-attention rejected: its tiles do not fit on-chip SRAM"
            self.shared.append(len(self.sources))  # a kernel of its own: its note is this position's
            self.sources.append(self.member(single, at).replaced(name=at[1], nodes=single.nodes, note=note))
            self.names.append(at[1])
            self.nodes.append(single.nodes)

    def member(self, group: Group, place: Place) -> Kernel:
        """A split-back member's kernel: one built for a member of the same shape and codes, or its own."""
        shape, positions = place[2:]
        codes, w = self.codes, self.workload
        if codes is None or min(members := tuple(map(codes.__getitem__, positions))) < 0:
            return self.build(group, place)  # a member without a code: a kernel of its own
        key = (shape, members, _routing(group, place, w.expert_gemms, w.weight_shares))
        first = self.split.get(key)
        if first is not None:
            return self.sources[first]
        self.split[key] = len(self.sources)
        return self.build(group, place)


_LAYER_NUMBER = {layer: i for i, layer in enumerate(LayerType)}


class _ByName:
    """A workload's node records by node name (`index_of`: each live node's position, `GroupPlaces`), each written
    for its read and not kept on the workload (a search keeps 256 bindings: their records would be heap the
    garbage collector walks)."""

    __slots__ = ("index_of", "nodes")

    def __init__(self, nodes: NodeWorks, index_of: dict[str, int]):
        self.nodes, self.index_of = nodes, index_of

    def __getitem__(self, name: str) -> NodeWork:
        return self.nodes.read_once(self.index_of[name])


def _routing(group: Group, place: Place, experts: dict, weight_shares: dict | None) -> tuple:
    """What a kernel of a mixture of experts reads besides its members' codes: each member's routing figures (the
    expert work `moe.route_work` scaled by them, every figure but its layer and router) and the share of each weight
    it reads (`weight_shares`); () for either where the kernel holds no expert node or reads no routed weight (its
    shape and members' codes already say how many there are)."""
    nodes, boundary = group.nodes, place[0]
    figures = (
        ()
        if experts.keys().isdisjoint(nodes)
        else tuple(None if g is None else g.figures for g in map(experts.get, nodes))
    )
    if not weight_shares or weight_shares.keys().isdisjoint(boundary.read_names):
        return figures, ()
    return figures, tuple(weight_shares.get(t, 1.0) for t, _ in boundary.reads)


def _member_codes(workload: Workload) -> list[int] | None:
    """Per live node, a number naming what a kernel reads of a member besides its specs and name: its work kind
    and layer type (-1: a node estimated alone); None where kinds are unknown. (A mixture of experts' kernels add
    their routing to the key: `_routing`.)"""
    if len(workload.work_kinds) != len(workload.nodes):
        return None
    layers, number = len(_LAYER_NUMBER), _LAYER_NUMBER
    return [
        kind * layers + number[layer] if kind >= 0 else -1
        for (layer, _), kind in zip(workload.nodes.places, workload.work_kinds)
    ]
