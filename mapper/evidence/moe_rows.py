"""AIConfigurator's MoE rows (`moe_perf`) as one-layer slices: what a row timed, and how the harness maps it.

What a row timed (ai-dynamo/aiconfigurator, collector/vllm/collect_moe.py, collector/sglang/collect_moe.py,
collector/trtllm/collect_moe.py): the framework's fused MoE module forward on one GPU, given the router's logits
(the top-k choice, the tokens' permutation to their experts, the grouped gate/up GEMM, the activation, the down
GEMM and the weighted combine), as one rank of a logical `moe_tp_size` x `moe_ep_size` group: its E / ep experts,
each sliced to inter / tp. Not timed: the router GEMM (its logits are the module's input) and any communication
(one physical rank). T is the rank's tokens, each routed to k of E experts by the row's `distribution`:

- `balanced` (collector/helper.py `balanced_logits`): token t takes experts (t + j ceil(E/k)) mod E, every expert
  about T k / E rows;
- `power_law_<alpha>` (`power_law_logits_v3`): per-expert counts drawn from a power law over [1, 0.8 T]
  ([0.01, 2] where T k <= E), scaled to T k, each at most T (the overflow given round robin to the others), and
  the EP rank with the most rows swapped onto the measuring GPU; the row is the mean over five such draws.

How it is mapped: a grouped MoE layer (zoo/moe_block.grouped_moe, softmax router, top-k renormalised) of T tokens
whose experts have intermediate size inter / moe_tp, at --ep moe_ep, replayed from a CUDA graph; the time is the
slice's less its router GEMM and its collective (the ranks' all-reduce at ep > 1), which the row did not time. A
quantized row (fp8, fp8-block, nvfp4) adds the activation's quantize, as a GEMM row does. A power-law row's
measuring rank holds more than its share of rows: its rows over the mean rank's (`busiest_rank_share`, the draws
above in expectation) are the plan's expert imbalance, so the rank's experts run those rows; at ep 1 the one rank
holds every row (T k), whatever the distribution, and the imbalance is 1.
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from mapper.core.vocab import Collective

if TYPE_CHECKING:
    from mapper.handle import ModelHandle

POWER_LAW = "power_law_"
BALANCED = "balanced"
DRAWS = 5  # the collector's power-law logits a row averages over (`num_iter`)
TOP_SHARE = 0.8  # the power law's upper bound, x T, where T k > E


def parse_distribution(text: str) -> float | None:
    """A row's distribution as its power law's alpha (None: balanced); ValueError for anything else."""
    if text == BALANCED:
        return None
    if text.startswith(POWER_LAW):
        alpha = float(text.removeprefix(POWER_LAW))
        if alpha > 1:
            return alpha
    raise ValueError(f"unknown token distribution {text!r}")


def known_distribution(text: str) -> bool:
    try:
        parse_distribution(text)
    except ValueError:
        return False
    return True


def busiest_rank_share(tokens: int, experts: int, top_k: int, ep: int, alpha: float | None) -> float:
    """The measuring rank's rows over the mean rank's, T k / ep, under the collector's draws: 1 for a balanced row
    or one rank; else the mean over DRAWS power-law draws (seeded by the configuration: the same every run) of the
    busiest EP rank's rows, the clamp's overflow and the rounding spread evenly over the ranks."""
    if alpha is None or ep == 1:
        return 1.0
    total = tokens * top_k
    low, high = (1.0, TOP_SHARE * tokens) if total > experts else (0.01, 2.0)
    rng = np.random.default_rng([tokens, experts, top_k, ep, round(alpha * 1000)])
    a, b = low ** (1 - alpha), high ** (1 - alpha)
    shares = []
    for _ in range(DRAWS):
        drawn = ((b - a) * rng.random(experts) + a) ** (1 / (1 - alpha))  # inverse CDF of the power law
        counts = np.minimum(np.round(drawn / drawn.sum() * total), tokens)
        ranks = counts.reshape(ep, experts // ep).sum(axis=1) + (total - counts.sum()) / ep
        shares.append(float(ranks.max()) / (total / ep))
    return max(1.0, math.fsum(shares) / DRAWS)


@cache
def moe_layer(hidden: int, inter: int, experts: int, top_k: int) -> ModelHandle:
    """One grouped MoE layer over a free `tokens` dim, opened once a configuration."""
    import mapper
    from mapper.zoo.builder import GraphBuilder
    from mapper.zoo.moe_block import MoeSpec, grouped_moe

    b = GraphBuilder("aiconfigurator-moe")
    h = b.input("h", [1, "tokens", hidden])
    out = grouped_moe(b, h, hidden, MoeSpec(experts, top_k, inter, renormalize=True))
    b.output(out, "y", [1, "tokens", hidden])
    return mapper.open_model(b.build("one MoE layer").SerializeToString())


_TIMES: dict[tuple, float] = {}  # (profile sha256, the mapped layer's figures, plan) -> the row's time


def moe_time_s(shape: tuple[int, ...], plan_dtype: str, alpha: float | None, profile: str, runtime: str) -> float:
    """The mapped time of one moe_perf row's op, less what the row did not time (the router GEMM, the collective);
    `shape` is the row's (T, hidden, inter, k, E, moe_tp, moe_ep). Kept by what it depends on: the profile's
    content, the layer the rank runs, its load and the plan."""
    import mapper
    from mapper.evidence.candidates import profile_named

    tokens, hidden, inter, top_k, experts, tp, ep = shape
    hw = profile_named(profile)
    imbalance = busiest_rank_share(tokens, experts, top_k, ep, alpha)
    key = (hw.sha256, tokens, hidden, inter // tp, top_k, experts, ep, imbalance, plan_dtype, runtime)
    found = _TIMES.get(key)
    if found is not None:
        return found
    workload = moe_layer(hidden, inter // tp, experts, top_k).bind({"tokens": tokens})
    options = mapper.PlanOptions(dtype=plan_dtype, launch="graph", runtime=runtime, ep=ep, expert_imbalance=imbalance)
    result = mapper.map_workload(workload, hw, options)
    routers = {g.router for g in workload.expert_gemms.values()}
    untimed = [
        e.assessment.time_s for e in result.kernels if e.kernel.collective or not routers.isdisjoint(e.kernel.nodes)
    ]
    found = _TIMES[key] = result.totals.latency_s - math.fsum(untimed)
    return found


def all_to_all_time_s(shape: tuple[int, ...], dtype: str, profile: str) -> float | None:
    """The engine's MoE dispatch or combine for one moe_a2a_perf row (`shape` (ep, T, hidden, k, E)): the
    attention-DP all-to-all plan.experts inserts, T x k x hidden at the row's element size over ep GPUs, launched
    eagerly (DeepEP's benchmark times eager calls); None where ep is beyond the profile's node."""
    from mapper.cost.collectives import collective_time
    from mapper.evidence.candidates import profile_named
    from mapper.plan.precision import PLAN_DTYPE_BYTES

    ep, tokens, hidden, top_k, _ = shape
    hw = profile_named(profile)
    if ep > hw.interconnect.max_devices:
        return None
    message = tokens * top_k * hidden * PLAN_DTYPE_BYTES[dtype]
    return collective_time(Collective.ALL_TO_ALL, ep, message, hw.interconnect).time_s + hw.kernel_launch_s
