"""Shape rules for elementwise, quantization, matrix, convolution, pooling and reduction ops.

Each function registers itself with `@rule` (shapes/base.py); data movement, views and contrib ops
are in shapes/movement.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mapper.model.dtypes import dtype_name
from mapper.model.shapes.base import Ctx, NoRule, Out, Shape, broadcast, rule

MATRIX_RANK = 2  # a matrix's axes: FusedMatMul's transA/transB swap the last two (com.microsoft contrib spec)

# --- same shape as input 0 ---------------------------------------------------------------
SAME_SHAPE = (
    "Relu",
    "LeakyRelu",
    "PRelu",
    "Elu",
    "Selu",
    "Celu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "Erf",
    "Gelu",
    "FastGelu",
    "QuickGelu",
    "BiasGelu",
    "Softplus",
    "Softsign",
    "Mish",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Neg",
    "Abs",
    "Sign",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Not",
    "IsNaN",
    "IsInf",
    "Clip",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "LRN",
    "Identity",
    "Trilu",
    "CumSum",
    "InstanceNormalization",
    "GroupNormalization",
    "MeanVarianceNormalization",
    "LpNormalization",
    "Shrink",
    "ThresholdedRelu",
    "ScatterND",
    "ScatterElements",
    "Scatter",
    "RotaryEmbedding",
    "BiasDropout",
    "SimplifiedLayerNormalization",
    "RMSNormalization",
    "BiasAdd",
)


@rule(*SAME_SHAPE)
def _same(c: Ctx) -> Out:
    return [(c.shape(0), c.dtype(0))] * max(1, len(c.node.outputs))


@rule(
    "Dropout",
    "BatchNormalization",
    "LayerNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "GroupNorm",
    "SkipGroupNorm",
)
def _norm_like(c: Ctx) -> Out:
    out: Out = [(c.shape(0), c.dtype(0))]
    # Extra outputs: Dropout mask (same shape), LayerNorm mean/inv_std (reduced), BN running stats.
    for _ in c.node.outputs[1:]:
        out.append((c.shape(0), c.dtype(0)))
    return out


# --- broadcasting elementwise -----------------------------------------------------------------
BINARY = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "BitShift",
    "And",
    "Or",
    "Xor",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
)
COMPARE = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not"}


@rule(*BINARY)
def _broadcast(c: Ctx) -> Out:
    shapes = [c.shape(i) for i in range(len(c.node.inputs)) if c.has(i)]
    dtype = "bool" if c.node.op_type in COMPARE else c.dtype(0)
    return [(broadcast(*shapes), dtype)]


@rule("Where")
def _where(c: Ctx) -> Out:
    return [(broadcast(c.shape(0), c.shape(1), c.shape(2)), c.dtype(1))]


@rule("QuantizeLinear")
def _quantize(c: Ctx) -> Out:
    """The zero point's type; without one, opset 21's output_dtype, else uint8 (the ONNX default)."""
    if c.has(2):
        return [(c.shape(0), c.dtype(2))]
    to = int(c.node.attr("output_dtype", 0))
    return [(c.shape(0), dtype_name(to) if to else "uint8")]


@rule("DequantizeLinear")
def _dequantize(c: Ctx) -> Out:
    return [(c.shape(0), c.dtype(1))]  # the scale's float type


@rule("DynamicQuantizeLinear")
def _dynamic_quantize(c: Ctx) -> Out:
    return [(c.shape(0), "uint8"), ((), "float32"), ((), "uint8")][: max(1, len(c.node.outputs))]


@rule("Cast")
def _cast(c: Ctx) -> Out:
    return [(c.shape(0), dtype_name(int(c.node.attr("to", 1))))]


@rule("CastLike")
def _cast_like(c: Ctx) -> Out:
    return [(c.shape(0), c.dtype(1))]


# --- matrix ops ----------------------------------------------------------------------------
def matmul_shape(a: Shape, b: Shape) -> Shape:
    if len(a) == 0 or len(b) == 0:
        raise NoRule("MatMul of a scalar")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise NoRule(f"MatMul inner dims differ: {a} x {b}")
    out = broadcast(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


@rule("BiasSplitGelu")
def _bias_split_gelu(c: Ctx) -> Out:
    """(X + bias) split in half along the last axis, one half times GELU of the other: half the width."""
    x = c.shape(0)
    return [(x[:-1] + (x[-1] // 2,), c.dtype(0))]


@rule("MatMul", "MatMulInteger", "FusedMatMul", "GemmFastGelu")
def _matmul(c: Ctx) -> Out:
    a, b = c.shape(0), c.shape(1)
    if c.node.op_type == "FusedMatMul":
        if c.node.attr("transA", 0) and len(a) >= MATRIX_RANK:
            a = a[:-2] + (a[-1], a[-2])
        if c.node.attr("transB", 0) and len(b) >= MATRIX_RANK:
            b = b[:-2] + (b[-1], b[-2])
    dtype = "int32" if c.node.op_type == "MatMulInteger" else c.dtype(0)
    return [(matmul_shape(a, b), dtype)]


@rule("MatMulNBits")
def _matmul_nbits(c: Ctx) -> Out:
    return [(c.shape(0)[:-1] + (int(c.node.attr("N")),), c.dtype(0))]


@rule("Gemm")
def _gemm(c: Ctx) -> Out:
    a, b = c.shape(0), c.shape(1)
    m = a[1] if c.node.attr("transA", 0) else a[0]
    n = b[0] if c.node.attr("transB", 0) else b[1]
    return [((m, n), c.dtype(0))]


def _pool_out(size: int, k: int, s: int, pad: int, d: int, ceil: bool) -> int:
    eff = d * (k - 1) + 1
    span = size + pad - eff
    out = (math.ceil(span / s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + pad - (pad // 2 if pad else 0):
        out -= 1  # the last window must start inside the padded input (onnx semantics)
    return max(out, 0)


def spatial_out(c: Ctx, x: Shape, kernel: Sequence[int], ceil: bool = False) -> tuple[int, ...]:
    n = len(kernel)
    strides = c.ints("strides", [1] * n)
    dil = c.ints("dilations", [1] * n)
    pads = c.ints("pads", [0] * (2 * n))
    auto = c.node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    dims = []
    for i in range(n):
        size = x[2 + i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            dims.append(math.ceil(size / strides[i]))
        elif auto == "VALID":
            dims.append((size - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1)
        else:
            dims.append(_pool_out(size, kernel[i], strides[i], pads[i] + pads[i + n], dil[i], ceil))
    return tuple(dims)


@rule("Conv", "ConvInteger", "FusedConv")
def _conv(c: Ctx) -> Out:
    x, w = c.shape(0), c.shape(1)
    kernel = c.ints("kernel_shape") or list(w[2:])
    return [((x[0], w[0]) + spatial_out(c, x, kernel), c.dtype(0))]


@rule("ConvTranspose")
def _conv_transpose(c: Ctx) -> Out:
    x, w = c.shape(0), c.shape(1)
    n = len(x) - 2
    kernel = c.ints("kernel_shape") or list(w[2:])
    group = int(c.node.attr("group", 1))
    out_shape = c.ints("output_shape")
    if out_shape:
        return [((x[0], w[1] * group) + tuple(out_shape[-n:]), c.dtype(0))]
    s = c.ints("strides", [1] * n)
    d = c.ints("dilations", [1] * n)
    p = c.ints("pads", [0] * (2 * n))
    op = c.ints("output_padding", [0] * n)
    dims = tuple(s[i] * (x[2 + i] - 1) + op[i] + ((kernel[i] - 1) * d[i] + 1) - p[i] - p[i + n] for i in range(n))
    return [((x[0], w[1] * group) + dims, c.dtype(0))]


@rule("MaxPool", "AveragePool", "LpPool")
def _pool(c: Ctx) -> Out:
    x = c.shape(0)
    out = (x[0], x[1]) + spatial_out(c, x, c.ints("kernel_shape"), ceil=bool(c.node.attr("ceil_mode", 0)))
    res: Out = [(out, c.dtype(0))]
    if len(c.node.outputs) > 1:
        res.append((out, "int64"))
    return res


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(c: Ctx) -> Out:
    x = c.shape(0)
    return [(x[:2] + (1,) * (len(x) - 2), c.dtype(0))]


# --- reductions ----------------------------------------------------------------------------
REDUCE = (
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)


@rule(*REDUCE)
def _reduce(c: Ctx) -> Out:
    x = c.shape(0)
    axes = c.axes(1, len(x))
    keep = bool(c.node.attr("keepdims", 1))
    if axes is None or (not axes and not c.node.attr("noop_with_empty_axes", 0)):
        axes = list(range(len(x)))
    out = tuple((1 if i in axes else d) for i, d in enumerate(x) if keep or i not in axes)
    return [(out, c.dtype(0))]


@rule("ArgMax", "ArgMin")
def _arg(c: Ctx) -> Out:
    x = c.shape(0)
    axis = int(c.node.attr("axis", 0)) % max(len(x), 1)
    keep = bool(c.node.attr("keepdims", 1))
    out = tuple((1 if i == axis else d) for i, d in enumerate(x) if keep or i != axis)
    return [(out, "int64")]


@rule("TopK")
def _topk(c: Ctx) -> Out:
    x = list(c.shape(0))
    axis = int(c.node.attr("axis", -1)) % len(x)
    k = int(c.value(1).reshape(-1)[0]) if c.has(1) else int(c.node.attr("k"))
    x[axis] = k
    return [(tuple(x), c.dtype(0)), (tuple(x), "int64")]
