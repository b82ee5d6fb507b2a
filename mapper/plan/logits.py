"""The logits a runtime computes for a prompt: every token's, as the exported graph writes them, or each sequence's
last token's, the only one sampling reads.

Part of the plan stage (pipeline.apply_last_token_logits, after the devices). A serving engine prunes the hidden
states to the sampled positions before the LM head (vLLM's LogitsProcessor; TensorRT-LLM without
gather_context_logits), so a prefill of S tokens a sequence runs its LM head, and the logits' all-gather under TP,
on one row a sequence instead of S: a 70B prompt of 4,000 tokens skips a 4,000 x 32,000 x 8,192 GEMM. Only the
kernels writing the logits change; a decode step (one new token) is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from mapper.core.graph import Graph
from mapper.core.result import Kernel
from mapper.core.timeline import Kernels, positions_holding
from mapper.core.vocab import Collective
from mapper.plan.runtime import find_kv_appends, kv_cache_tensors
from mapper.plan.sharding import collective_kernel, through_views

if TYPE_CHECKING:
    from mapper.core.caches import ModelCaches

LOGITS_RANK = 3  # [batch, new tokens, vocab]
LAST_TOKEN_NOTE = "logits for each sequence's last token only (the runtime prunes before the LM head)"


def logits_outputs(graph: Graph) -> dict[str, int]:
    """A decoder's logits outputs and the new tokens a sequence each holds: the rank-3 graph outputs besides the
    KV cache, of a graph that updates a KV cache; empty for anything else."""
    if not find_kv_appends(graph):
        return {}
    cache = kv_cache_tensors(graph)
    out = {}
    for name in graph.outputs:
        spec = graph.tensors.get(name)
        if name not in cache and spec is not None and len(spec.shape) == LOGITS_RANK:
            out[name] = spec.shape[1]
    return out


def last_token_logits(graph: Graph, kernels: Sequence[Kernel], caches: ModelCaches | None = None) -> Sequence[Kernel]:
    """Per-device kernels with each logits kernel (the one whose nodes write a logits output) and its all-gather
    on one row a sequence: its work and its activations' traffic over the new tokens, its weights read whole."""
    tokens = {t: s for t, s in logits_outputs(graph).items() if s > 1}
    if not tokens:
        return kernels
    writers = {}  # the node computing each logits output, through the free views after it (an export's Identity)
    for name, s in tokens.items():
        node = graph.producer(through_views(graph, name))
        if node is not None:
            writers[node.name] = s
    columns = Kernels.of(kernels)
    names = columns.names
    changes: list[tuple[int, Hashable, Callable[..., Kernel], tuple]] = []
    for j, held in positions_holding(columns, writers.keys(), caches):
        k, s = columns.source(j), writers[held[0]]
        changes.append((j, (id(k), s), _one_row, (k, s)))
        gathered = f"{names[j]}:all-gather"  # its logits' all-gather under TP, after it
        at = _index(names, gathered, j + 1)
        if at is not None and columns.source(at).collective == Collective.ALL_GATHER:
            g = columns.source(at)
            gather = (gathered, Collective.ALL_GATHER, g.dram_bytes / s, g.devices, g.stage)
            changes.append((at, gather[1:], collective_kernel, gather))
    return columns.changed(sorted(changes, key=lambda change: change[0]))


def _index(names: Sequence[str], name: str, start: int) -> int | None:
    """The first position from `start` named `name` (a C-level scan), None where there is none."""
    try:
        return names.index(name, start)
    except ValueError:
        return None


def _one_row(k: Kernel, tokens: int) -> Kernel:
    matrix = k.matrix
    if matrix is not None:
        matrix = replace(matrix, m=max(1, math.ceil(matrix.m / tokens)))
    return k.replaced(
        flops=k.flops / tokens,
        matrix_flops=k.matrix_flops / tokens,
        sfu_ops=k.sfu_ops / tokens,
        dram_bytes=k.weight_bytes + (k.dram_bytes - k.weight_bytes) / tokens,
        matrix=matrix,
        rows=math.ceil(k.rows / tokens),
        note=LAST_TOKEN_NOTE,
    )
