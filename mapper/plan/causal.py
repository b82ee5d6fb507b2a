"""A decoder's prompt attention as serving runtimes run it: causal, the key blocks above the diagonal skipped.

Part of the plan stage (pipeline, beside last_token_logits). FlashAttention's causal=True (vLLM, TensorRT-LLM's
context FMHA) computes a query only against the cached keys and the new ones up to its own: S new queries over
P cached keys compute P + (S + 1) / 2 scores a query, not the whole P + S, so the fused attention kernel's work is
scaled to that triangle; the tile search (`attention_tiling.causal_share`) skips the same blocks' re-reads. A
decode step (one query) and the exported graph under ONNX Runtime (an additive mask over the whole square) are
unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from mapper.core.result import Kernel
from mapper.core.timeline import Kernels
from mapper.core.vocab import MatrixKind

CAUSAL_NOTE = "causal: the key blocks above the diagonal skipped (FlashAttention causal=True)"


def triangle_share(m: int, n: int) -> float:
    """The share of the m x n score square a causal mask keeps: n - m cached keys, then the new ones up to each
    query's own (1 for a single query or a cross-attention: fewer keys than queries)."""
    if m <= 1 or n < m:
        return 1.0
    return (n - m + (m + 1) / 2) / n


def causal_prompt_attention(kernels: Sequence[Kernel]) -> Sequence[Kernel]:
    """Each fused attention of many new tokens with its work scaled to the causal triangle."""
    columns = Kernels.of(kernels)
    shares: dict[float, int] = {}

    def code_of(k: Kernel) -> int:
        s = k.matrix
        attends = s is not None and s.kind in (MatrixKind.ATTENTION, MatrixKind.LATENT_ATTENTION)
        share = triangle_share(s.m, s.n) if s is not None and attends else 1.0
        return shares.setdefault(share, len(shares)) if share < 1.0 else -1

    codes = columns.source_codes(code_of)
    by_code = list(shares)
    return columns.remade(codes, lambda k, code: _causal(k, by_code[code]))


def _causal(k: Kernel, share: float) -> Kernel:
    return k.replaced(
        flops=k.flops * share,
        matrix_flops=k.matrix_flops * share,
        sfu_ops=k.sfu_ops * share,
        note=(k.note + "; " if k.note else "") + CAUSAL_NOTE,
    )
