"""Normalizations, reductions and pooling: their shape rules and their entries (one row an op).

All are of the work class REDUCTION. A normalization costs FLOPs per output element and an rsqrt per row
(`PerRow`), a reduction one op per input element (`PerInput`), a pool its window per output (`Pooled`). Their
layer is Normalization (a norm), Pooling, or by class; the plain index reductions and the Reduce ops exporters
use inside larger blocks (mean, sum, max, min) roll up as Other.
"""

from __future__ import annotations

from mapper.core.graph import LayerType, OpClass
from mapper.ops.elementwise import same_shape
from mapper.ops.registry import Backward, FusionRole, OpDef
from mapper.ops.shape import Ctx, Out, spatial_out
from mapper.ops.work import BATCHNORM, LAYERNORM, RMSNORM, PerInput, PerRow, Pooled, lrn


def reduce_shape(c: Ctx) -> Out:
    x = c.shape(0)
    axes = c.axes(1, len(x))
    keep = bool(c.node.attr("keepdims", 1))
    if axes is None or (not axes and not c.node.attr("noop_with_empty_axes", 0)):
        axes = list(range(len(x)))
    out = tuple((1 if i in axes else d) for i, d in enumerate(x) if keep or i not in axes)
    return [(out, c.dtype(0))]


def arg_shape(c: Ctx) -> Out:
    x = c.shape(0)
    axis = int(c.node.attr("axis", 0)) % max(len(x), 1)
    keep = bool(c.node.attr("keepdims", 1))
    out = tuple((1 if i == axis else d) for i, d in enumerate(x) if keep or i != axis)
    return [(out, "int64")]


def topk_shape(c: Ctx) -> Out:
    x = list(c.shape(0))
    axis = int(c.node.attr("axis", -1)) % len(x)
    k = int(c.value(1).reshape(-1)[0]) if c.has(1) else int(c.node.attr("k"))
    x[axis] = k
    return [(tuple(x), c.dtype(0)), (tuple(x), "int64")]


def pool_shape(c: Ctx) -> Out:
    x = c.shape(0)
    kernel = c.ints("kernel_shape")
    if kernel is None:
        raise TypeError(f"{c.node.op_type} has no kernel_shape")
    out = (x[0], x[1]) + spatial_out(c, x, kernel, ceil=bool(c.node.attr("ceil_mode", 0)))
    res: Out = [(out, c.dtype(0))]
    if len(c.node.outputs) > 1:
        res.append((out, "int64"))
    return res


def global_pool_shape(c: Ctx) -> Out:
    x = c.shape(0)
    return [(x[:2] + (1,) * (len(x) - 2), c.dtype(0))]


RED, NORM, POOL, OTHER = OpClass.REDUCTION, LayerType.NORMALIZATION, LayerType.POOLING, LayerType.OTHER
REDUCE = PerInput()
POOLED = Pooled()
# the backward: 2x the traffic (dY broadcast back over what was reduced); none for an index (ArgMax); TopK's
# values' gradient scattered back to their places: the same movement
GRAD_VECTOR, GRAD_MOVE, NO_GRAD = Backward.VECTOR, Backward.MOVEMENT, Backward.NONE

NORMALIZATION_OPS: tuple[OpDef, ...] = (
    OpDef("LayerNormalization", same_shape, RED, PerRow(LAYERNORM), layer=NORM, backward=GRAD_VECTOR),
    OpDef("SkipLayerNormalization", same_shape, RED, PerRow(LAYERNORM + 1), layer=NORM, backward=GRAD_VECTOR),
    OpDef("SimplifiedLayerNormalization", same_shape, RED, PerRow(RMSNORM), layer=NORM, backward=GRAD_VECTOR),
    OpDef("SkipSimplifiedLayerNormalization", same_shape, RED, PerRow(RMSNORM + 1), layer=NORM, backward=GRAD_VECTOR),
    OpDef("RMSNormalization", same_shape, RED, PerRow(RMSNORM), layer=NORM, backward=GRAD_VECTOR),
    OpDef(
        "BatchNormalization",
        same_shape,
        RED,
        PerRow(BATCHNORM),
        layer=NORM,
        fusion=FusionRole.EPILOGUE,
        backward=GRAD_VECTOR,
    ),
    OpDef("InstanceNormalization", same_shape, RED, PerRow(LAYERNORM), layer=NORM, backward=GRAD_VECTOR),
    OpDef("GroupNormalization", same_shape, RED, PerRow(LAYERNORM), layer=NORM, backward=GRAD_VECTOR),
    OpDef("MeanVarianceNormalization", same_shape, RED, PerRow(LAYERNORM), layer=NORM, backward=GRAD_VECTOR),
    OpDef("LpNormalization", same_shape, RED, PerRow(3), layer=NORM, backward=GRAD_VECTOR),
    OpDef("GroupNorm", same_shape, RED, PerRow(LAYERNORM + 1), layer=NORM, backward=GRAD_VECTOR),
    OpDef(
        "SkipGroupNorm", same_shape, RED, PerRow(LAYERNORM + 3), layer=NORM, backward=GRAD_VECTOR
    ),  # + SiLU, skip and bias adds
    OpDef("LRN", same_shape, RED, lrn, layer=NORM, backward=GRAD_VECTOR),
)

REDUCTION_OPS: tuple[OpDef, ...] = (
    OpDef("ReduceMean", reduce_shape, RED, REDUCE, layer=OTHER, backward=GRAD_VECTOR),
    OpDef("ReduceSum", reduce_shape, RED, REDUCE, layer=OTHER, backward=GRAD_VECTOR),
    OpDef("ReduceMax", reduce_shape, RED, REDUCE, layer=OTHER, backward=GRAD_VECTOR),
    OpDef("ReduceMin", reduce_shape, RED, REDUCE, layer=OTHER, backward=GRAD_VECTOR),
    OpDef("ReduceProd", reduce_shape, RED, REDUCE, backward=GRAD_VECTOR),
    OpDef("ReduceL1", reduce_shape, RED, REDUCE, backward=GRAD_VECTOR),
    OpDef("ReduceL2", reduce_shape, RED, REDUCE, backward=GRAD_VECTOR),
    OpDef("ReduceLogSum", reduce_shape, RED, REDUCE, backward=GRAD_VECTOR),
    OpDef("ReduceLogSumExp", reduce_shape, RED, REDUCE, backward=GRAD_VECTOR),
    OpDef("ReduceSumSquare", reduce_shape, RED, REDUCE, backward=GRAD_VECTOR),
    OpDef("ArgMax", arg_shape, RED, REDUCE, layer=OTHER, backward=NO_GRAD),
    OpDef("ArgMin", arg_shape, RED, REDUCE, layer=OTHER, backward=NO_GRAD),
    OpDef("TopK", topk_shape, RED, REDUCE, layer=OTHER, backward=GRAD_MOVE),
)

POOLING_OPS: tuple[OpDef, ...] = (
    OpDef("MaxPool", pool_shape, RED, POOLED, layer=POOL, backward=GRAD_VECTOR),
    OpDef("AveragePool", pool_shape, RED, POOLED, layer=POOL, backward=GRAD_VECTOR),
    OpDef("LpPool", pool_shape, RED, POOLED, layer=POOL, backward=GRAD_VECTOR),
    OpDef("GlobalAveragePool", global_pool_shape, RED, POOLED, layer=POOL, backward=GRAD_VECTOR),
    OpDef("GlobalMaxPool", global_pool_shape, RED, POOLED, layer=POOL, backward=GRAD_VECTOR),
    OpDef("GlobalLpPool", global_pool_shape, RED, POOLED, layer=POOL, backward=GRAD_VECTOR),
)
