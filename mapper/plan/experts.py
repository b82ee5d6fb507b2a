"""Mixture-of-experts plan: the busiest expert's load, and expert parallelism with its all-to-all.

In the parallel stage, after the tensor-parallel split (sharding.py). Expert GEMMs (found by work/moe.py)
run at the busiest expert's tokens: the mean x PlanOptions.expert_imbalance, at most the tokens present
(a layer's experts run together and wait for the busiest). At expert-parallel degree ep each device holds
E/ep experts (its share of every expert kernel's work and weights; attention stays replicated) and each MoE
layer adds an all-to-all dispatch of the routed tokens' activations before its experts and a combine after
them: T x k x hidden x bytes, (ep-1)/ep of it on the wire each way (DeepSpeed-MoE, Rajbhandari et al. 2022,
sec. 5). Devices: tp x pp x ep x dp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mapper.core.errors import MapperError
from mapper.core.result import Kernel
from mapper.core.vocab import Collective
from mapper.plan.kernel_names import SEPARATOR, kernel_module
from mapper.plan.sharding import collective_kernel
from mapper.work.moe import ExpertGemm
from mapper.work.workload import Workload


def expert_of(workload: Workload, kernel: Kernel) -> ExpertGemm | None:
    return next((workload.expert_gemms[n] for n in kernel.nodes if n in workload.expert_gemms), None)


def check_expert_parallel(workload: Workload, ep: int) -> None:
    """ep must split whole experts: a one-line error for a dense model or an ep not dividing E."""
    if ep <= 1:
        return
    counts = sorted({g.experts for g in workload.expert_gemms.values()})
    if not counts:
        raise MapperError(f"--ep {ep} needs a mixture-of-experts model; {workload.graph.name} has no routed experts")
    if any(e % ep for e in counts):
        raise MapperError(f"--ep {ep} must divide the expert count ({counts[0]} experts a layer); choose a divisor")


def resident_kernels(workload: Workload, kernels: Sequence[Kernel], ep: int) -> Sequence[Kernel]:
    """The kernels as memory sees them: every expert's weights resident (not the share a step reads),
    E/ep experts a device."""
    if not workload.expert_gemms:  # a dense model: memory sees the kernels as they are
        return kernels
    out = []
    for k in kernels:
        g = expert_of(workload, k)
        if g is None:
            out.append(k)
            continue
        weight = k.weight_bytes / g.weight_share / ep
        out.append(replace(k, weight_bytes=weight, dram_bytes=k.dram_bytes - k.weight_bytes + weight))
    return out


def _busiest(k: Kernel, g: ExpertGemm, imbalance: float, ep: int) -> Kernel:
    busy = g.busiest_tokens(imbalance)
    f = busy / g.mean_tokens
    activations = (k.dram_bytes - k.weight_bytes) * f
    return replace(
        k,
        flops=k.flops * f / ep,
        matrix_flops=k.matrix_flops * f / ep,
        sfu_ops=k.sfu_ops * f / ep,
        dram_bytes=(activations + k.weight_bytes) / ep,
        weight_bytes=k.weight_bytes / ep,
        matrix=replace(k.matrix, m=max(1, round(busy))) if k.matrix is not None else None,
        note=f"busiest expert: {busy:.1f} tokens (mean {g.mean_tokens:.1f} x imbalance {imbalance:g}, at most"
        f" {g.tokens}); {g.experts // ep} of {g.experts} experts a device",
    )


def _all_to_all(k: Kernel, g: ExpertGemm, step: str, ep: int, act_bytes: float) -> Kernel:
    layer = kernel_module(k.name).split(".experts.")[0]  # "model.layers.0.block_sparse_moe"
    return collective_kernel(
        f"{layer}{SEPARATOR}{step} all-to-all", Collective.ALL_TO_ALL, g.tokens * g.top_k * g.hidden * act_bytes, ep
    )


def plan_experts(
    workload: Workload, kernels: Sequence[Kernel], ep: int, imbalance: float, act_bytes: float
) -> Sequence[Kernel]:
    """Expert kernels at the busiest expert's tokens and 1/ep of the experts, with each layer's dispatch
    and combine all-to-all around its experts (ep > 1)."""
    if not workload.expert_gemms or (ep <= 1 and imbalance <= 1):
        return kernels
    gemms = [expert_of(workload, k) for k in kernels]
    layer_of = [g.layer if g is not None else None for g in gemms]
    last = {layer: i for i, layer in enumerate(layer_of) if layer is not None}
    first = {layer: i for i, layer in reversed(list(enumerate(layer_of))) if layer is not None}
    out: list[Kernel] = []
    for i, (k, g) in enumerate(zip(kernels, gemms, strict=True)):
        if g is None:
            out.append(k)
            continue
        layer = g.layer
        if ep > 1 and first[layer] == i:
            out.append(_all_to_all(k, g, "dispatch", ep, act_bytes))
        out.append(_busiest(k, g, imbalance, ep))
        if ep > 1 and last[layer] == i:
            out.append(_all_to_all(k, g, "combine", ep, act_bytes))
    return out
