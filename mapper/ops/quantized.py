"""Quantized operators in ONNX Runtime's QOperator format: one row an op, its entry derived from its float twin's.

A QOperator-format model (onnxruntime.quantization with QuantFormat.QOperator) replaces Conv, MatMul, Gemm,
Add, pooling... by QLinear* ops that carry each operand's scale and zero point as extra inputs between the data
operands. Each row here names the op's float twin and the positions of its data operands in the twin's order;
its entry runs the twin's shape rule and work formula on those operands (QLinearAdd is Add's broadcast, QGemm
is Gemm's GEMM, at the int8 tensors' sizes), and takes the twin's class, reads, layer, ranks and backward. A
non-matrix one adds `REQUANTIZE` FLOPs an output element; it starts or joins a GEMM's kernel as its twin does and
joins no other. Input positions: the ONNX operator spec (QLinearConv, QLinearMatMul) and ONNX Runtime's
docs/ContribOperators.md (com.microsoft: the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import Node, OpClass
from mapper.ops.registry import FusionRole, OpDef, QuantizedForm, Registry, ShapeRule, Work, WorkFormula
from mapper.ops.shape import Ctx, NoRule, Out
from mapper.ops.work import REQUANTIZE, Ins, Outs

QUANTIZED_FORMS: tuple[tuple[str, QuantizedForm], ...] = (
    ("QLinearConv", QuantizedForm("Conv", (0, 3, 8))),  # x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, B
    ("QLinearMatMul", QuantizedForm("MatMul", (0, 3))),  # a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp
    ("QGemm", QuantizedForm("Gemm", (0, 3, 6), output_scale=7)),  # A, a_s, a_zp, B, b_s, b_zp, C, y_s, y_zp
    ("QLinearAdd", QuantizedForm("Add", (0, 3))),  # A, A_s, A_zp, B, B_s, B_zp, C_s, C_zp
    ("QLinearMul", QuantizedForm("Mul", (0, 3))),
    ("QLinearSigmoid", QuantizedForm("Sigmoid", (0,))),  # X, X_s, X_zp, Y_s, Y_zp
    ("QLinearLeakyRelu", QuantizedForm("LeakyRelu", (0,))),
    ("QLinearSoftmax", QuantizedForm("Softmax", (0,))),
    ("QLinearGlobalAveragePool", QuantizedForm("GlobalAveragePool", (0,), channels_last_refused=True)),
    ("QLinearAveragePool", QuantizedForm("AveragePool", (0,), channels_last_refused=True)),
    ("QLinearConcat", QuantizedForm("Concat", slice(2, None, 3))),  # Y_s, Y_zp, then (X, X_s, X_zp) per input
    ("QLinearWhere", QuantizedForm("Where", (0, 1, 4))),  # cond, X, x_s, x_zp, Y, y_s, y_zp, z_s, z_zp
    ("DynamicQuantizeMatMul", QuantizedForm("MatMul", (0, 1), float_output=True)),  # A (float), B, b_s, b_zp, bias
    ("MatMulIntegerToFloat", QuantizedForm("MatMul", (0, 1), float_output=True)),  # A, B, a_s, b_s, a_zp, b_zp, bias
)
INHERITED_ROLES = frozenset({FusionRole.MATRIX, FusionRole.EPILOGUE})  # the twin's roles a quantized op keeps


@dataclass(frozen=True, slots=True)
class QuantizedShape:
    """The twin's shape rule over the data operands; the result is float32 unless the op requantizes it."""

    op_type: str
    form: QuantizedForm
    twin_rule: ShapeRule

    def __call__(self, c: Ctx) -> Out:
        if self.form.channels_last_refused and c.node.attr("channels_last", 0):
            raise NoRule(f"{self.op_type} with channels_last=1 (NHWC data) has no shape rule here")
        twin, positions = self.form.twin_node(c.node)  # (the ranks were checked against the twin's at them)
        inner = Ctx(twin, tuple(c.specs[p] for p in positions), tuple(c.values[p] for p in positions))
        output_scale = self.form.output_scale
        quantized = not self.form.float_output and (output_scale is None or c.has(output_scale))
        return [(shape, dtype if quantized else "float32") for shape, dtype in self.twin_rule(inner)]


@dataclass(frozen=True, slots=True)
class QuantizedWork:
    """The twin's work formula over the data operands, plus `requantize` FLOPs an output element."""

    form: QuantizedForm
    twin_work: WorkFormula
    requantize: float

    def __call__(self, node: Node, ins: Ins, outs: Outs) -> Work:
        twin, positions = self.form.twin_node(node)
        flops, matrix_flops, sfu, matrix = self.twin_work(twin, [ins[p] for p in positions], outs)
        if self.requantize:
            flops = flops + self.requantize * outs[0].elements
        return flops, matrix_flops, sfu, matrix


def quantized_entry(op_type: str, form: QuantizedForm, twin: OpDef) -> OpDef:
    """A QOperator op's entry: its twin's, run over the data operands."""
    return OpDef(
        op_type,
        QuantizedShape(op_type, form, twin.shape) if twin.shape is not None else None,
        twin.op_class,
        QuantizedWork(form, twin.work, 0 if twin.op_class is OpClass.MATRIX else REQUANTIZE),
        reads=twin.reads,
        layer=twin.layer,
        fusion=twin.fusion if twin.fusion in INHERITED_ROLES else FusionRole.NONE,
        quantized=form,
        min_ranks=twin.min_ranks,
        backward=twin.backward,
    )


def quantized_ops(floats: Registry) -> tuple[OpDef, ...]:
    """The QOperator entries, each from its twin's entry in `floats`."""
    return tuple(quantized_entry(op, form, floats[form.twin]) for op, form in QUANTIZED_FORMS)
