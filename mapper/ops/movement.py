"""Data movement, views, shape producers and host-side ops: their shape rules and entries (one row an op).

These move or name data and do no arithmetic (`no_work`); a view moves no bytes either (its class says so), and
a gather, slice, pad, tile or expand reads only the elements it keeps (`Reads.KEPT`). Control flow and the other
host-side ops carry a reason their time is not modeled.
"""

from __future__ import annotations

import math

import numpy as np

from mapper.core.dtypes import tensor_dtype
from mapper.core.graph import LayerType, OpClass
from mapper.ops.elementwise import same_shape
from mapper.ops.registry import Backward, OpDef, Reads
from mapper.ops.shape import Ctx, NoRule, Out, broadcast, reshape_target


def transpose_shape(c: Ctx) -> Out:
    x = c.shape(0)
    perm = c.ints("perm") or list(range(len(x)))[::-1]
    return [(tuple(x[p] for p in perm), c.dtype(0))]


def reshape_shape(c: Ctx) -> Out:
    target = c.value(1).reshape(-1) if c.has(1) else c.ints("shape")
    if target is None:
        raise TypeError("Reshape has neither a shape input nor a shape attribute")
    return [(reshape_target(c.shape(0), target, bool(c.node.attr("allowzero", 0))), c.dtype(0))]


def flatten_shape(c: Ctx) -> Out:
    x = c.shape(0)
    axis = int(c.node.attr("axis", 1))
    axis = axis + len(x) if axis < 0 else axis
    return [((math.prod(x[:axis]), math.prod(x[axis:])), c.dtype(0))]


def squeeze_shape(c: Ctx) -> Out:
    x = c.shape(0)
    axes = c.axes(1, len(x))
    if axes is None:
        axes = [i for i, d in enumerate(x) if d == 1]
    return [(tuple(d for i, d in enumerate(x) if i not in axes), c.dtype(0))]


def unsqueeze_shape(c: Ctx) -> Out:
    x = list(c.shape(0))
    raw = c.ints("axes")
    count = len(raw) if raw is not None else c.value(1).size
    axes = c.axes(1, len(x) + count)
    if axes is None:
        raise NoRule("Unsqueeze has no axes")
    for a in sorted(axes):
        x.insert(a, 1)
    return [(tuple(x), c.dtype(0))]


def concat_shape(c: Ctx) -> Out:
    shapes = [c.shape(i) for i in range(len(c.node.inputs)) if c.has(i)]
    rank = len(shapes[0])
    axis = int(c.node.attr("axis", 0)) % max(rank, 1)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), c.dtype(0))]


def split_shape(c: Ctx) -> Out:
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


def slice_shape(c: Ctx) -> Out:
    x = list(c.shape(0))
    if c.node.attr("starts") is not None:  # opset < 10: attributes
        starts, ends = c.ints("starts", []), c.ints("ends")
        if ends is None:
            raise TypeError("Slice has starts but no ends")
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


def gather_shape(c: Ctx) -> Out:
    x, idx = c.shape(0), c.shape(1)
    axis = int(c.node.attr("axis", 0)) % len(x)
    return [(x[:axis] + idx + x[axis + 1 :], c.dtype(0))]


def gather_elements_shape(c: Ctx) -> Out:
    return [(c.shape(1), c.dtype(0))]


def gather_nd_shape(c: Ctx) -> Out:
    x, idx = c.shape(0), c.shape(1)
    b = int(c.node.attr("batch_dims", 0))
    return [(idx[:-1] + x[b + idx[-1] :], c.dtype(0))]


def expand_shape(c: Ctx) -> Out:
    return [(broadcast(c.shape(0), tuple(int(v) for v in c.value(1).reshape(-1))), c.dtype(0))]


def tile_shape(c: Ctx) -> Out:
    reps = c.value(1).reshape(-1)
    return [(tuple(int(d) * int(r) for d, r in zip(c.shape(0), reps)), c.dtype(0))]  # Python ints: no wraparound


def pad_shape(c: Ctx) -> Out:
    x = c.shape(0)
    pads = c.ints("pads") or [int(v) for v in c.value(1).reshape(-1)]
    n = len(pads) // 2
    axes = list(range(len(x))) if not c.has(3) else [int(a) % len(x) for a in c.value(3).reshape(-1)]
    out = list(x)
    for j, a in enumerate(axes[:n]):
        out[a] += pads[j] + pads[j + n]
    return [(tuple(out), c.dtype(0))]


def resize_shape(c: Ctx) -> Out:
    x = c.shape(0)
    if c.node.op_type == "Resize" and c.has(3):
        sizes = [int(v) for v in c.value(3).reshape(-1)]
        return [(tuple(sizes), c.dtype(0))]
    scales_index = 2 if c.node.op_type == "Resize" else 1
    scales = c.node.attr("scales") or [float(v) for v in c.value(scales_index).reshape(-1)]
    return [(tuple(math.floor(d * s) for d, s in zip(x, scales)), c.dtype(0))]


def d2s_shape(c: Ctx) -> Out:
    n, ch, h, w = c.shape(0)
    b = int(c.node.attr("blocksize"))
    return [((n, ch // (b * b), h * b, w * b), c.dtype(0))]


def s2d_shape(c: Ctx) -> Out:
    n, ch, h, w = c.shape(0)
    b = int(c.node.attr("blocksize"))
    return [((n, ch * b * b, h // b, w // b), c.dtype(0))]


def one_hot_shape(c: Ctx) -> Out:
    idx = list(c.shape(0))
    depth = int(c.value(1).reshape(-1)[0])
    axis = int(c.node.attr("axis", -1))
    axis = axis + len(idx) + 1 if axis < 0 else axis
    idx.insert(axis, depth)
    return [(tuple(idx), c.dtype(2))]


# --- shape producers ---------------------------------------------------------------------------
def shape_op_shape(c: Ctx) -> Out:
    rank = len(c.shape(0))
    start = int(c.node.attr("start", 0))
    end = c.node.attr("end")
    return [((len(range(*slice(start, end).indices(rank))),), "int64")]


def size_op_shape(c: Ctx) -> Out:
    return [((), "int64")]


def const_of_shape_shape(c: Ctx) -> Out:
    value = c.node.attr("value")
    dtype = tensor_dtype(value) if value is not None else "float32"
    return [(tuple(int(v) for v in c.value(0).reshape(-1)), dtype)]


def range_shape(c: Ctx) -> Out:
    start, limit, delta = (c.value(i).reshape(-1)[0] for i in range(3))
    if delta == 0:
        raise ValueError("Range with a delta of 0 never ends")
    return [((max(math.ceil((limit - start) / delta), 0),), c.dtype(0))]


def nonzero_shape(c: Ctx) -> Out:
    v = c.value(0)
    return [((v.ndim, int(np.count_nonzero(v))), "int64")]


MOVE, VIEW, SHAPE, HOST = OpClass.DATA_MOVEMENT, OpClass.VIEW, OpClass.SHAPE_ONLY, OpClass.CONTROL
KEPT, EMBEDDING = Reads.KEPT, LayerType.EMBEDDING
# the backward: the same movement of the gradient; a gather's a scatter-add of dY (into the table's gradient
# where it reads one: the vector backward's); none for views (dY viewed back), index and shape producers, host ops
GRAD_MOVE, GRAD_VECTOR, NO_GRAD = Backward.MOVEMENT, Backward.VECTOR, Backward.NONE
BODY = "control flow runs on the host; its body is not modeled"  # an op with subgraphs (core.graph.SUBGRAPH_OPS)
HOST_SIDE = "a host-side op (sequences, sampling, data-dependent sizes, strings): its time is not modeled"

MOVEMENT_OPS: tuple[OpDef, ...] = (
    OpDef("Transpose", transpose_shape, MOVE, backward=GRAD_MOVE),
    OpDef("Concat", concat_shape, MOVE, backward=GRAD_MOVE),
    OpDef("Split", split_shape, MOVE, backward=GRAD_MOVE),
    OpDef("Slice", slice_shape, MOVE, reads=KEPT, backward=GRAD_MOVE),
    OpDef("Gather", gather_shape, MOVE, reads=KEPT, layer=EMBEDDING, backward=GRAD_VECTOR),
    OpDef("GatherElements", gather_elements_shape, MOVE, reads=KEPT, layer=EMBEDDING, backward=GRAD_VECTOR),
    OpDef("GatherND", gather_nd_shape, MOVE, reads=KEPT, layer=EMBEDDING, backward=GRAD_VECTOR),
    OpDef("ScatterND", same_shape, MOVE, backward=GRAD_MOVE),
    OpDef("ScatterElements", same_shape, MOVE, backward=GRAD_MOVE),
    OpDef("Scatter", same_shape, MOVE, backward=GRAD_MOVE),
    OpDef("Pad", pad_shape, MOVE, reads=KEPT, backward=GRAD_MOVE),
    OpDef("Resize", resize_shape, MOVE, backward=GRAD_MOVE),
    OpDef("Upsample", resize_shape, MOVE, backward=GRAD_MOVE),
    OpDef("Tile", tile_shape, MOVE, reads=KEPT, backward=GRAD_MOVE),
    OpDef("Expand", expand_shape, MOVE, reads=KEPT, backward=GRAD_MOVE),
    OpDef("DepthToSpace", d2s_shape, MOVE, backward=GRAD_MOVE),
    OpDef("SpaceToDepth", s2d_shape, MOVE, backward=GRAD_MOVE),
    OpDef("OneHot", one_hot_shape, MOVE, backward=NO_GRAD),
    OpDef("ConstantOfShape", const_of_shape_shape, MOVE, backward=NO_GRAD),
    OpDef("Range", range_shape, MOVE, backward=NO_GRAD),
    OpDef("NonZero", nonzero_shape, MOVE, backward=NO_GRAD),
    OpDef("RotaryEmbedding", same_shape, MOVE, backward=GRAD_MOVE),
)

VIEW_OPS: tuple[OpDef, ...] = (
    OpDef("Reshape", reshape_shape, VIEW, backward=NO_GRAD),
    OpDef("Flatten", flatten_shape, VIEW, backward=NO_GRAD),
    OpDef("Squeeze", squeeze_shape, VIEW, backward=NO_GRAD),
    OpDef("Unsqueeze", unsqueeze_shape, VIEW, backward=NO_GRAD),
    OpDef("Identity", same_shape, VIEW, backward=NO_GRAD),
    OpDef("Dropout", same_shape, VIEW, backward=NO_GRAD),
    OpDef("BiasDropout", same_shape, VIEW, backward=NO_GRAD),
    OpDef("Shape", shape_op_shape, SHAPE, backward=NO_GRAD),
    OpDef("Size", size_op_shape, SHAPE, backward=NO_GRAD),
    OpDef("Constant", op_class=SHAPE, backward=NO_GRAD),  # folded at import
)

HOST_OPS: tuple[OpDef, ...] = (
    OpDef("If", op_class=HOST, host_reason=BODY, backward=NO_GRAD),
    OpDef("Loop", op_class=HOST, host_reason=BODY, backward=NO_GRAD),
    OpDef("Scan", op_class=HOST, host_reason=BODY, backward=NO_GRAD),
    OpDef("SequenceMap", op_class=HOST, host_reason=BODY, backward=NO_GRAD),
    OpDef("SequenceConstruct", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("SequenceAt", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("SequenceInsert", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("SplitToSequence", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("ConcatFromSequence", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("NonMaxSuppression", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("Unique", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("RandomNormal", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("RandomUniform", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("RandomNormalLike", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("RandomUniformLike", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("Multinomial", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
    OpDef("StringNormalizer", op_class=HOST, host_reason=HOST_SIDE, backward=NO_GRAD),
)
