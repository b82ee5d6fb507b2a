"""The com.microsoft (ONNX Runtime contrib) fused ops exporters emit, and ONNX's own Attention: their shape
rules, work formulas and entries (one row an op)."""

from __future__ import annotations

from mapper.core.graph import LayerType, Node, OpClass
from mapper.core.result import MatrixShape
from mapper.core.vocab import MatrixKind
from mapper.ops.matrix import shape_in
from mapper.ops.registry import Backward, OpDef, Work
from mapper.ops.shape import Ctx, Out
from mapper.ops.work import GELU_ERF, LAYERNORM, SOFTMAX, Ins, Outs, PerOutput, PerRow

# Attention's input ranks: [B, S, hidden] (com.microsoft and ONNX) or [B, heads, S, head_dim] (ONNX opset 23 only).
SEQUENCE_RANK = 3
HEADS_RANK = 4


def attention_shape(c: Ctx) -> Out:
    x = c.shape(0)
    if len(x) not in (SEQUENCE_RANK, HEADS_RANK) or (len(x) == HEADS_RANK and c.node.domain not in ("", "ai.onnx")):
        raise ValueError(f"{c.node.op_type} input 0 has rank {len(x)}; it must be [B, S, hidden] or [B, heads, S, d]")
    if c.node.domain in ("", "ai.onnx"):  # opset-23 Attention(Q, K, V, ...)
        q, v = c.shape(0), c.shape(2)
        if len(q) == HEADS_RANK:  # [B, heads, S, head_dim]
            out = q[:-1] + (v[-1],)
        else:  # [B, S, hidden]: V's head size times Q's head count
            kv_heads = max(int(c.node.attr("kv_num_heads", 1)), 1)
            out = q[:-1] + (v[-1] // kv_heads * max(int(c.node.attr("q_num_heads", 1)), 1),)
        return [(out, c.dtype(0))] + [(c.shape(1), c.dtype(1))] * (len(c.node.outputs) - 1)
    w = c.shape(1)
    sizes = c.ints("qkv_hidden_sizes")
    hidden = sizes[2] if sizes else w[-1] // 3
    return [(x[:-1] + (hidden,), c.dtype(0))] * max(1, len(c.node.outputs))


def multi_head_attention_shape(c: Ctx) -> Out:
    q = c.shape(0)
    if len(q) not in (SEQUENCE_RANK, HEADS_RANK):
        raise ValueError(f"{c.node.op_type} query has rank {len(q)}; it must be [B, S, hidden] or [B, heads, S, d]")
    out: Out = [(q, c.dtype(0))]
    for i in range(1, len(c.node.outputs)):
        src = 3 + i if c.has(3 + i) else None  # present K/V follow past K/V's shape where given
        out.append((c.shape(src) if src is not None else q, c.dtype(0)))
    return out


def embed_layer_norm_shape(c: Ctx) -> Out:
    ids = c.shape(0)
    hidden = c.shape(2)[-1]
    return [(ids + (hidden,), "float32"), ((ids[0],), "int32")][: max(1, len(c.node.outputs))]


def bias_split_gelu_shape(c: Ctx) -> Out:
    """(X + bias) split in half along the last axis, one half times GELU of the other: half the width."""
    x = c.shape(0)
    return [(x[:-1] + (x[-1] // 2,), c.dtype(0))]


def attention_work(node: Node, ins: Ins, outs: Outs) -> Work:
    """com.microsoft / opset-23 attention: 2 GEMMs of 2*B*H*Sq*Skv*d plus softmax."""
    q = outs[0].shape
    if node.op_type == "Attention" and node.domain == "com.microsoft":
        b, s, hidden = shape_in(ins, 0)
        heads = int(node.attr("num_heads", 1))
        proj = 2.0 * b * s * hidden * shape_in(ins, 1)[-1]
        skv, d = s, q[-1] // heads
    else:
        heads = int(node.attr("num_heads", node.attr("q_num_heads", 1)))
        if len(q) == HEADS_RANK:
            b, heads, s, d = q
            skv = ins[1].shape[-2] if len(ins) > 1 and ins[1] is not None else s  # packed QKV: no separate K
        else:
            b, s, hidden = q
            d = hidden // max(heads, 1)
            skv = ins[1].shape[1] if len(ins) > 1 and ins[1] is not None else s
        proj = 0.0
    attn = 2 * 2.0 * b * heads * s * skv * d
    softmax = SOFTMAX * b * heads * s * skv
    kv_heads = int(node.attr("kv_num_heads", heads)) or heads  # GroupQueryAttention / opset-23: fewer K/V heads
    shape = MatrixShape(b * heads, s, skv, d, MatrixKind.ATTENTION, heads=heads, kv_heads=kv_heads)
    return proj + attn + softmax, proj + attn, b * heads * s * skv, shape


MAT, ATTENTION = OpClass.MATRIX, LayerType.ATTENTION
GRAD_ATTENTION, GRAD_VECTOR = Backward.ATTENTION, Backward.VECTOR  # a fused attention op: FlashAttention-2's
KEY_RANK = ((1, 2),)  # a separate key, where given, is at least a matrix

CONTRIB_OPS: tuple[OpDef, ...] = (
    OpDef(
        "Attention", attention_shape, MAT, attention_work, layer=ATTENTION, min_ranks=(3, 2), backward=GRAD_ATTENTION
    ),
    *(
        OpDef(
            op,
            multi_head_attention_shape,
            MAT,
            attention_work,
            layer=ATTENTION,
            min_ranks=(3,),
            optional_min_ranks=KEY_RANK,
            backward=GRAD_ATTENTION,
        )
        for op in ("MultiHeadAttention", "GroupQueryAttention")  # one entry each, the same rules
    ),
    # no work rule yet: reported unmodeled
    OpDef("PackedAttention", multi_head_attention_shape, min_ranks=(3,), backward=GRAD_ATTENTION),
    OpDef(
        "EmbedLayerNormalization",
        embed_layer_norm_shape,
        OpClass.REDUCTION,
        PerRow(LAYERNORM + 2),
        layer=LayerType.EMBEDDING,
        backward=GRAD_VECTOR,
    ),
    OpDef(
        "BiasSplitGelu",
        bias_split_gelu_shape,
        OpClass.TRANSCENDENTAL,
        PerOutput(GELU_ERF + 3, 1),
        min_ranks=(1,),
        backward=GRAD_VECTOR,
    ),  # per output element: two bias adds, the GELU, the product
)
