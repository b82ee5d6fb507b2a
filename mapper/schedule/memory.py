"""Memory capacity per device: weights, activations and the KV cache at the bound batch and length.

Weights of column/row-parallel GEMMs (and of GEMMs batched over heads) are split across tensor-parallel ranks,
the rest replicated; pipeline stages hold their own kernels' weights; the KV cache (the present cache each exported
update writes, as `plan.runtime.find_kv_appends` finds them: the past plus this step) is split by heads, except a
cache whose update tensor parallelism leaves replicated (MLA's latent: one key head every query head shares), which
every rank holds whole. Activations: the largest live working set of one kernel (its non-weight traffic), a lower
bound that ignores allocator slack.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mapper.core.graph import Graph
from mapper.core.result import DeviceFit, Kernel, MemoryPlan
from mapper.core.timeline import Kernels, in_order_sum
from mapper.core.vocab import Shard
from mapper.plan.precision import Sizer
from mapper.plan.runtime import find_kv_appends
from mapper.plan.sharding import SHARD_CODES

PARALLEL_DEGREES = (1, 2, 4, 8, 16, 32, 64)
WEIGHT_SPLITS = (Shard.COLUMN, Shard.ROW, Shard.HEADS)  # roles whose weights tensor parallelism splits across ranks
SPLIT_CODES = [SHARD_CODES[role] for role in WEIGHT_SPLITS]


def kv_cache_bytes(graph: Graph, sizer: Sizer, only: frozenset[str] | None = None) -> float:
    """The KV cache after this step: the present cache each exported update writes (`plan.runtime.find_kv_appends`:
    a Concat or ScatterND from a past-cache graph input to a present-cache graph output); `only`: the updates of
    these nodes alone."""
    tensors = graph.tensors
    return sum(
        sizer.bytes_of(a.present)
        for a in find_kv_appends(graph)
        if (only is None or a.node in only) and a.present in tensors
    )


def _footprint(sharded_w: float, replicated_w: float, kv: tuple[float, float], act: float, tp: int, pp: int) -> float:
    """Bytes one device holds: `kv` is (the cache split by heads, the cache every rank holds whole)."""
    return (sharded_w / tp + replicated_w) / pp + kv[0] / (tp * pp) + kv[1] / pp + act / tp


def plan_memory(
    graph: Graph, kernels: Sequence[Kernel], sizer: Sizer, capacity_bytes: float, tp: int, pp: int, max_devices: int
) -> MemoryPlan:
    """`kernels` carry their tensor-parallel roles (full size, before the split)."""
    columns = Kernels.of(kernels)  # every figure from the sources, the nodes from their column: none written
    # each figure summed in kernel order as a sum of its own would: split and replicated weights, the nodes run
    # whole, the largest activation traffic
    weights = columns.column("weight_bytes")
    shard = columns.source_codes(lambda k: SHARD_CODES.get(k.shard, -1))  # unassigned (""): -1
    split = np.isin(shard, SPLIT_CODES)
    sharded_w, replicated_w = in_order_sum(weights[split]), in_order_sum(weights[~split])
    moved = columns.column("dram_bytes") - weights
    act = float(moved.max()) if len(moved) else 0.0
    replicated = [n for j in np.flatnonzero(shard == SHARD_CODES[Shard.REPLICATED]).tolist() for n in columns.nodes[j]]
    whole = frozenset(replicated)
    whole_kv = kv_cache_bytes(graph, sizer, whole) if whole else 0.0
    kv = (kv_cache_bytes(graph, sizer) - whole_kv, whole_kv)
    per_device = _footprint(sharded_w, replicated_w, kv, act, tp, pp)
    smallest = None
    options = sorted(
        ((t, p) for t in PARALLEL_DEGREES for p in PARALLEL_DEGREES if t * p <= max_devices),
        key=lambda tp_pp: (tp_pp[0] * tp_pp[1], -tp_pp[0]),
    )
    for t, p in options:
        need = _footprint(sharded_w, replicated_w, kv, act, t, p)
        if need <= capacity_bytes:
            smallest = DeviceFit(t, p, need)
            break
    return MemoryPlan(
        per_device,
        capacity_bytes,
        per_device <= capacity_bytes,
        max(0.0, per_device - capacity_bytes),
        (sharded_w / tp + replicated_w) / pp,
        kv[0] / (tp * pp) + kv[1] / pp,
        act / tp,
        smallest,
    )
