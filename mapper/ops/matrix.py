"""Matrix ops (MatMul, Gemm, convolutions, Einsum): their shape rules, work formulas and entries (one row an op).

A formula returns (FLOPs, matrix FLOPs, SFU ops, GEMM view): FLOPs = 2 x MACs, plus a bias or epilogue's vector
work; the view (`MatrixShape`) is what the tile search and the layout read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.core.graph import LayerType, Node, OpClass
from mapper.core.result import MatrixShape
from mapper.core.vocab import MatrixKind
from mapper.ops.registry import Backward, FusionRole, OpDef, ShapeRule, Work, WorkFormula
from mapper.ops.shape import Ctx, NoRule, Out, Shape, broadcast, spatial_out
from mapper.ops.work import GELU_TANH, Ins, Outs

MATRIX_RANK = 2  # a matrix's axes: its last two (rows, columns)
BIAS_INPUT = 2  # Gemm's and Conv's optional bias: their third input


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


@dataclass(frozen=True, slots=True)
class MatMulShape:
    """numpy matmul's shape; `transposable`: transA/transB swap an operand's last two axes (com.microsoft's
    FusedMatMul); `out_dtype`: the result's type where it is not input 0's (MatMulInteger's int32)."""

    transposable: bool = False
    out_dtype: str | None = None

    def __call__(self, c: Ctx) -> Out:
        a, b = c.shape(0), c.shape(1)
        if self.transposable:
            if c.node.attr("transA", 0) and len(a) >= MATRIX_RANK:
                a = a[:-2] + (a[-1], a[-2])
            if c.node.attr("transB", 0) and len(b) >= MATRIX_RANK:
                b = b[:-2] + (b[-1], b[-2])
        return [(matmul_shape(a, b), self.out_dtype or c.dtype(0))]


def matmul_nbits_shape(c: Ctx) -> Out:
    return [(c.shape(0)[:-1] + (int(c.node.attr("N")),), c.dtype(0))]


def gemm_shape(c: Ctx) -> Out:
    a, b = c.shape(0), c.shape(1)
    m = a[1] if c.node.attr("transA", 0) else a[0]
    n = b[0] if c.node.attr("transB", 0) else b[1]
    return [((m, n), c.dtype(0))]


def conv_shape(c: Ctx) -> Out:
    x, w = c.shape(0), c.shape(1)
    kernel = c.ints("kernel_shape") or list(w[2:])
    return [((x[0], w[0]) + spatial_out(c, x, kernel), c.dtype(0))]


def conv_transpose_shape(c: Ctx) -> Out:
    x, w = c.shape(0), c.shape(1)
    n = len(x) - 2
    kernel = c.ints("kernel_shape") or list(w[2:])
    group = int(c.node.attr("group", 1))
    out_shape = c.ints("output_shape")
    if out_shape:
        return [((x[0], w[1] * group) + tuple(out_shape[-n:]), c.dtype(0))]
    s = c.ints("strides", [1] * n) or []
    d = c.ints("dilations", [1] * n) or []
    p = c.ints("pads", [0] * (2 * n)) or []
    op = c.ints("output_padding", [0] * n) or []
    dims = tuple(s[i] * (x[2 + i] - 1) + op[i] + ((kernel[i] - 1) * d[i] + 1) - p[i] - p[i + n] for i in range(n))
    return [((x[0], w[1] * group) + dims, c.dtype(0))]


def einsum_shape(c: Ctx) -> Out:
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


def shape_in(ins: Ins, i: int) -> Shape:
    """Input i's shape (a present input: the work stage costs a node only once its inputs are resolved)."""
    spec = ins[i]
    if spec is None:
        raise ValueError(f"input {i} is absent")
    return spec.shape


def has_bias(ins: Ins) -> bool:
    return len(ins) > BIAS_INPUT and ins[BIAS_INPUT] is not None


def matmul_work(node: Node, ins: Ins, outs: Outs) -> Work:
    """A B over broadcast batch dims. Where B has no batch of its own (a weight [K, N], or [1, .., K, N]) it is
    one operand shared by every row of A: the hardware runs one GEMM with A's leading dims flattened into M
    (a decode step's [32, 1, 4096] x [4096, N] is a 32-row GEMM, not 32 one-row ones). Only a B that varies
    over the batch (attention's QK^T and PV) keeps the batch."""
    a, b = shape_in(ins, 0), shape_in(ins, 1)
    k = a[-1]
    out = outs[0].shape
    m = out[-2] if len(out) >= MATRIX_RANK else 1
    n = out[-1] if len(b) >= MATRIX_RANK else 1
    batch = math.prod(out[:-2]) if len(out) > MATRIX_RANK else 1
    if batch > 1 and math.prod(b[:-2]) == 1:  # shared B: the batch flattens into M
        m, batch = m * batch, 1
    flops = 2.0 * batch * m * n * k
    return flops, flops, 0.0, MatrixShape(batch, m, n, k)


def gemm_work(node: Node, ins: Ins, outs: Outs) -> Work:
    a = shape_in(ins, 0)
    k = a[0] if node.attr("transA", 0) else a[1]
    m, n = outs[0].shape
    matrix = 2.0 * m * n * k
    bias = m * n if has_bias(ins) else 0
    return matrix + bias, matrix, 0.0, MatrixShape(1, m, n, k)


def conv_work(node: Node, ins: Ins, outs: Outs) -> Work:
    x, w, y = shape_in(ins, 0), shape_in(ins, 1), outs[0].shape
    groups = int(node.attr("group", 1))
    k = w[1] * math.prod(w[2:])  # Cin/groups * Kh * Kw
    spatial = math.prod(y[2:])
    matrix = 2.0 * y[0] * y[1] * spatial * k
    bias = math.prod(y) if has_bias(ins) and node.op_type == "Conv" else 0
    depthwise = groups > 1 and groups == x[1] and w[1] == 1
    shape = MatrixShape(groups, y[0] * spatial, y[1] // groups, k, MatrixKind.CONV, depthwise, math.prod(x) // groups)
    return matrix + bias, matrix, 0.0, shape


def conv_transpose_work(node: Node, ins: Ins, outs: Outs) -> Work:
    x, w = shape_in(ins, 0), shape_in(ins, 1)
    groups = int(node.attr("group", 1))
    k = x[1] // groups
    m = x[0] * math.prod(x[2:])
    n = w[1] * math.prod(w[2:])
    matrix = 2.0 * groups * m * n * k
    return matrix, matrix, 0.0, MatrixShape(groups, m, n, k, MatrixKind.CONV)


def einsum_work(node: Node, ins: Ins, outs: Outs) -> Work:
    eq = str(node.attr("equation", "")).replace(" ", "")
    sizes: dict[str, int] = {}
    for term, spec in zip(eq.split("->")[0].split(","), ins):
        for ch, d in zip(term, spec.shape if spec is not None else ()):
            sizes[ch] = max(sizes.get(ch, 1), d)
    flops = 2.0 * math.prod(sizes.values())
    return flops, flops, 0.0, None


def gemm_fast_gelu_work(node: Node, ins: Ins, outs: Outs) -> Work:
    """MatMul with bias and FastGelu fused in its epilogue (ONNX Runtime's transformer optimizer)."""
    flops, matrix_flops, _, shape = matmul_work(node, ins, outs)
    out = outs[0].elements
    return flops + (GELU_TANH + 1) * out, matrix_flops, float(out), shape


def matmul_nbits_work(node: Node, ins: Ins, outs: Outs) -> Work:
    m = math.prod(outs[0].shape[:-1])
    n, k = int(node.attr("N")), int(node.attr("K"))
    flops = 2.0 * m * n * k
    return flops, flops, 0.0, MatrixShape(1, m, n, k)


MAT, LINEAR, CONV, START = OpClass.MATRIX, LayerType.LINEAR, LayerType.CONV, FusionRole.MATRIX
MATMUL = MatMulShape()
PAIR = (1, 1)  # A and B: at least vectors
IMAGES = (3, 3)  # X [N, C, spatial...] and W [M, C/group, kernel...]


def gemm_op(op_type: str, shape: ShapeRule, work: WorkFormula, layer: LayerType, min_ranks: tuple[int, ...]) -> OpDef:
    """A matrix op's row: it starts a GEMM kernel (its epilogue absorbs what follows), and its backward is its
    operands' gradients, each a GEMM of the forward's FLOPs."""
    return OpDef(op_type, shape, MAT, work, layer=layer, fusion=START, min_ranks=min_ranks, backward=Backward.GEMM)


MATRIX_OPS: tuple[OpDef, ...] = (
    gemm_op("MatMul", MATMUL, matmul_work, LINEAR, PAIR),
    gemm_op("MatMulInteger", MatMulShape(out_dtype="int32"), matmul_work, LINEAR, PAIR),
    gemm_op("FusedMatMul", MatMulShape(transposable=True), matmul_work, LINEAR, PAIR),
    gemm_op("MatMulNBits", matmul_nbits_shape, matmul_nbits_work, LINEAR, (1,)),
    gemm_op("GemmFastGelu", MATMUL, gemm_fast_gelu_work, LINEAR, PAIR),
    gemm_op("Gemm", gemm_shape, gemm_work, LINEAR, (2, 2)),
    OpDef("Einsum", einsum_shape, MAT, einsum_work, layer=LINEAR, backward=Backward.GEMM),  # starts no kernel
    gemm_op("Conv", conv_shape, conv_work, CONV, IMAGES),
    gemm_op("ConvInteger", conv_shape, conv_work, CONV, IMAGES),
    gemm_op("FusedConv", conv_shape, conv_work, CONV, IMAGES),
    gemm_op("ConvTranspose", conv_transpose_shape, conv_transpose_work, CONV, IMAGES),
)
