"""Shape rules for data movement, views, shape producers and the contrib ops exporters emit.

Each function registers itself with `@rule` (shapes/base.py).
"""

from __future__ import annotations

import math

import numpy as np

from mapper.model.dtypes import tensor_dtype
from mapper.model.quantized import CHANNELS_LAST_UNSUPPORTED, QUANTIZED_OPS, twin_node
from mapper.model.shapes.base import RULES, Ctx, NoRule, Out, broadcast, reshape_target, rule


# --- data movement and views -------------------------------------------------------------------
@rule("Transpose")
def _transpose(c: Ctx) -> Out:
    x = c.shape(0)
    perm = c.ints("perm") or list(range(len(x)))[::-1]
    return [(tuple(x[p] for p in perm), c.dtype(0))]


@rule("Reshape")
def _reshape(c: Ctx) -> Out:
    target = c.value(1).reshape(-1) if c.has(1) else c.ints("shape")
    return [(reshape_target(c.shape(0), target, bool(c.node.attr("allowzero", 0))), c.dtype(0))]


@rule("Flatten")
def _flatten(c: Ctx) -> Out:
    x = c.shape(0)
    axis = int(c.node.attr("axis", 1))
    axis = axis + len(x) if axis < 0 else axis
    return [((math.prod(x[:axis]), math.prod(x[axis:])), c.dtype(0))]


@rule("Squeeze")
def _squeeze(c: Ctx) -> Out:
    x = c.shape(0)
    axes = c.axes(1, len(x))
    if axes is None:
        axes = [i for i, d in enumerate(x) if d == 1]
    return [(tuple(d for i, d in enumerate(x) if i not in axes), c.dtype(0))]


@rule("Unsqueeze")
def _unsqueeze(c: Ctx) -> Out:
    x = list(c.shape(0))
    raw = c.ints("axes")
    count = len(raw) if raw is not None else c.value(1).size
    axes = c.axes(1, len(x) + count)
    for a in sorted(axes):
        x.insert(a, 1)
    return [(tuple(x), c.dtype(0))]


@rule("Concat")
def _concat(c: Ctx) -> Out:
    shapes = [c.shape(i) for i in range(len(c.node.inputs)) if c.has(i)]
    rank = len(shapes[0])
    axis = int(c.node.attr("axis", 0)) % max(rank, 1)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), c.dtype(0))]


@rule("Split")
def _split(c: Ctx) -> Out:
    x = list(c.shape(0))
    axis = int(c.node.attr("axis", 0)) % len(x)
    parts = c.ints("split")
    if parts is None and c.has(1):
        parts = [int(v) for v in c.value(1).reshape(-1)]
    if parts is None:
        n = int(c.node.attr("num_outputs", len(c.node.outputs)))
        size = math.ceil(x[axis] / n)
        parts = [min(size, x[axis] - i * size) for i in range(n)]
    return [(tuple(x[:axis] + [p] + x[axis + 1 :]), c.dtype(0)) for p in parts]


@rule("Slice")
def _slice(c: Ctx) -> Out:
    x = list(c.shape(0))
    if c.node.attr("starts") is not None:  # opset < 10: attributes
        starts, ends = c.ints("starts"), c.ints("ends")
        axes = c.ints("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in c.value(1).reshape(-1)]
        ends = [int(v) for v in c.value(2).reshape(-1)]
        axes = [int(v) for v in c.value(3).reshape(-1)] if c.has(3) else list(range(len(starts)))
        steps = [int(v) for v in c.value(4).reshape(-1)] if c.has(4) else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = a % len(x)
        x[a] = len(range(*slice(s, e, st).indices(x[a])))
    return [(tuple(x), c.dtype(0))]


@rule("Gather")
def _gather(c: Ctx) -> Out:
    x, idx = c.shape(0), c.shape(1)
    axis = int(c.node.attr("axis", 0)) % len(x)
    return [(x[:axis] + idx + x[axis + 1 :], c.dtype(0))]


@rule("GatherElements")
def _gather_elements(c: Ctx) -> Out:
    return [(c.shape(1), c.dtype(0))]


@rule("GatherND")
def _gather_nd(c: Ctx) -> Out:
    x, idx = c.shape(0), c.shape(1)
    b = int(c.node.attr("batch_dims", 0))
    return [(idx[:-1] + x[b + idx[-1] :], c.dtype(0))]


@rule("Expand")
def _expand(c: Ctx) -> Out:
    return [(broadcast(c.shape(0), tuple(int(v) for v in c.value(1).reshape(-1))), c.dtype(0))]


@rule("Tile")
def _tile(c: Ctx) -> Out:
    reps = c.value(1).reshape(-1)
    return [(tuple(int(d) * int(r) for d, r in zip(c.shape(0), reps)), c.dtype(0))]  # Python ints: no wraparound


@rule("Pad")
def _pad(c: Ctx) -> Out:
    x = c.shape(0)
    pads = c.ints("pads") or [int(v) for v in c.value(1).reshape(-1)]
    n = len(pads) // 2
    axes = list(range(len(x))) if not c.has(3) else [int(a) % len(x) for a in c.value(3).reshape(-1)]
    out = list(x)
    for j, a in enumerate(axes[:n]):
        out[a] += pads[j] + pads[j + n]
    return [(tuple(out), c.dtype(0))]


@rule("Resize", "Upsample")
def _resize(c: Ctx) -> Out:
    x = c.shape(0)
    if c.node.op_type == "Resize" and c.has(3):
        sizes = [int(v) for v in c.value(3).reshape(-1)]
        return [(tuple(sizes), c.dtype(0))]
    scales_index = 2 if c.node.op_type == "Resize" else 1
    scales = c.node.attr("scales") or [float(v) for v in c.value(scales_index).reshape(-1)]
    return [(tuple(math.floor(d * s) for d, s in zip(x, scales)), c.dtype(0))]


@rule("DepthToSpace")
def _d2s(c: Ctx) -> Out:
    n, ch, h, w = c.shape(0)
    b = int(c.node.attr("blocksize"))
    return [((n, ch // (b * b), h * b, w * b), c.dtype(0))]


@rule("SpaceToDepth")
def _s2d(c: Ctx) -> Out:
    n, ch, h, w = c.shape(0)
    b = int(c.node.attr("blocksize"))
    return [((n, ch * b * b, h // b, w // b), c.dtype(0))]


@rule("OneHot")
def _one_hot(c: Ctx) -> Out:
    idx = list(c.shape(0))
    depth = int(c.value(1).reshape(-1)[0])
    axis = int(c.node.attr("axis", -1))
    axis = axis + len(idx) + 1 if axis < 0 else axis
    idx.insert(axis, depth)
    return [(tuple(idx), c.dtype(2))]


@rule("Einsum")
def _einsum(c: Ctx) -> Out:
    eq = c.node.attr("equation")
    if not isinstance(eq, str):
        raise TypeError("Einsum has no equation attribute")
    eq = eq.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    sizes: dict[str, int] = {}
    for term, i in zip(lhs.split(","), range(len(c.node.inputs))):
        if "..." in term:
            raise NoRule("Einsum with ellipsis")
        for ch, d in zip(term, c.shape(i)):
            sizes[ch] = max(sizes.get(ch, 1), d)
    if not rhs:
        rhs = "".join(sorted(ch for ch in sizes if lhs.count(ch) == 1))
    return [(tuple(sizes[ch] for ch in rhs), c.dtype(0))]


# --- shape producers ---------------------------------------------------------------------------
@rule("Shape")
def _shape(c: Ctx) -> Out:
    rank = len(c.shape(0))
    start = int(c.node.attr("start", 0))
    end = c.node.attr("end")
    return [((len(range(*slice(start, end).indices(rank))),), "int64")]


@rule("Size")
def _size(c: Ctx) -> Out:
    return [((), "int64")]


@rule("ConstantOfShape")
def _const_of_shape(c: Ctx) -> Out:
    value = c.node.attr("value")
    dtype = tensor_dtype(value) if value is not None else "float32"
    return [(tuple(int(v) for v in c.value(0).reshape(-1)), dtype)]


@rule("Range")
def _range(c: Ctx) -> Out:
    start, limit, delta = (c.value(i).reshape(-1)[0] for i in range(3))
    if delta == 0:
        raise ValueError("Range with a delta of 0 never ends")
    return [((max(math.ceil((limit - start) / delta), 0),), c.dtype(0))]


@rule("NonZero")
def _nonzero(c: Ctx) -> Out:
    v = c.value(0)
    return [((v.ndim, int(np.count_nonzero(v))), "int64")]


# --- contrib (com.microsoft) fused ops exporters emit --------------------------------------------
# Attention's input ranks: [B, S, hidden] (com.microsoft and ONNX) or [B, heads, S, head_dim] (ONNX opset 23 only).
SEQUENCE_RANK = 3
HEADS_RANK = 4


@rule("Attention")
def _ms_attention(c: Ctx) -> Out:
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


@rule("MultiHeadAttention", "GroupQueryAttention", "PackedAttention")
def _ms_mha(c: Ctx) -> Out:
    q = c.shape(0)
    if len(q) not in (SEQUENCE_RANK, HEADS_RANK):
        raise ValueError(f"{c.node.op_type} query has rank {len(q)}; it must be [B, S, hidden] or [B, heads, S, d]")
    out: Out = [(q, c.dtype(0))]
    for i in range(1, len(c.node.outputs)):
        src = 3 + i if c.has(3 + i) else None  # present K/V follow past K/V's shape where given
        out.append((c.shape(src) if src is not None else q, c.dtype(0)))
    return out


@rule("EmbedLayerNormalization")
def _embed_ln(c: Ctx) -> Out:
    ids = c.shape(0)
    hidden = c.shape(2)[-1]
    return [(ids + (hidden,), "float32"), ((ids[0],), "int32")][: max(1, len(c.node.outputs))]


@rule(*QUANTIZED_OPS)
def _quantized(c: Ctx) -> Out:
    """A QOperator-format op: its float twin's rule over its data operands (`quantized.QUANTIZED_OPS`)."""
    op = QUANTIZED_OPS[c.node.op_type]
    if c.node.op_type in CHANNELS_LAST_UNSUPPORTED and c.node.attr("channels_last", 0):
        raise NoRule(f"{c.node.op_type} with channels_last=1 (NHWC data) has no shape rule here")
    twin, positions = twin_node(c.node)  # (infer_node checked the operands' ranks against the twin's)
    inner = Ctx(twin, tuple(c.specs[p] for p in positions), tuple(c.values[p] for p in positions))
    quantized = not op.float_output and (op.output_scale is None or c.has(op.output_scale))
    return [(shape, dtype if quantized else "float32") for shape, dtype in RULES[op.twin](inner)]
