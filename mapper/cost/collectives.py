"""Alpha-beta cost of collectives: t = steps x alpha + bytes-on-the-wire / beta, per algorithm.

alpha is the link latency and beta the per-device, per-direction link bandwidth from the profile's
[interconnect] section. Formulas (Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005; NCCL's ring and tree algorithms):

    ring all-reduce        2 (p-1) alpha + 2 (p-1)/p  n / beta
    tree all-reduce        2 ceil(log2 p) alpha + 2 n / beta        (pipelined reduce + broadcast)
    one-shot all-reduce    alpha + (p-1) n / beta                   (custom all-reduce on a switch: each device
                                                                      reads its p-1 peers' whole buffers and sums)
    two-shot all-reduce    2 alpha + 2 (p-1)/p n / beta             (each device pulls and sums its 1/p share,
                                                                      then pulls the other sums: two barriers)
    ring all-gather        (p-1) alpha + (p-1)/p n / beta            (n = the gathered, full size)
    ring reduce-scatter    (p-1) alpha + (p-1)/p n / beta            (n = the full input size)
    point-to-point         alpha + n / beta
    all-to-all             (p-1) alpha + (p-1)/p n / beta            (pairwise exchange, Thakur et al. sec. 4.6;
                                                                      n = the bytes each device holds, of which
                                                                      (p-1)/p leave it: expert parallelism's
                                                                      dispatch and combine, DeepSpeed-MoE sec. 5)

The one-shot and two-shot all-reduces are the serving engines' own kernels for tensor parallelism on an NVSwitch
node (vLLM `csrc/custom_all_reduce.cuh`: `cross_device_reduce_1stage` and `_2stage`, one-stage for two GPUs and for
small messages; TensorRT-LLM `customAllReduceKernels.cu`: ONESHOT and TWOSHOT): the peers' buffers are read over
NVLink by load instructions after a flag barrier, so a small message pays about one link latency whatever the
device count, where NCCL's ring pays 2 (p-1). They are taken only where the caller says the runtime runs them
(`custom=True`) and the topology is a switch; the faster of the two is the one run.

A 2D torus (TPU ICI) runs the ring in both dimensions at once: each ring has sqrt(p) members and
half the data, over its own links. The algorithm used is the faster of those the topology offers.
An all-to-all runs pairwise on any topology (a torus routes its far pairs over shared links: a floor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.core.errors import MapperError
from mapper.core.vocab import Collective, values
from mapper.hardware.profile import EfficiencyCurve, Interconnect

COLLECTIVES = values(Collective)


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    kind: str
    algorithm: str
    devices: int
    message_bytes: float
    time_s: float
    wire_bytes: float  # bytes each device sends


def ring_all_reduce(p: int, n: float, alpha: float, beta: float) -> float:
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / beta


def tree_all_reduce(p: int, n: float, alpha: float, beta: float) -> float:
    return 2 * math.ceil(math.log2(p)) * alpha + 2 * n / beta


def one_shot_all_reduce(p: int, n: float, alpha: float, beta: float) -> float:
    return alpha + (p - 1) * n / beta


def two_shot_all_reduce(p: int, n: float, alpha: float, beta: float) -> float:
    return 2 * alpha + 2 * (p - 1) / p * n / beta


def ring_gather(p: int, n: float, alpha: float, beta: float) -> float:
    return (p - 1) * alpha + (p - 1) / p * n / beta


def collective_time(
    kind: str,
    devices: int,
    message_bytes: float,
    link: Interconnect,
    custom: bool = False,
    all_reduce_efficiency: EfficiencyCurve | None = None,
) -> CollectiveCost:
    """Time of one collective over `devices` devices; `message_bytes` is the full tensor's size. `custom`: the
    runtime runs its own one-shot / two-shot all-reduce where the topology is a switch (else NCCL's ring / tree).
    `all_reduce_efficiency`: the share of the link bandwidth an all-reduce reaches at its message size (the
    profile's `efficiency.all_reduce_by_bytes`; None: all of it)."""
    if kind not in COLLECTIVES:
        raise MapperError(f"collective {kind!r} is not one of {', '.join(COLLECTIVES)}")
    p, n = int(devices), float(message_bytes)
    if p <= 1:
        return CollectiveCost(kind, "none", p, n, 0.0, 0.0)
    alpha, beta = link.latency_s, link.link_bandwidth_bytes_per_s
    if beta <= 0:
        raise MapperError(
            f"the profile has no interconnect bandwidth (topology {link.topology!r}); it cannot run multi-device plans"
        )
    if kind == Collective.P2P:
        return CollectiveCost(kind, "direct", p, n, alpha + n / beta, n)
    if kind == Collective.ALL_TO_ALL:
        return CollectiveCost(kind, "pairwise", p, n, ring_gather(p, n, alpha, beta), (p - 1) / p * n)
    if link.topology == "torus2d":
        side = max(2, round(math.sqrt(p)))
        if kind == Collective.ALL_REDUCE:  # one ring per dimension, each on half the data, concurrently
            t = ring_all_reduce(side, n / 2, alpha, beta) * 2
            return CollectiveCost(kind, "2d-ring", p, n, t, 2 * (side - 1) / side * n)
        t = ring_gather(side, n / 2, alpha, beta) * 2
        return CollectiveCost(kind, "2d-ring", p, n, t, (side - 1) / side * n)
    if kind == Collective.ALL_REDUCE and all_reduce_efficiency is not None:
        beta *= all_reduce_efficiency.at(n)
    if kind == Collective.ALL_REDUCE and custom and link.topology == "nvswitch":
        one, two = one_shot_all_reduce(p, n, alpha, beta), two_shot_all_reduce(p, n, alpha, beta)
        if one <= two:
            return CollectiveCost(kind, "one-shot", p, n, one, (p - 1) * n)
        return CollectiveCost(kind, "two-shot", p, n, two, 2 * (p - 1) / p * n)
    if kind == Collective.ALL_REDUCE:
        ring, tree = ring_all_reduce(p, n, alpha, beta), tree_all_reduce(p, n, alpha, beta)
        if tree < ring:
            return CollectiveCost(kind, "tree", p, n, tree, 2 * n)
        return CollectiveCost(kind, "ring", p, n, ring, 2 * (p - 1) / p * n)
    return CollectiveCost(kind, "ring", p, n, ring_gather(p, n, alpha, beta), (p - 1) / p * n)
