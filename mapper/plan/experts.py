"""Mixture-of-experts plan: the busiest expert's load, and expert parallelism with its collectives.

In the parallel stage, after the tensor-parallel split (sharding.py). Expert GEMMs (found by work/moe.py)
run at the busiest expert's tokens: the mean x PlanOptions.expert_imbalance, at most the tokens present
(a layer's experts run together and wait for the busiest). At expert-parallel degree ep each device holds
E/ep experts (its share of every expert kernel's work and weights). How a layer's tokens reach its experts
depends on where the tokens are. Without attention DP every rank holds the whole batch (attention replicated at
tp 1, or split by heads and all-reduced at tp > 1), so nothing is dispatched: each rank runs its experts on the
tokens routed to them and the layer ends with one all-reduce of the partial sums, T x hidden x bytes over the ep
ranks, as vLLM (`DefaultMoERunner._maybe_reduce_output`: `tensor_model_parallel_all_reduce` when tp or ep > 1 and
no data parallelism), SGLang and TensorRT-LLM (without attention DP) run it. Under attention DP each rank holds
only its own requests, and each MoE layer adds an all-to-all dispatch of the routed tokens' activations before
its experts and a combine after them: T x k x hidden x bytes, (ep-1)/ep of it on the wire each way
(DeepSpeed-MoE, Rajbhandari et al. 2022, sec. 5; DeepEP).

Where the devices come from: with --tp 1 the ep devices are devices of their own, attention replicated on each
(devices tp x pp x ep x dp). With --tp above 1 the expert-parallel group is the tensor-parallel group, as vLLM
(--enable-expert-parallel) and SGLang (--ep-size) lay it: ep must equal tp, attention is split over the ranks
by heads and the experts over them whole, E/ep a rank, not sliced (devices tp x pp x dp).
A grouped block's experts split by tensor parallelism alone (ep 1) all-reduce their partial sums once a layer,
T x hidden, as a fused MoE kernel's caller does, not the [E, T, hidden] stack the graph holds.

Attention data parallelism (PlanOptions.attention_dp, tp 1: SGLang --enable-dp-attention, TensorRT-LLM
enable_attention_dp) binds one rank's step: each of the ep ranks runs attention and the dense layers on its own
requests and KV cache, and the ranks step in lockstep at the same batch (the MoE layer's collectives hold them
together), so a layer's experts see ep x the rank's tokens T: each rank runs E/ep experts over ep x T tokens (the
expected work, experts used and busiest expert at that count), and dispatches and combines its own T x k x hidden.
With PlanOptions.expert_tp the ranks slice every expert instead of holding E/ep whole (TensorRT-LLM's moe_tp_size
beside attention DP, AIConfigurator's decode pools): each rank gathers every rank's T tokens (an all-gather of
ep x T x hidden), runs all E experts on them with a 1/ep slice of each expert's intermediate width (a column
GEMM's N, a row GEMM's K: the same share of the work and weights as EP), and reduce-scatters the ep x T x hidden
partial sums back to their ranks; the experts need not divide by ep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.result import Kernel, replace_matrix
from mapper.core.timeline import Kernels, positions_holding
from mapper.core.vocab import Collective
from mapper.plan.kernel_names import SEPARATOR, kernel_module
from mapper.plan.sharding import collective_kernel
from mapper.work.moe import ExpertGemm, expected_experts
from mapper.work.workload import Workload


def check_expert_parallel(
    workload: Workload, ep: int, tp: int = 1, attention_dp: bool = False, expert_tp: bool = False
) -> None:
    """ep must split whole experts, over devices of its own (tp 1) or over the tensor-parallel ranks (ep = tp):
    a one-line error for a dense model, an ep not dividing E, or an ep beside a different tp; attention DP runs
    over ep devices of their own (tp 1, ep >= 2), and expert TP slices the experts over those ranks only."""
    if attention_dp and (ep < 2 or tp != 1):  # noqa: PLR2004 (two ranks at least)
        raise MapperError(
            f"--attention-dp runs attention on each of the expert-parallel devices (--tp 1 --ep N, N >= 2);"
            f" got --tp {tp} --ep {ep}"
        )
    if expert_tp and not attention_dp:
        raise MapperError(
            "--expert-tp slices every expert over the attention-DP ranks: give it with --tp 1 --ep N --attention-dp"
        )
    if ep <= 1:
        return
    counts = sorted({g.experts for g in workload.expert_gemms.values()})
    if not counts:
        raise MapperError(f"--ep {ep} needs a mixture-of-experts model; {workload.graph.name} has no routed experts")
    if not expert_tp and any(e % ep for e in counts):
        raise MapperError(f"--ep {ep} must divide the expert count ({counts[0]} experts a layer); choose a divisor")
    if tp > 1 and ep != tp:
        raise MapperError(
            f"--ep {ep} with --tp {tp}: the expert-parallel group is the tensor-parallel ranks (vLLM, SGLang), so"
            f" --ep must equal --tp ({tp}), or give --tp 1 for {ep} expert devices of their own"
        )


def experts_over_tp(tp: int, ep: int) -> bool:
    """Whether the experts are laid whole over the tensor-parallel ranks (not sliced by tensor parallelism)."""
    return tp > 1 and ep > 1


def replica_devices(tp: int, pp: int, ep: int) -> int:
    """Devices one replica takes: ep devices of their own only where tp is 1 (else ep rides the tp ranks)."""
    return tp * pp * (1 if experts_over_tp(tp, ep) else ep)


def whole_experts(workload: Workload, tp: int, ep: int) -> frozenset[str]:
    """The MoE nodes tensor parallelism leaves whole: a grouped block's router (every rank routes every token, as
    vLLM's replicated gate does: a softmax or top-k over a split expert axis would need a collective), and every
    expert node where the experts ride the tp ranks. Mixtral's per-expert block keeps the roles it was recorded
    with (its router column-parallel)."""
    gemms = workload.expert_gemms
    routers = {g.router for g in gemms.values() if g.grouped and g.router}
    return frozenset(routers | set(gemms)) if experts_over_tp(tp, ep) else frozenset(routers)


@dataclass(frozen=True, slots=True)
class ExpertSites:
    """The kernel positions holding an expert node at one binding, as columns: each position's routing (its first
    expert node's `ExpertGemm`), numbered by the figures a stage changes a kernel by. Read once a fusion plan and
    binding (`ModelCaches.expert_sites`), not position by position at every plan's mapping."""

    positions: np.ndarray  # ascending kernel positions
    gemms: tuple[ExpertGemm, ...]  # each position's routing
    figures: np.ndarray  # each position's index into `by_figures`
    by_figures: tuple[ExpertGemm, ...]  # the first routing of each distinct `ExpertGemm.figures`, in position order
    shares: np.ndarray  # each position's index into `share_values`
    share_values: tuple[float, ...]  # each distinct routing's (experts, top k, tokens) weight share
    layers: np.ndarray  # each position's routing's layer
    grouped: tuple[tuple[int, ExpertGemm], ...]  # (position, routing) of each grouped expert GEMM (stacked weights)

    @classmethod
    def of(cls, held: Sequence[tuple[int, tuple[str, ...]]], gemms: Mapping[str, ExpertGemm]) -> ExpertSites:
        found = [gemms[nodes[0]] for _, nodes in held]
        figures: dict[tuple, int] = {}
        shares: dict[tuple[int, int, int], int] = {}
        by_figures: list[ExpertGemm] = []
        share_values: list[float] = []
        code_of: dict[ExpertGemm, tuple[int, int]] = {}
        for g in dict.fromkeys(found):  # interned: a binding's experts of one layer share one record
            figure = figures.setdefault(g.figures, len(figures))
            if figure == len(by_figures):
                by_figures.append(g)
            share = shares.setdefault((g.experts, g.top_k, g.tokens), len(shares))
            if share == len(share_values):
                share_values.append(g.weight_share)
            code_of[g] = (figure, share)
        coded = np.asarray([code_of[g] for g in found], dtype=np.int64).reshape(-1, 2)
        return cls(
            np.fromiter((j for j, _ in held), dtype=np.int64, count=len(held)),
            tuple(found),
            coded[:, 0],
            tuple(by_figures),
            coded[:, 1],
            tuple(share_values),
            np.fromiter((g.layer for g in found), dtype=np.int64, count=len(found)),
            tuple((j, g) for (j, _), g in zip(held, found, strict=True) if g.grouped),
        )

    def codes(self, n: int, column: np.ndarray) -> np.ndarray:
        """`Kernels.remade`'s codes over `n` positions: `column`'s value at each site, -1 elsewhere."""
        codes = np.full(n, -1, dtype=np.int64)
        codes[self.positions] = column
        return codes


def expert_sites(workload: Workload, kernels: Kernels) -> ExpertSites:
    """Where the expert GEMMs sit in `kernels` at this binding: the positions found once a fusion plan
    (`timeline.positions_holding`; a kernel's routing is its first expert node's), their routings once a binding."""
    graph = workload.graph

    def find() -> ExpertSites:
        held = positions_holding(kernels, workload.expert_gemms.keys(), workload.caches)
        return ExpertSites.of(held, workload.expert_gemms)

    return workload.caches.expert_sites(kernels.nodes_key, graph.sha256, graph.dims, find)


def resident_kernels(workload: Workload, kernels: Sequence[Kernel], ep: int) -> Sequence[Kernel]:
    """The kernels as memory sees them: every expert's weights resident (not the share a step reads),
    E/ep experts a device."""
    if not workload.expert_gemms:  # a dense model: memory sees the kernels as they are
        return kernels
    columns = Kernels.of(kernels)
    sites = expert_sites(workload, columns)
    values = sites.share_values  # what the share reads: one pow a routing, not an expert GEMM
    codes = sites.codes(len(columns), sites.shares)
    return columns.remade(codes, lambda k, code: _resident(k, values[code], ep))


def _resident(k: Kernel, weight_share: float, ep: int) -> Kernel:
    weight = k.weight_bytes / weight_share / ep
    return k.replaced(weight_bytes=weight, dram_bytes=k.dram_bytes - k.weight_bytes + weight)


def _busiest(k: Kernel, g: ExpertGemm, imbalance: float, ep: int, sliced: bool = False) -> Kernel:
    busy = g.busiest_tokens(imbalance)
    f = busy / g.mean_tokens
    activations = (k.dram_bytes - k.weight_bytes) * f
    matrix = k.matrix
    if matrix is not None and sliced:  # expert TP: a column GEMM (K = hidden) keeps 1/ep of its N, a row GEMM of K
        n, kk = (math.ceil(matrix.n / ep), matrix.k) if matrix.k == g.hidden else (matrix.n, math.ceil(matrix.k / ep))
        matrix = replace_matrix(matrix, m=max(1, round(busy)), n=n, k=kk)
    elif matrix is not None:  # a grouped GEMM's batch is its experts: ep splits them
        batch = math.ceil(matrix.batch / ep) if g.grouped else matrix.batch
        matrix = replace_matrix(matrix, m=max(1, round(busy)), batch=batch)
    share = f"1/{ep} of each of {g.experts} experts" if sliced else f"{g.experts // ep} of {g.experts} experts"
    return k.replaced(
        flops=k.flops * f / ep,
        matrix_flops=k.matrix_flops * f / ep,
        sfu_ops=k.sfu_ops * f / ep,
        dram_bytes=(activations + k.weight_bytes) / ep,
        weight_bytes=k.weight_bytes / ep,
        matrix=matrix,
        note=f"busiest expert: {busy:.1f} tokens (mean {g.mean_tokens:.1f} x imbalance {imbalance:g}, at most"
        f" {g.tokens}); {share} a device",
    )


def _group_tokens(k: Kernel, g: ExpertGemm, ranks: int) -> tuple[Kernel, ExpertGemm]:
    """An expert kernel of one rank's T tokens at the tokens of every rank (attention DP): its token-wise work and
    activations x ranks, the weights read at the share of experts ranks x T tokens use, M their mean tokens."""
    if ranks <= 1:
        return k, g
    tokens = g.tokens * ranks
    used = expected_experts(g.experts, g.top_k, tokens)
    group = replace(g, tokens=tokens, mean_tokens=tokens * g.top_k / used)
    weight = k.weight_bytes * group.weight_share / g.weight_share
    matrix = k.matrix
    if matrix is not None:
        batch = max(1, round(used)) if g.grouped else matrix.batch  # a grouped GEMM runs the used experts as its batch
        matrix = replace_matrix(matrix, m=max(1, round(group.mean_tokens)), batch=batch)
    scaled = k.replaced(
        flops=k.flops * ranks,
        matrix_flops=k.matrix_flops * ranks,
        sfu_ops=k.sfu_ops * ranks,
        dram_bytes=(k.dram_bytes - k.weight_bytes) * ranks + weight,
        weight_bytes=weight,
        matrix=matrix,
    )
    return scaled, group


# A MoE layer's collectives over its ep ranks by where its tokens are: (attention DP, experts sliced, step) ->
# the collective and the hidden-wide rows it moves. Every rank holding the batch sums the experts' T outputs with one
# all-reduce; attention-DP ranks send their T x k routed rows to whole experts and back, or gather every rank's T
# tokens to sliced experts and reduce-scatter the sums back.
MOE_COLLECTIVES: dict[tuple[bool, bool, str], tuple[Collective, str]] = {
    (False, False, "combine"): (Collective.ALL_REDUCE, "tokens"),
    (True, False, "dispatch"): (Collective.ALL_TO_ALL, "routed"),
    (True, False, "combine"): (Collective.ALL_TO_ALL, "routed"),
    (True, True, "dispatch"): (Collective.ALL_GATHER, "gathered"),
    (True, True, "combine"): (Collective.REDUCE_SCATTER, "gathered"),
}


def _moe_collective(
    name: str, g: ExpertGemm, step: str, ep: int, act_bytes: float, ranks: int, sliced: bool
) -> tuple[Hashable, str, Callable[[], Kernel]] | None:
    """A MoE layer's `step` (dispatch or combine) collective, as MOE_COLLECTIVES lays it (None: the layout has none),
    named for the layer of the expert kernel `name`: `Kernels.inserted`'s key, name and maker (its position aside),
    one source for every layer's collective of one kind and message."""
    found = MOE_COLLECTIVES.get((ranks > 1, sliced, step))
    if found is None:
        return None
    kind, moved = found
    rows = {"tokens": g.tokens, "routed": g.tokens * g.top_k, "gathered": ranks * g.tokens}[moved]
    layer = kernel_module(name).split(".experts.")[0]  # "model.layers.0.block_sparse_moe"
    collective, message = f"{layer}{SEPARATOR}{step} {kind}", rows * g.hidden * act_bytes
    return (kind, message), collective, partial(collective_kernel, collective, kind, message, ep)


def _grouped_all_reduces(workload: Workload, kernels: Sequence[Kernel], act_bytes: float) -> Kernels:
    """A grouped expert GEMM's tensor-parallel all-reduce, and the partial sums its row-parallel GEMM writes, at the
    layer's T x hidden instead of the [E, T, hidden] stack the graph holds (Mixtral's per-expert GEMMs and every
    other kernel as they are)."""
    columns = Kernels.of(kernels)
    names, sites = columns.names, expert_sites(workload, columns)
    changes: list[tuple[int, Hashable, Callable[..., Kernel], tuple]] = []
    for j, g in sites.grouped:  # the all-reduce right after a grouped expert GEMM
        i = j + 1
        if i >= len(columns):
            continue
        k, name = columns.source(i), names[i]
        if k.collective != Collective.ALL_REDUCE or name != f"{names[j]}:all-reduce" or not k.devices:
            continue
        message = g.tokens * g.hidden * act_bytes
        spare = (k.dram_bytes - message) * (1 - 1 / k.devices)  # the stack's partial sums the GEMM was given
        before = columns.source(j)
        changes.append((j, (id(before), spare), _trimmed, (before, spare)))
        reduce = (name, Collective.ALL_REDUCE, message, k.devices)
        changes.append((i, (Collective.ALL_REDUCE, message, k.devices), collective_kernel, reduce))
    return columns.changed(changes)


def _trimmed(k: Kernel, spare: float) -> Kernel:
    return k.replaced(dram_bytes=max(k.dram_bytes - spare, 0.0))


def plan_experts(
    workload: Workload,
    kernels: Sequence[Kernel],
    ep: int,
    imbalance: float,
    act_bytes: float,
    ranks: int = 1,
    sliced: bool = False,
) -> Sequence[Kernel]:
    """Expert kernels at the busiest expert's tokens and 1/ep of the experts (whole, or `sliced`: each expert's
    width); at ep > 1 each layer's experts end in an all-reduce of their partial sums (every rank holds the batch),
    or, with `ranks` > 1 (attention DP: the experts at the tokens of that many ranks), sit between a dispatch and a
    combine (MOE_COLLECTIVES). An expert source is changed once per routing figures."""
    if not workload.expert_gemms:
        return kernels
    columns = _grouped_all_reduces(workload, kernels, act_bytes)
    if ep <= 1 and imbalance <= 1:
        return columns
    sites = expert_sites(workload, columns)
    routing = sites.by_figures  # the first expert GEMM of each routing's figures: what a share reads
    shares = columns.remade(
        sites.codes(len(columns), sites.figures),
        lambda k, code: _expert_share(k, routing[code], ranks, imbalance, ep, sliced),
    )
    if ep <= 1:
        return shares
    first, last = _layer_ends(sites)
    steps = [(j, 1, g, "dispatch") for j, g in first] + [(j + 1, 0, g, "combine") for j, g in last]
    inserts = []
    for at, _, g, step in sorted(steps, key=lambda s: (s[0], s[1])):  # a layer's combine before the next's dispatch
        name = shares.names[at if step == "dispatch" else at - 1]
        insert = _moe_collective(name, g, step, ep, act_bytes, ranks, sliced)
        if insert is not None:
            inserts.append((at, *insert))
    return shares.inserted(inserts)


def _layer_ends(sites: ExpertSites) -> tuple[list[tuple[int, ExpertGemm]], list[tuple[int, ExpertGemm]]]:
    """(position, routing) of each layer's first and of its last expert kernel, layers in the order they appear."""
    layers = sites.layers
    _, first = np.unique(layers, return_index=True)
    _, from_end = np.unique(layers[::-1], return_index=True)
    order = np.argsort(first, kind="stable")

    def sites_at(at: np.ndarray) -> list[tuple[int, ExpertGemm]]:
        return [(int(sites.positions[i]), sites.gemms[i]) for i in at[order].tolist()]

    return sites_at(first), sites_at(len(layers) - 1 - from_end)


def _expert_share(k: Kernel, g: ExpertGemm, ranks: int, imbalance: float, ep: int, sliced: bool) -> Kernel:
    """The busiest expert's kernel of one device, at the tokens of `ranks` ranks."""
    return _busiest(*_group_tokens(k, g, ranks), imbalance, ep, sliced)
