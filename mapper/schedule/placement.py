"""Placing costed kernels on devices: pipeline stages, the sends between them, collective overlap.

After cost (the per-device kernels are already sharded for tensor parallelism). Produces the one
timeline a batch follows and the `parallel` section of the result: degrees, stage times, the
interconnect's share of the time and every collective.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.graph import Graph
from mapper.core.options import PlanOptions
from mapper.core.result import (
    CollectiveRecord,
    Kernel,
    KernelAssessment,
    KernelEstimate,
    ParallelPlan,
)
from mapper.core.timeline import KernelEstimates, Kernels, in_order_sum, timeline_starts
from mapper.core.vocab import Collective, Engine
from mapper.cost.bottleneck import Facts, classify, speedup_if_removed
from mapper.cost.estimate import estimate_cost
from mapper.hardware.target import Target
from mapper.plan.experts import experts_over_tp, replica_devices
from mapper.plan.precision import Sizer
from mapper.plan.sharding import collective_kernel
from mapper.schedule.stages import balance_stages

if TYPE_CHECKING:
    from mapper.core.caches import ModelCaches


def _estimate_collective(kernel, target: Target) -> KernelEstimate:
    c = estimate_cost(kernel, target)
    exponent = target.overlap_exponent
    facts = Facts(
        Engine.INTERCONNECT, c.time_s, 0.0, 0.0, c.overhead_s, 0.0, 0.0, 1.0, 0, 1.0, 1.0, exponent, c.interconnect_s
    )
    cls, evidence, owner = classify(facts)
    return KernelEstimate(
        kernel,
        KernelAssessment(
            tiling=c.tiling,
            dtype=target.dtype,
            time_s=c.time_s,
            compute_time_s=0.0,
            memory_time_s=0.0,
            overhead_s=c.overhead_s,
            sync_s=0.0,
            dram_bytes=0.0,
            l2_bytes=0.0,
            intensity_flop_per_byte=0.0,
            achieved_flops_per_s=0.0,
            stall_fraction=0.0,
            energy_j=c.energy_j,
            avg_power_w=c.avg_power_w,
            throttled=False,
            bottleneck=cls,
            evidence=evidence,
            owner=owner,
            roofline_time_s=c.interconnect_s,  # the wire time at the links' alpha-beta: its floor
            speedup_if_removed=speedup_if_removed(cls, facts),
        ),
    )


def _stage_sends(
    graph: Graph, kernels: Kernels, stage_of: list[int], sizer: Sizer, caches: ModelCaches | None
) -> dict[int, float]:
    """Bytes each stage boundary carries: every tensor made before it and read after it (`kernels`' nodes).
    The edges that could carry one (a tensor, the kernel making it, a kernel reading it, in reading order) are the
    structure's (`_tensor_edges`, kept in the model's cache); this binding's stages pick those that cross."""
    nodes = kernels.nodes
    edges = (
        _tensor_edges(graph, nodes)
        if caches is None
        else caches.tensor_edges(graph.structure, kernels.nodes_key, lambda: _tensor_edges(graph, nodes))
    )
    sends: dict[int, float] = {}
    if not edges.tensors:
        return sends
    stage = np.asarray(stage_of, dtype=np.int64)
    src, dst = stage[edges.made_at], stage[edges.read_at]
    counted: set[tuple[str, int]] = set()
    for e in np.flatnonzero(dst > src).tolist():  # edges crossing a boundary, in reading order
        t = edges.tensors[e]
        if t not in graph.tensors:
            continue  # of no known shape at this binding (its node is unresolved)
        for boundary in range(int(src[e]), int(dst[e])):  # an activation is relayed through every stage between
            if (t, boundary) not in counted:
                counted.add((t, boundary))
                sends[boundary] = sends.get(boundary, 0.0) + sizer.bytes(graph.tensors[t])
    return sends


@dataclass(frozen=True, slots=True)
class TensorEdges:
    """Each read of a tensor made by another kernel: the tensor, the position making it, the position reading it,
    in reading order (kernels, then their nodes, then the nodes' inputs)."""

    tensors: tuple[str, ...]
    made_at: np.ndarray
    read_at: np.ndarray


def _tensor_edges(graph: Graph, nodes: Sequence[tuple[str, ...]]) -> TensorEdges:
    made_in: dict[str, int] = {}
    node_index = {n.name: i for i, n in enumerate(graph.nodes)}
    for j, own in enumerate(nodes):
        for name in own:
            for t in graph.nodes[node_index[name]].outputs:
                if t:
                    made_in[t] = j
    tensors, made_at, read_at = [], [], []
    for j, own in enumerate(nodes):
        for name in own:
            for t in graph.nodes[node_index[name]].inputs:
                src = made_in.get(t)
                if src is None or src == j:
                    continue  # not made by another kernel
                tensors.append(t)
                made_at.append(src)
                read_at.append(j)
    return TensorEdges(tuple(tensors), np.array(made_at, dtype=np.int64), np.array(read_at, dtype=np.int64))


# How expert parallelism takes its devices (plan/experts.py): ep devices of their own at tp 1, the tp ranks above
EXPERTS_OWN_DEVICES = (
    "expert parallelism: E/ep experts a device, attention replicated; every device holds the batch, runs its"
    " experts on the tokens routed to them and all-reduces the T x hidden partial sums per MoE layer;"
    " devices = tp x pp x ep x dp"
)
EXPERTS_OVER_TP = (
    "expert parallelism over the tensor-parallel ranks (ep = tp: vLLM --enable-expert-parallel, SGLang --ep-size):"
    " E/ep whole experts a rank, attention split by heads; every rank holds the batch, runs its experts on the"
    " tokens routed to them and all-reduces the T x hidden partial sums per MoE layer; devices = tp x pp x dp"
)

EXPERTS_ATTENTION_DP = (
    "attention data parallelism over the ep devices (SGLang --enable-dp-attention, TensorRT-LLM attention DP): one"
    " rank's step, its own requests and KV cache; the ranks step together at the same batch, so E/ep experts a rank"
    " run over ep x its tokens; an all-to-all dispatch and combine of the rank's T x k x hidden per MoE layer;"
    " devices = pp x ep x dp"
)
EXPERTS_ATTENTION_DP_SLICED = (
    "attention data parallelism over the ep devices with expert TP (TensorRT-LLM attention DP beside moe_tp_size):"
    " one rank's step, its own requests and KV cache; every rank gathers the ranks' ep x T tokens, runs all E"
    " experts on a 1/ep slice of each and reduce-scatters the sums back per MoE layer; devices = pp x ep x dp"
)


def _collectives(placed: KernelEstimates) -> tuple[CollectiveRecord, ...]:
    """The timeline's collectives and sends, read from its columns (no estimate written)."""
    kernels, assessments = placed.kernels, placed.assessments
    found = np.flatnonzero(kernels.source_codes(lambda k: 1 if k.collective else -1) > 0).tolist()
    return tuple(
        CollectiveRecord(kernels.names[i], k.collective, k.devices, k.dram_bytes, assessments[i].time_s)
        for i, k in ((i, kernels.source(i)) for i in found)
    )


def place_on_devices(
    graph: Graph,
    estimates: Sequence[KernelEstimate],
    options: PlanOptions,
    target: Target,
    sizer: Sizer,
    caches: ModelCaches | None = None,
) -> tuple[KernelEstimates, ParallelPlan]:
    hw = target.hw
    tp, pp, dp, ep = options.tp, options.pp, options.dp, options.ep
    replica = replica_devices(tp, pp, ep)  # ep devices of their own at tp 1, else the experts ride the tp ranks
    devices = replica * dp
    if replica > 1 and replica > hw.interconnect.max_devices:
        what = "tp x pp" if experts_over_tp(tp, ep) else "tp x pp x ep"
        raise MapperError(
            f"{what} = {replica} devices exceeds the {hw.interconnect.max_devices} that"
            f" {hw.name}'s interconnect ({hw.interconnect.topology}) connects; lower --tp/--pp/--ep"
        )
    placed = KernelEstimates.of(estimates)
    if options.overlap_collectives:
        placed = _overlap(placed)
    if pp > 1 or options.overlap_collectives:
        placed = _pipeline(graph, placed, pp, target, sizer, caches)
    start, per_stage = _stage_times(placed, max(pp, 1))
    collectives = _collectives(placed)
    comm = sum(c.time_s for c in collectives)
    section = ParallelPlan(
        tp=tp,
        pp=pp,
        dp=dp,
        devices=devices,
        topology=hw.interconnect.topology,
        stage_times_s=tuple(per_stage),
        slowest_stage_s=max(per_stage) if pp > 1 else None,
        interconnect_time_s=comm,
        interconnect_share=comm / start if start else 0.0,
        collectives=collectives,
        assumptions=(
            (
                "tensor parallelism: Megatron-style column/row GEMMs, heads split, one all-reduce per"
                " row-parallel GEMM; norms, residuals and embeddings replicated"
            ),
            (
                "pipeline: contiguous stages balanced by time; one batch visits every stage (latency),"
                " back-to-back batches overlap (throughput = batch / slowest stage)"
            ),
            "data parallelism: independent replicas, no collectives at inference",
            _experts_text(options),
            "collectives: alpha-beta, the faster of ring and tree for the topology"
            + (
                " and hidden behind the next kernel's compute"
                if options.overlap_collectives
                else "; not overlapped with compute"
            ),
        ),
    )
    return placed, section


def _stage_times(placed: KernelEstimates, stages: int) -> tuple[float, list[float]]:
    """The timeline's end and each stage's time, read from the columns (no estimate of a slice is written here) and
    summed in timeline order (`in_order_sum`: the same floats as a loop)."""
    times = placed.column("time_s")
    stage_of = placed.kernels.source_codes(attrgetter("stage"))
    return in_order_sum(times), [in_order_sum(times[stage_of == s]) for s in range(stages)]


def _experts_text(options: PlanOptions) -> str:
    if options.attention_dp:
        return EXPERTS_ATTENTION_DP_SLICED if options.expert_tp else EXPERTS_ATTENTION_DP
    return EXPERTS_OVER_TP if experts_over_tp(options.tp, options.ep) else EXPERTS_OWN_DEVICES


def _pipeline(
    graph: Graph, estimates: KernelEstimates, pp: int, target: Target, sizer: Sizer, caches: ModelCaches | None
) -> KernelEstimates:
    """Stages balanced by time, the sends between them, and the timeline re-laid from zero (as columns: a source
    moved to a stage once, each send costed where it goes)."""
    columns, timed = estimates.kernels, estimates.assessments
    stage_of = balance_stages(estimates.column("time_s").tolist(), pp)
    sends = _stage_sends(graph, columns, stage_of, sizer, caches) if pp > 1 else {}
    codes = np.asarray(stage_of, dtype=np.int64)
    staged = columns.remade(np.where(codes > 0, codes, -1), _on_stage)
    ends = np.flatnonzero(codes[1:] != codes[:-1]).tolist()  # each stage's last position but the last stage's
    sent = []
    for i in ends:
        s = stage_of[i]
        kernel = collective_kernel(f"stage{s}->stage{s + 1}:send", Collective.P2P, sends.get(s, 0.0), 2, stage=s)
        sent.append((i, _estimate_collective(kernel, target)))
    placed = staged.inserted([(i + 1, (i, "send"), e.kernel.name, partial(_same, e.kernel)) for i, e in sent])
    assessments = list(timed)
    for i, e in reversed(sent):
        assessments.insert(i + 1, e.assessment)
    return KernelEstimates(placed, assessments, timeline_starts([a.time_s for a in assessments])[0])


def _same(k: Kernel) -> Kernel:
    return k


def _on_stage(k: Kernel, stage: int) -> Kernel:
    return k.replaced(stage=stage)


def _overlap(estimates: KernelEstimates) -> KernelEstimates:
    """A collective overlaps the next compute kernel: only its excess over that compute stays exposed (the
    assessments changed, the kernels' columns as they are)."""
    kernels, names = estimates.kernels.sources, estimates.kernels.names
    out = list(estimates.assessments)
    for i, k in enumerate(kernels):
        if not k.collective or i + 1 >= len(out):
            continue
        a = out[i]
        hidden = min(a.time_s - a.overhead_s, out[i + 1].compute_time_s)
        out[i] = replace(
            a,
            time_s=a.time_s - hidden,
            evidence=f"{a.evidence}; {hidden * 1e6:.1f} us hidden behind {names[i + 1]}",
        )
    return KernelEstimates(estimates.kernels, out, estimates.starts)
