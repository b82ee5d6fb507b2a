"""Elementwise and transcendental ops: their shape rules and their entries (one row an op).

A row: op type, shape rule, work class, work formula (FLOPs and SFU ops per output element, ops/work.py), then
the fusion role where the op joins kernels (EPILOGUE: a GEMM's epilogue or a chain; CHAIN: chains only).
"""

from __future__ import annotations

from mapper.core.dtypes import dtype_name
from mapper.core.graph import OpClass
from mapper.ops.registry import Backward, FusionRole, OpDef
from mapper.ops.shape import Ctx, Out, broadcast
from mapper.ops.work import ADD, EXP, GELU_ERF, GELU_TANH, SIGMOID, SOFTMAX, TANH, PerOutput


def same_shape(c: Ctx) -> Out:
    """Every output has input 0's shape and type."""
    return [(c.shape(0), c.dtype(0))] * max(1, len(c.node.outputs))


def broadcast_shape(c: Ctx) -> Out:
    """numpy broadcasting over the present inputs, at input 0's type."""
    return [(broadcast(*_present_shapes(c)), c.dtype(0))]


def compare_shape(c: Ctx) -> Out:
    """Broadcasting, with a boolean result (comparisons and logic)."""
    return [(broadcast(*_present_shapes(c)), "bool")]


def _present_shapes(c: Ctx) -> list[tuple[int, ...]]:
    return [c.shape(i) for i in range(len(c.node.inputs)) if c.has(i)]


def where_shape(c: Ctx) -> Out:
    return [(broadcast(c.shape(0), c.shape(1), c.shape(2)), c.dtype(1))]


def quantize_shape(c: Ctx) -> Out:
    """The zero point's type; without one, opset 21's output_dtype, else uint8 (the ONNX default)."""
    if c.has(2):
        return [(c.shape(0), c.dtype(2))]
    to = int(c.node.attr("output_dtype", 0))
    return [(c.shape(0), dtype_name(to) if to else "uint8")]


def dequantize_shape(c: Ctx) -> Out:
    return [(c.shape(0), c.dtype(1))]  # the scale's float type


def dynamic_quantize_shape(c: Ctx) -> Out:
    return [(c.shape(0), "uint8"), ((), "float32"), ((), "uint8")][: max(1, len(c.node.outputs))]


def cast_shape(c: Ctx) -> Out:
    return [(c.shape(0), dtype_name(int(c.node.attr("to", 1))))]


def cast_like_shape(c: Ctx) -> Out:
    return [(c.shape(0), c.dtype(1))]


EW, TR = OpClass.ELEMENTWISE, OpClass.TRANSCENDENTAL
EPILOGUE, CHAIN, QDQ = FusionRole.EPILOGUE, FusionRole.CHAIN, FusionRole.QDQ
ONE = PerOutput(ADD)  # one op per output element
SFU = PerOutput(EXP, 1)  # one special-function op per output element
# the backward: 2x the traffic; none for ops with no gradient (comparisons, logic, integer and rounding ops)
GRAD_VECTOR, NO_GRAD = Backward.VECTOR, Backward.NONE

ELEMENTWISE_OPS: tuple[OpDef, ...] = (
    OpDef("Add", broadcast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Sub", broadcast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Mul", broadcast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Div", broadcast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Max", broadcast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Min", broadcast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Pow", broadcast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Mod", broadcast_shape, EW, ONE, backward=NO_GRAD),
    OpDef("BitShift", broadcast_shape, EW, ONE, backward=NO_GRAD),
    OpDef("Sum", broadcast_shape, EW, PerOutput(ADD, variadic=True), backward=GRAD_VECTOR),
    OpDef("Mean", broadcast_shape, EW, PerOutput(ADD, variadic=True), backward=GRAD_VECTOR),
    OpDef("Equal", compare_shape, EW, ONE, fusion=CHAIN, backward=NO_GRAD),
    OpDef("Less", compare_shape, EW, ONE, fusion=CHAIN, backward=NO_GRAD),
    OpDef("Greater", compare_shape, EW, ONE, fusion=CHAIN, backward=NO_GRAD),
    OpDef("LessOrEqual", compare_shape, EW, ONE, backward=NO_GRAD),
    OpDef("GreaterOrEqual", compare_shape, EW, ONE, backward=NO_GRAD),
    OpDef("And", compare_shape, EW, ONE, fusion=CHAIN, backward=NO_GRAD),
    OpDef("Or", compare_shape, EW, ONE, fusion=CHAIN, backward=NO_GRAD),
    OpDef("Xor", compare_shape, EW, ONE, backward=NO_GRAD),
    OpDef("Not", same_shape, EW, ONE, fusion=CHAIN, backward=NO_GRAD),
    OpDef("Where", where_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Neg", same_shape, EW, ONE, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Abs", same_shape, EW, ONE, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Sign", same_shape, EW, ONE, fusion=CHAIN, backward=NO_GRAD),
    OpDef("Relu", same_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("LeakyRelu", same_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("PRelu", same_shape, EW, ONE, backward=GRAD_VECTOR),
    OpDef("Clip", same_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("HardSigmoid", same_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("HardSwish", same_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("ThresholdedRelu", same_shape, EW, ONE, backward=GRAD_VECTOR),
    OpDef("Shrink", same_shape, EW, ONE, backward=GRAD_VECTOR),
    OpDef("Floor", same_shape, EW, ONE, backward=NO_GRAD),
    OpDef("Ceil", same_shape, EW, ONE, backward=NO_GRAD),
    OpDef("Round", same_shape, EW, ONE, backward=NO_GRAD),
    OpDef("IsNaN", same_shape, EW, ONE, backward=NO_GRAD),
    OpDef("IsInf", same_shape, EW, ONE, backward=NO_GRAD),
    OpDef("Trilu", same_shape, EW, ONE, backward=GRAD_VECTOR),
    OpDef("CumSum", same_shape, EW, ONE, backward=GRAD_VECTOR),
    OpDef("BiasAdd", same_shape, EW, PerOutput(2 * ADD), backward=GRAD_VECTOR),  # X + bias + skip
    OpDef("Cast", cast_shape, EW, ONE, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("CastLike", cast_like_shape, EW, ONE, backward=GRAD_VECTOR),
    OpDef("QuantizeLinear", quantize_shape, EW, ONE, fusion=QDQ, backward=GRAD_VECTOR),
    OpDef("DequantizeLinear", dequantize_shape, EW, ONE, fusion=QDQ, backward=GRAD_VECTOR),
    OpDef("DynamicQuantizeLinear", dynamic_quantize_shape, EW, ONE, backward=NO_GRAD),
)

TRANSCENDENTAL_OPS: tuple[OpDef, ...] = (
    OpDef("Exp", same_shape, TR, SFU, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Log", same_shape, TR, SFU, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Sqrt", same_shape, TR, SFU, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Reciprocal", same_shape, TR, SFU, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Sin", same_shape, TR, SFU, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Cos", same_shape, TR, SFU, fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Erf", same_shape, TR, SFU, fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Tan", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Asin", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Acos", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Atan", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Sinh", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Cosh", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Asinh", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Acosh", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Atanh", same_shape, TR, SFU, backward=GRAD_VECTOR),
    OpDef("Sigmoid", same_shape, TR, PerOutput(SIGMOID, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Tanh", same_shape, TR, PerOutput(TANH, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Elu", same_shape, TR, PerOutput(SIGMOID, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Selu", same_shape, TR, PerOutput(SIGMOID, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Celu", same_shape, TR, PerOutput(SIGMOID, 1), backward=GRAD_VECTOR),
    OpDef("Softplus", same_shape, TR, PerOutput(SIGMOID, 2), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Softsign", same_shape, TR, PerOutput(3, 0), fusion=CHAIN, backward=GRAD_VECTOR),
    OpDef("Mish", same_shape, TR, PerOutput(TANH + 3, 2), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Gelu", same_shape, TR, PerOutput(GELU_ERF, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("BiasGelu", same_shape, TR, PerOutput(GELU_ERF + 1, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("FastGelu", same_shape, TR, PerOutput(GELU_TANH, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("QuickGelu", same_shape, TR, PerOutput(SIGMOID + 1, 1), fusion=EPILOGUE, backward=GRAD_VECTOR),
    OpDef("Softmax", same_shape, TR, PerOutput(SOFTMAX, 1), fusion=FusionRole.ROW, backward=GRAD_VECTOR),
    OpDef("LogSoftmax", same_shape, TR, PerOutput(SOFTMAX + 1, 2), backward=GRAD_VECTOR),
    OpDef("Hardmax", same_shape, TR, PerOutput(2, 0), backward=NO_GRAD),
)
