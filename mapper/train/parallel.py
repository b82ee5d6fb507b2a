"""Where a training step's parallel groups run, what their collectives cost, and the pipeline's bubble.

Part of the train stage (`train.step`). Ranks are laid as Megatron-LM lays them (tensor parallel fastest, then
context, data, pipeline: megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"), so a group whose members sit
within one NVLink domain (`interconnect.max_devices` of the profile) uses its links and a group that spans nodes
the scale-out network (`SCALE_OUT`). Every collective is costed by `cost.collectives.collective_time`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.core.errors import MapperError
from mapper.core.vocab import Collective, PipelineSchedule
from mapper.cost.collectives import collective_time
from mapper.hardware.profile import HardwareProfile, Interconnect
from mapper.train.memory import ZERO_GRADIENTS, ZERO_PARAMETERS


@dataclass(frozen=True, slots=True)
class ScaleOut:
    """A node's network to the other nodes, per GPU (one NIC a GPU, rail-optimized), with its source."""

    bandwidth_bytes_per_s: float  # per GPU, per direction
    latency_s: float
    source: str


# The scale-out network of the systems each profile's GPU ships in (per GPU: one NIC each, per direction)
IB_LATENCY_S = 5e-6  # an InfiniBand RDMA message through NCCL: a few microseconds (assumption, as the profiles' NVLink)
SCALE_OUT: dict[str, ScaleOut] = {
    "a100-sxm-80gb": ScaleOut(
        25e9,
        IB_LATENCY_S,
        "DGX A100 (Selene, Narayanan et al. 2021 sec. 5.1): eight 200 Gb/s HDR InfiniBand HCAs a node, one a GPU",
    ),
    "h100-sxm": ScaleOut(
        50e9, IB_LATENCY_S, "DGX H100 datasheet: eight ConnectX-7 400 Gb/s NDR InfiniBand ports a node, one a GPU"
    ),
    "h200-sxm": ScaleOut(
        50e9, IB_LATENCY_S, "DGX H200 datasheet: eight ConnectX-7 400 Gb/s NDR InfiniBand ports a node, one a GPU"
    ),
    "b200": ScaleOut(
        50e9, IB_LATENCY_S, "DGX B200 datasheet: eight ConnectX-7 400 Gb/s InfiniBand ports a node, one a GPU"
    ),
}
MEGATRON_BUCKET_PARAMETERS = 40_000_000  # DDP gradient buckets: max(40M, 1M x dp) parameters (Megatron-LM DDP)


def node_size(hw: HardwareProfile) -> int:
    return max(hw.interconnect.max_devices, 1)


def group_link(hw: HardwareProfile, size: int, stride: int) -> tuple[Interconnect, str]:
    """The link a group of `size` ranks `stride` apart runs on: the NVLink domain where they all sit in one
    node, else the scale-out network (refused in one line where the profile's systems have none known)."""
    if size <= 1 or size * stride <= node_size(hw):
        return hw.interconnect, "intra-node"
    net = SCALE_OUT.get(hw.name)
    if net is None:
        raise MapperError(
            f"hardware {hw.name}: no scale-out network is known for its systems (mapper/train/parallel.py"
            f" SCALE_OUT), so groups beyond one node of {node_size(hw)} devices cannot be costed; keep tp x cp x dp x"
            " pp within one node or use a profile with one"
        )
    return Interconnect(net.bandwidth_bytes_per_s, net.latency_s, "ring", 1 << 20), "scale-out"


def group_time(hw: HardwareProfile, kind: Collective, size: int, stride: int, message_bytes: float) -> float:
    """One collective over a group (`cost.collectives` on the group's link)."""
    if size <= 1 or message_bytes <= 0:
        return 0.0
    link, where = group_link(hw, size, stride)
    # an all-reduce inside the device link reaches the share of it the profile's fitted curve says, as in a mapping
    share = hw.all_reduce_efficiency if where == "intra-node" else None
    return collective_time(kind, size, message_bytes, link, False, share).time_s


def bubble_share(schedule: PipelineSchedule, pp: int, micro_batches: int, vp: int = 1) -> float:
    """The pipeline's idle share of a step: (p - 1) / (m + p - 1) under GPipe and 1F1B, the bubble over v under
    the interleaved schedule (Narayanan et al. 2021, sec. 2.2.1-2.2.2)."""
    if pp <= 1:
        return 0.0
    bubble = (pp - 1) / (vp if schedule == PipelineSchedule.INTERLEAVED else 1)
    return bubble / (micro_batches + bubble)


def pipeline_time(schedule: PipelineSchedule, pp: int, micro_batches: int, vp: int, per_micro_batch_s: float) -> float:
    """The pipeline's time: m micro-batches of the slowest stage and the bubble's (p - 1) (/ v) more."""
    share = bubble_share(schedule, pp, micro_batches, vp)
    return micro_batches * per_micro_batch_s / (1 - share)


@dataclass(frozen=True, slots=True)
class GradientSync:
    """Data-parallel traffic of one step on one device: what its collectives carry, cost and leave exposed."""

    kind: str  # all-reduce (ZeRO 0) | reduce-scatter + all-gather (ZeRO 1-2) | FSDP gathers per micro-batch
    gradient_bytes: float  # the gradients each device reduces a step (fp32 main gradients)
    parameter_bytes: float  # the parameters each device gathers a step (ZeRO 1-3)
    time_s: float  # the collectives' time, overlapped or not
    exposed_s: float  # what does not hide under the backward (and, gathering parameters, the forward)
    buckets: int


def gradient_sync(  # noqa: PLR0913 (each input named at the one call)
    hw: HardwareProfile,
    parameters: float,
    weight_bytes: float,
    zero: int,
    shards: int,
    stride: int,
    micro_batches: int,
    overlap: bool,
    forward_s: float,
    backward_s: float,
) -> GradientSync:
    """Gradient reduction over `shards` data-parallel ranks (`stride` apart): ZeRO 0 all-reduces the fp32
    gradients; ZeRO 1-2 reduce-scatter them and all-gather the updated 16-bit parameters (Megatron's
    distributed optimizer); ZeRO 3 (FSDP) gathers each layer's parameters in every micro-batch's forward and
    backward and reduce-scatters its gradients. Buckets of `MEGATRON_BUCKET_PARAMETERS` are reduced as the
    backward produces them: only what exceeds the last micro-batch's backward, and never less than the last
    bucket, is exposed (`overlap`; else all of it). Where the gradients are sharded (ZeRO 2-3) no device holds a
    whole gradient to accumulate in, so every micro-batch's are reduce-scattered under its own backward."""
    grads = 4.0 * parameters
    buckets = max(1, math.ceil(parameters / max(MEGATRON_BUCKET_PARAMETERS, 1_000_000 * shards)))
    if shards <= 1:
        return GradientSync("none", 0.0, 0.0, 0.0, 0.0, 0)
    params = weight_bytes * parameters
    if zero == 0:
        reduce = group_time(hw, Collective.ALL_REDUCE, shards, stride, grads)
        gather, kind, gathered = 0.0, "all-reduce of fp32 gradients", 0.0
    else:
        reduce = group_time(hw, Collective.REDUCE_SCATTER, shards, stride, grads)
        passes = 2 * micro_batches if zero >= ZERO_PARAMETERS else 1
        gather = passes * group_time(hw, Collective.ALL_GATHER, shards, stride, params)
        gathered = passes * params
        kind = "FSDP: parameters gathered each pass, gradients reduce-scattered" if zero >= ZERO_PARAMETERS else (
            "reduce-scatter of fp32 gradients, all-gather of 16-bit parameters (distributed optimizer)"
        )  # fmt: skip
    reductions = micro_batches if zero >= ZERO_GRADIENTS else 1
    if not overlap:
        total = reductions * reduce + gather
        return GradientSync(kind, reductions * grads, gathered, total, total, buckets)
    exposed = reductions * max(reduce - backward_s, reduce / buckets)
    if zero >= ZERO_PARAMETERS:  # each pass's gathers prefetched under the pass before
        per_pass = gather / (2 * micro_batches)
        exposed += micro_batches * (max(per_pass - forward_s, 0.0) + max(per_pass - backward_s, 0.0))
    elif gather:  # the parameters' gather under the next step's first forward (overlap_param_gather)
        exposed += max(gather - forward_s, gather / buckets)
    return GradientSync(kind, reductions * grads, gathered, reductions * reduce + gather, exposed, buckets)
