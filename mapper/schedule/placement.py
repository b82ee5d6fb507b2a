"""Placing costed kernels on devices: pipeline stages, the sends between them, collective overlap.

After cost (the per-device kernels are already sharded for tensor parallelism). Produces the one
timeline a batch follows and the `parallel` section of the result: degrees, stage times, the
interconnect's share of the time and every collective.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mapper.core.errors import MapperError
from mapper.core.graph import Graph
from mapper.core.options import PlanOptions
from mapper.core.result import (
    CollectiveRecord,
    KernelAssessment,
    KernelEstimate,
    ParallelPlan,
)
from mapper.core.timeline import KernelEstimates
from mapper.core.vocab import Collective, Engine
from mapper.cost.bottleneck import Facts, classify, speedup_if_removed
from mapper.cost.estimate import estimate_cost
from mapper.hardware.target import Target
from mapper.plan.experts import experts_over_tp, replica_devices
from mapper.plan.precision import Sizer
from mapper.plan.sharding import collective_kernel
from mapper.schedule.stages import balance_stages, stage_times


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
    graph: Graph, estimates: Sequence[KernelEstimate], stage_of: list[int], sizer: Sizer
) -> dict[int, float]:
    """Bytes each stage boundary carries: every tensor made before it and read after it."""
    made_in: dict[str, int] = {}
    node_index = {n.name: i for i, n in enumerate(graph.nodes)}
    for e, s in zip(estimates, stage_of, strict=True):
        for name in e.kernel.nodes:
            for t in graph.nodes[node_index[name]].outputs:
                if t:
                    made_in[t] = s
    sends: dict[int, float] = {}
    counted: set[tuple[str, int]] = set()
    for e, s in zip(estimates, stage_of, strict=True):
        for name in e.kernel.nodes:
            for t in graph.nodes[node_index[name]].inputs:
                src = made_in.get(t)
                if src is None or src >= s or t not in graph.tensors:
                    continue  # not made by an earlier stage, or of no known shape (its node is unresolved)
                for boundary in range(src, s):  # an activation is relayed through every stage between
                    if (t, boundary) not in counted:
                        counted.add((t, boundary))
                        sends[boundary] = sends.get(boundary, 0.0) + sizer.bytes(graph.tensors[t])
    return sends


# How expert parallelism takes its devices (plan/experts.py): ep devices of their own at tp 1, the tp ranks above
EXPERTS_OWN_DEVICES = (
    "expert parallelism: E/ep experts a device, attention replicated; an all-to-all dispatch and"
    " combine of T x k x hidden activations per MoE layer; devices = tp x pp x ep x dp"
)
EXPERTS_OVER_TP = (
    "expert parallelism over the tensor-parallel ranks (ep = tp: vLLM --enable-expert-parallel, SGLang --ep-size):"
    " E/ep whole experts a rank, attention split by heads; an all-to-all dispatch and combine of T x k x hidden"
    " activations per MoE layer; devices = tp x pp x dp"
)

EXPERTS_ATTENTION_DP = (
    "attention data parallelism over the ep devices (SGLang --enable-dp-attention, TensorRT-LLM attention DP): one"
    " rank's step, its own requests and KV cache; the ranks step together at the same batch, so E/ep experts a rank"
    " run over ep x its tokens; an all-to-all dispatch and combine of the rank's T x k x hidden per MoE layer;"
    " devices = pp x ep x dp"
)


def place_on_devices(
    graph: Graph, estimates: Sequence[KernelEstimate], options: PlanOptions, target: Target, sizer: Sizer
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
    if options.overlap_collectives:
        estimates = _overlap(estimates)
    if pp == 1 and not options.overlap_collectives:  # one stage: the timeline stands as costed
        placed = KernelEstimates.of(estimates)
        start = sum(a.time_s for a in placed.assessments)
    else:
        timeline, start = _pipeline(graph, estimates, pp, target, sizer)
        placed = KernelEstimates.of(timeline)
    times = [a.time_s for a in placed.assessments]  # the columns: no estimate of a slice is written here
    per_stage = stage_times(times, [k.stage for k in placed.kernels.sources], max(pp, 1))
    collectives = [placed[i] for i, k in enumerate(placed.kernels.sources) if k.collective]
    comm = sum(e.time_s for e in collectives)
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
        collectives=tuple(
            CollectiveRecord(e.kernel.name, e.kernel.collective, e.kernel.devices, e.kernel.dram_bytes, e.time_s)
            for e in collectives
        ),
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


def _experts_text(options: PlanOptions) -> str:
    if options.attention_dp:
        return EXPERTS_ATTENTION_DP
    return EXPERTS_OVER_TP if experts_over_tp(options.tp, options.ep) else EXPERTS_OWN_DEVICES


def _pipeline(
    graph: Graph, estimates: Sequence[KernelEstimate], pp: int, target: Target, sizer: Sizer
) -> tuple[list[KernelEstimate], float]:
    """Stages balanced by time, the sends between them, and the timeline re-laid from zero."""
    stage_of = balance_stages([e.time_s for e in estimates], pp)
    timeline: list[KernelEstimate] = []
    sends = _stage_sends(graph, estimates, stage_of, sizer) if pp > 1 else {}
    for i, (e, s) in enumerate(zip(estimates, stage_of, strict=True)):
        timeline.append(KernelEstimate(e.kernel.replaced(stage=s), e.assessment, e.start_s) if s else e)
        if i + 1 < len(estimates) and stage_of[i + 1] != s:
            send = collective_kernel(f"stage{s}->stage{s + 1}:send", Collective.P2P, sends.get(s, 0.0), 2, stage=s)
            timeline.append(_estimate_collective(send, target))
    start, placed = 0.0, []
    for e in timeline:
        placed.append(KernelEstimate(e.kernel, e.assessment, start))
        start += e.time_s
    return placed, start


def _overlap(estimates: Sequence[KernelEstimate]) -> list[KernelEstimate]:
    """A collective overlaps the next compute kernel: only its excess over that compute stays exposed."""
    out = list(estimates)
    for i, e in enumerate(out):
        if not e.kernel.collective or i + 1 >= len(out):
            continue
        hidden = min(e.time_s - e.overhead_s, out[i + 1].compute_time_s)
        out[i] = replace(
            e,
            assessment=replace(
                e.assessment,
                time_s=e.time_s - hidden,
                evidence=f"{e.evidence}; {hidden * 1e6:.1f} us hidden behind {out[i + 1].kernel.name}",
            ),
        )
    return out
