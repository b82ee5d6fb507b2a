"""Layer pieces shared by the zoo's transformer families, written the way exporters emit them.

Each function appends nodes to a GraphBuilder and returns the output name. Families (BERT,
GPT-2, ViT, Llama) compose these; none of them writes its own attention or norm.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

from mapper.zoo.builder import GraphBuilder

FLOAT32_MIN = float(np.finfo(np.float32).min)  # HF's mask value: torch.finfo(dtype).min
INT64_MAX = int(np.iinfo(np.int64).max)  # the exporter's "to the end" for Slice


# -- projections and norms ----------------------------------------------------------------------
def linear(b: GraphBuilder, x: str, in_features: int, out_features: int, name: str, bias: bool = True) -> str:
    """nn.Linear on a 3-D activation: MatMul with the [in, out] weight, then Add bias."""
    with b.scope(name):
        y = b.op("MatMul", x, b.weight("weight", [in_features, out_features]))
        return b.op("Add", y, b.weight("bias", [out_features])) if bias else y


def gemm(b: GraphBuilder, x: str, in_features: int, out_features: int, name: str) -> str:
    """nn.Linear on a 2-D activation: the exporter's Gemm with transB=1 and a [out, in] weight."""
    with b.scope(name):
        return b.op(
            "Gemm",
            x,
            b.weight("weight", [out_features, in_features]),
            b.weight("bias", [out_features]),
            alpha=1.0,
            beta=1.0,
            transB=1,
        )


def layer_norm(b: GraphBuilder, x: str, hidden: int, name: str, eps: float) -> str:
    """nn.LayerNorm over the last axis: one LayerNormalization node (opset 17)."""
    with b.scope(name):
        return b.op(
            "LayerNormalization", x, b.weight("weight", [hidden]), b.weight("bias", [hidden]), axis=-1, epsilon=eps
        )


def rms_norm(b: GraphBuilder, x: str, hidden: int, name: str, eps: float) -> str:
    """LlamaRMSNorm: x * 1/sqrt(mean(x^2) + eps) * weight, as HF's eager code traces."""
    with b.scope(name):
        mean_square = b.op("ReduceMean", b.op("Pow", x, b.scalar(2.0)), axes=[-1], keepdims=1)
        inv_rms = b.op("Reciprocal", b.op("Sqrt", b.op("Add", mean_square, b.scalar(eps))))
        return b.op("Mul", b.weight("weight", [hidden]), b.op("Mul", x, inv_rms))


# -- activations --------------------------------------------------------------------------------
def gelu_erf(b: GraphBuilder, x: str) -> str:
    """Exact GELU as exported before opset 20: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    erf = b.op("Erf", b.op("Div", x, b.scalar(math.sqrt(2.0))))
    return b.op("Mul", b.op("Mul", x, b.scalar(0.5)), b.op("Add", erf, b.scalar(1.0)))


def gelu_tanh(b: GraphBuilder, x: str) -> str:
    """GPT-2's gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    cubic = b.op("Mul", b.op("Pow", x, b.scalar(3.0)), b.scalar(0.044715))
    inner = b.op("Mul", b.op("Add", x, cubic), b.scalar(math.sqrt(2.0 / math.pi)))
    return b.op("Mul", b.op("Mul", x, b.scalar(0.5)), b.op("Add", b.op("Tanh", inner), b.scalar(1.0)))


def swiglu(b: GraphBuilder, x: str, hidden: int, ffn: int, name: str) -> str:
    """LlamaMLP: down(silu(gate(x)) * up(x)), silu traced as x * Sigmoid(x)."""
    with b.scope(name):
        gate = linear(b, x, hidden, ffn, "gate_proj", bias=False)
        up = linear(b, x, hidden, ffn, "up_proj", bias=False)
        act = b.op("Mul", gate, b.op("Sigmoid", gate))
        return linear(b, b.op("Mul", act, up), ffn, hidden, "down_proj", bias=False)


# -- attention ----------------------------------------------------------------------------------
def split_heads(b: GraphBuilder, x: str, batch: str, seq: str, heads: int, head_dim: int) -> str:
    """[batch, seq, heads*head_dim] -> [batch, heads, seq, head_dim] (view + transpose)."""
    shape = b.shape_of(batch, seq, [heads, head_dim])
    return b.op("Transpose", b.op("Reshape", x, shape), perm=[0, 2, 1, 3])


def merge_heads(b: GraphBuilder, x: str, batch: str, seq: str, hidden: int) -> str:
    """[batch, heads, seq, head_dim] -> [batch, seq, hidden] (transpose + view)."""
    return b.op("Reshape", b.op("Transpose", x, perm=[0, 2, 1, 3]), b.shape_of(batch, seq, [hidden]))


def split_fused_qkv(b: GraphBuilder, qkv: str, hidden: int) -> tuple[str, str, str]:
    """One [.., 3*hidden] projection (GPT-2 c_attn, torch MultiheadAttention in_proj) -> q, k, v."""
    return b.op("Split", qkv, b.const([hidden, hidden, hidden]), axis=-1, outputs=3)


def scaled_dot_product(  # noqa: PLR0913 (two mask kinds and the soft-cap, each optional)
    b: GraphBuilder,
    q: str,
    k: str,
    v: str,
    head_dim: int,
    additive_mask: str | None = None,
    keep_mask: str | None = None,
    softcap: float = 0.0,
) -> str:
    """Unfused eager attention: MatMul(Q, K^T) / sqrt(d) -> mask -> Softmax -> MatMul(P, V).

    `additive_mask` is added to the scores (BERT, Llama); `keep_mask` is a bool tensor where
    False positions are replaced by the dtype minimum through Where (GPT-2's causal bias).
    `softcap` > 0 caps the scores as Gemma-2 does before masking: cap * tanh(scores / cap).
    """
    scores = b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2]))
    scores = b.op("Div", scores, b.scalar(math.sqrt(head_dim)))
    if softcap:
        scores = soft_cap(b, scores, softcap)
    if additive_mask is not None:
        scores = b.op("Add", scores, additive_mask)
    if keep_mask is not None:
        scores = b.op("Where", keep_mask, scores, b.scalar(FLOAT32_MIN))
    return b.op("MatMul", b.op("Softmax", scores, axis=-1), v)


def soft_cap(b: GraphBuilder, x: str, cap: float) -> str:
    """Gemma-2's logit soft-capping: cap * tanh(x / cap) (attention scores at 50, final logits at 30)."""
    return b.op("Mul", b.op("Tanh", b.op("Div", x, b.scalar(cap))), b.scalar(cap))


def padding_mask(b: GraphBuilder, attention_mask: str) -> str:
    """BERT's extended mask: (1 - mask[:, None, None, :]) * min, added to every layer's scores."""
    mask = b.op("Cast", b.op("Unsqueeze", attention_mask, b.const([1, 2])), to=1)
    return b.op("Mul", b.op("Sub", b.scalar(1.0), mask), b.scalar(FLOAT32_MIN))


# -- decoding with a KV cache -------------------------------------------------------------------
def cache_lengths(b: GraphBuilder, input_ids: str, past_key: str) -> tuple[str, str, str]:
    """0-D int64 (seq, past, total): new tokens, cached tokens (dim 2 of the cache), their sum."""
    seq = b.dim(input_ids, 1)
    past = b.dim(past_key, 2)
    return seq, past, b.op("Add", past, seq)


def positions(b: GraphBuilder, past: str, total: str) -> str:
    """Positions of the new tokens: Range(past, past + seq) (0-D bounds, so past may be 0)."""
    return b.op("Range", past, total, b.const(1))


def causal_keep_mask(b: GraphBuilder, seq: str, past: str, total: str) -> str:
    """Bool [seq, total]: query i sees key j when j <= past + i (Trilu with k = past)."""
    ones = b.op(
        "ConstantOfShape",
        b.shape_of(b.op("Unsqueeze", seq, b.const([0])), b.op("Unsqueeze", total, b.const([0]))),
        value=helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0]),
    )
    return b.op("Cast", b.op("Trilu", ones, past, upper=0), to=9)


def append_cache(b: GraphBuilder, past: str, new: str, present_name: str) -> str:
    """Concat the cached [batch, heads, past, d] with the new keys/values along axis 2."""
    return b.op("Concat", past, new, axis=2, outputs=[present_name])


def repeat_kv(b: GraphBuilder, x: str, batch: str, total: str, kv_heads: int, n_rep: int, head_dim: int) -> str:
    """HF repeat_kv for grouped-query attention: Unsqueeze -> Expand -> Reshape to all heads."""
    if n_rep == 1:
        return x
    expanded = b.op(
        "Expand",
        b.op("Unsqueeze", x, b.const([2])),
        b.shape_of(batch, [kv_heads, n_rep], b.op("Unsqueeze", total, b.const([0])), [head_dim]),
    )
    return b.op(
        "Reshape", expanded, b.shape_of(batch, [kv_heads * n_rep], b.op("Unsqueeze", total, b.const([0])), [head_dim])
    )
