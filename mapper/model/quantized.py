"""Quantized operators in ONNX Runtime's QOperator format: which of their inputs are the data.

A QOperator-format model (onnxruntime.quantization with QuantFormat.QOperator) replaces Conv, MatMul,
Gemm, Add, pooling... by QLinear* ops that carry each operand's scale and zero point as extra inputs
between the data operands. Each such op here names its float twin and the positions of its data
operands in the twin's order: the shape rules and the work model run the twin's rules on those
operands, so QLinearAdd is Add's broadcast and QGemm is Gemm's GEMM, at the int8 tensors' sizes.
Input positions: the ONNX operator spec (QLinearConv, QLinearMatMul) and ONNX Runtime's
docs/ContribOperators.md (com.microsoft: the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import Node


@dataclass(frozen=True, slots=True)
class QuantizedOp:
    twin: str  # the float op whose shape and work rules apply
    operands: tuple[int, ...] | slice  # input positions of the data operands, in the twin's order
    float_output: bool = False  # ...ToFloat / DynamicQuantize*: the result is float32
    output_scale: int | None = None  # QGemm: the result is quantized only when this input (y_scale) is given


QUANTIZED_OPS: dict[str, QuantizedOp] = {
    "QLinearConv": QuantizedOp("Conv", (0, 3, 8)),  # x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, B
    "QLinearMatMul": QuantizedOp("MatMul", (0, 3)),  # a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp
    "QGemm": QuantizedOp("Gemm", (0, 3, 6), output_scale=7),  # A, a_s, a_zp, B, b_s, b_zp, C, y_s, y_zp
    "QLinearAdd": QuantizedOp("Add", (0, 3)),  # A, A_s, A_zp, B, B_s, B_zp, C_s, C_zp
    "QLinearMul": QuantizedOp("Mul", (0, 3)),
    "QLinearSigmoid": QuantizedOp("Sigmoid", (0,)),  # X, X_s, X_zp, Y_s, Y_zp
    "QLinearLeakyRelu": QuantizedOp("LeakyRelu", (0,)),
    "QLinearSoftmax": QuantizedOp("Softmax", (0,)),
    "QLinearGlobalAveragePool": QuantizedOp("GlobalAveragePool", (0,)),
    "QLinearAveragePool": QuantizedOp("AveragePool", (0,)),
    "QLinearConcat": QuantizedOp("Concat", slice(2, None, 3)),  # Y_s, Y_zp, then (X, X_s, X_zp) per input
    "QLinearWhere": QuantizedOp("Where", (0, 1, 4)),  # cond, X, x_s, x_zp, Y, y_s, y_zp, z_s, z_zp
    "DynamicQuantizeMatMul": QuantizedOp("MatMul", (0, 1), float_output=True),  # A (float), B, b_s, b_zp, bias
    "MatMulIntegerToFloat": QuantizedOp("MatMul", (0, 1), float_output=True),  # A, B, a_s, b_s, a_zp, b_zp, bias
}
CHANNELS_LAST_UNSUPPORTED = ("QLinearGlobalAveragePool", "QLinearAveragePool")  # channels_last=1: NHWC data


def twin_of(op_type: str) -> str:
    """The float op whose rules apply (the op itself when it is not a quantized one)."""
    q = QUANTIZED_OPS.get(op_type)
    return q.twin if q is not None else op_type


def operand_positions(op_type: str, input_count: int) -> list[int]:
    """Input positions of a quantized op's data operands, the twin's inputs in order."""
    operands = QUANTIZED_OPS[op_type].operands
    if isinstance(operands, slice):
        return list(range(input_count))[operands]
    return list(operands)


def twin_node(node: Node) -> tuple[Node, list[int]]:
    """The node as its float twin, over its data operands (absent trailing ones dropped), and their
    positions in the node's inputs."""
    positions = [p for p in operand_positions(node.op_type, len(node.inputs)) if p < len(node.inputs)]
    inputs = tuple(node.inputs[p] for p in positions)
    return Node(node.name, QUANTIZED_OPS[node.op_type].twin, "", inputs, node.outputs, node.attrs), positions
