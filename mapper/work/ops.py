"""The work model: per node FLOPs (2 x MACs), bytes and op class, from one table.

Stage two of the pipeline (after import). `OP_TABLE` maps every ONNX op type we
model to its class and its rule; `kinds.estimate_work_kinds` applies it node by node. An op
not in the table is `unmodeled` with a reason: never a silent zero.
Conventions: FLOPs count multiply and add separately (FLOPs = 2 x MACs); bytes
are the compulsory traffic of the op alone (inputs read once, outputs written
once); fusion and tiling adjust traffic later.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mapper.core.graph import SUBGRAPH_OPS, Graph, LayerType, Node, OpClass, TensorSpec
from mapper.core.records import writer
from mapper.core.result import MatrixShape, NodeWork
from mapper.model.quantized import QUANTIZED_OPS, twin_node
from mapper.work.op_table import (
    CONTROL,
    DATA_MOVEMENT,
    ELEMENTWISE,
    GELU_TANH,
    HOST_REASONS,
    NORMALIZATION,
    POOLING,
    REDUCTIONS,
    REQUANTIZE,
    SHAPE_ONLY,
    SOFTMAX,
    TRANSCENDENTAL,
    VIEWS,
)

# Ranks the rules read: a matrix is rank 2 (its last two dims rows and columns); attention's 4-D layout is
# (batch, heads, seq, head dim), the ONNX Attention op's (opset 23) and MultiHeadAttention's BNSH form.
MATRIX_RANK = 2
BHSD_RANK = 4
BIAS_INPUT = 2  # Gemm's and Conv's optional bias: their third input


WorkRule = Callable[[Node, list[TensorSpec | None], list[TensorSpec]], tuple[float, float, float, MatrixShape | None]]


def _matmul(node, ins, outs):
    """A B over broadcast batch dims. Where B has no batch of its own (a weight [K, N], or [1, .., K, N]) it is
    one operand shared by every row of A: the hardware runs one GEMM with A's leading dims flattened into M
    (a decode step's [32, 1, 4096] x [4096, N] is a 32-row GEMM, not 32 one-row ones). Only a B that varies
    over the batch (attention's QK^T and PV) keeps the batch."""
    a, b = ins[0].shape, ins[1].shape
    k = a[-1]
    out = outs[0].shape
    m = out[-2] if len(out) >= MATRIX_RANK else 1
    n = out[-1] if len(b) >= MATRIX_RANK else 1
    batch = math.prod(out[:-2]) if len(out) > MATRIX_RANK else 1
    if batch > 1 and math.prod(b[:-2]) == 1:  # shared B: the batch flattens into M
        m, batch = m * batch, 1
    flops = 2.0 * batch * m * n * k
    return flops, flops, 0.0, MatrixShape(batch, m, n, k)


def _gemm(node, ins, outs):
    a = ins[0].shape
    k = a[0] if node.attr("transA", 0) else a[1]
    m, n = outs[0].shape
    matrix = 2.0 * m * n * k
    bias = m * n if len(ins) > BIAS_INPUT and ins[BIAS_INPUT] is not None else 0
    return matrix + bias, matrix, 0.0, MatrixShape(1, m, n, k)


def _conv(node, ins, outs):
    x, w, y = ins[0].shape, ins[1].shape, outs[0].shape
    groups = int(node.attr("group", 1))
    k = w[1] * math.prod(w[2:])  # Cin/groups * Kh * Kw
    spatial = math.prod(y[2:])
    matrix = 2.0 * y[0] * y[1] * spatial * k
    bias = math.prod(y) if len(ins) > BIAS_INPUT and ins[BIAS_INPUT] is not None and node.op_type == "Conv" else 0
    depthwise = groups > 1 and groups == x[1] and w[1] == 1
    shape = MatrixShape(groups, y[0] * spatial, y[1] // groups, k, "conv", depthwise, math.prod(x) // groups)
    return matrix + bias, matrix, 0.0, shape


def _conv_transpose(node, ins, outs):
    x, w = ins[0].shape, ins[1].shape
    groups = int(node.attr("group", 1))
    k = x[1] // groups
    m = x[0] * math.prod(x[2:])
    n = w[1] * math.prod(w[2:])
    matrix = 2.0 * groups * m * n * k
    return matrix, matrix, 0.0, MatrixShape(groups, m, n, k, "conv")


def _einsum(node, ins, outs):
    eq = str(node.attr("equation", "")).replace(" ", "")
    sizes: dict[str, int] = {}
    for term, spec in zip(eq.split("->")[0].split(","), ins):
        for ch, d in zip(term, spec.shape):
            sizes[ch] = max(sizes.get(ch, 1), d)
    flops = 2.0 * math.prod(sizes.values())
    return flops, flops, 0.0, None


def _ms_attention(node, ins, outs):
    """com.microsoft / opset-23 attention: 2 GEMMs of 2*B*H*Sq*Skv*d plus softmax (PRIMER section 2)."""
    q = outs[0].shape
    if node.op_type == "Attention" and node.domain == "com.microsoft":
        b, s, hidden = ins[0].shape
        heads = int(node.attr("num_heads", 1))
        proj = 2.0 * b * s * hidden * ins[1].shape[-1]
        skv, d = s, q[-1] // heads
    else:
        heads = int(node.attr("num_heads", node.attr("q_num_heads", 1)))
        if len(q) == BHSD_RANK:
            b, heads, s, d = q
            skv = ins[1].shape[-2] if len(ins) > 1 and ins[1] is not None else s  # packed QKV: no separate K
        else:
            b, s, hidden = q
            d = hidden // max(heads, 1)
            skv = ins[1].shape[1] if len(ins) > 1 and ins[1] is not None else s
        proj = 0.0
    attn = 2 * 2.0 * b * heads * s * skv * d
    softmax = SOFTMAX * b * heads * s * skv
    return proj + attn + softmax, proj + attn, b * heads * s * skv, MatrixShape(b * heads, s, skv, d, "attention")


def _gemm_fast_gelu(node, ins, outs):
    """MatMul with bias and FastGelu fused in its epilogue (ONNX Runtime's transformer optimizer)."""
    flops, matrix_flops, _, shape = _matmul(node, ins, outs)
    out = outs[0].elements
    return flops + (GELU_TANH + 1) * out, matrix_flops, float(out), shape


def _matmul_nbits(node, ins, outs):
    m = math.prod(outs[0].shape[:-1])
    n, k = int(node.attr("N")), int(node.attr("K"))
    flops = 2.0 * m * n * k
    return flops, flops, 0.0, MatrixShape(1, m, n, k)


MATRIX_RULES: dict[str, WorkRule] = {
    "MatMul": _matmul,
    "MatMulInteger": _matmul,
    "FusedMatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "ConvInteger": _conv,
    "FusedConv": _conv,
    "ConvTranspose": _conv_transpose,
    "Einsum": _einsum,
    "MatMulNBits": _matmul_nbits,
    "GemmFastGelu": _gemm_fast_gelu,
    "Attention": _ms_attention,
    "MultiHeadAttention": _ms_attention,
    "GroupQueryAttention": _ms_attention,
}


def _elements(specs: list[TensorSpec | None]) -> int:
    return sum(s.elements for s in specs if s is not None)


# op type -> op class, one table built from the families above (first family wins on overlap)
OP_CLASS: dict[str, OpClass] = {}
for _family, _op_class in (
    (MATRIX_RULES, OpClass.MATRIX),
    (ELEMENTWISE, OpClass.ELEMENTWISE),
    (TRANSCENDENTAL, OpClass.TRANSCENDENTAL),
    (NORMALIZATION, OpClass.REDUCTION),
    (REDUCTIONS, OpClass.REDUCTION),
    (POOLING, OpClass.REDUCTION),
    (("LRN",), OpClass.REDUCTION),
    (DATA_MOVEMENT, OpClass.DATA_MOVEMENT),
    (VIEWS, OpClass.VIEW),
    (SHAPE_ONLY, OpClass.SHAPE_ONLY),
    (CONTROL, OpClass.CONTROL),
):
    for _op in _family:
        OP_CLASS.setdefault(_op, _op_class)
for _op, _quantized in QUANTIZED_OPS.items():  # QLinearConv is a Conv, QLinearAdd an Add (at int8 sizes)
    OP_CLASS[_op] = OP_CLASS[_quantized.twin]


def classify_op(op_type: str) -> OpClass:
    return OP_CLASS.get(op_type, OpClass.UNMODELED)


def _vector_work(node: Node, op_class: OpClass, ins, outs) -> tuple[float, float]:
    """(flops, sfu ops) of a non-matrix op."""
    out_elems = _elements(outs[:1])
    in_elems = ins[0].elements if ins and ins[0] is not None else 0
    if node.op_type in ELEMENTWISE:
        per, sfu = ELEMENTWISE[node.op_type]
        n = (
            out_elems * max(len([i for i in ins if i is not None]) - 1, 1)
            if node.op_type in ("Sum", "Mean")
            else out_elems
        )
        return per * n, sfu * n
    if node.op_type in TRANSCENDENTAL:
        per, sfu = TRANSCENDENTAL[node.op_type]
        return per * out_elems, sfu * out_elems
    if node.op_type in NORMALIZATION:
        per, _ = NORMALIZATION[node.op_type]
        rows = out_elems // max(outs[0].shape[-1], 1) if outs[0].shape else 1
        return per * out_elems, rows  # one rsqrt per normalized row
    if node.op_type == "LRN":
        size = int(node.attr("size", 5))
        return (2 * size + 3) * out_elems, out_elems  # window sum of squares, then a pow per element
    if node.op_type in POOLING:
        kernel = math.prod(node.attr("kernel_shape") or (1,))
        return (in_elems if node.op_type.startswith("Global") else out_elems * kernel), 0.0
    if node.op_type in REDUCTIONS:
        return float(in_elems), 0.0
    return 0.0, 0.0


def _traffic(node: Node, op_class: OpClass, ins, outs, graph: Graph) -> tuple[float, float, float]:
    """(bytes read, bytes written, weight bytes) of one op on its own; weights at the type memory holds."""
    weights = graph.weights
    if graph.stored_dtypes:
        ins = [s and graph.stored_spec(s) for s in ins]
    weight_bytes = sum(s.bytes for i, s in zip(node.inputs, ins) if s is not None and i in weights)
    written = sum(s.bytes for s in outs)
    if op_class in (OpClass.VIEW, OpClass.SHAPE_ONLY):
        return 0.0, 0.0, weight_bytes
    if node.op_type in ("Gather", "GatherElements", "GatherND", "Slice", "Expand", "Tile", "Pad"):
        # only the gathered/kept elements are read; indices are read too
        extra = sum(s.bytes for s in ins[1:] if s is not None and s.elements < 1 << 20)
        return min(ins[0].bytes, outs[0].bytes) + extra, written, weight_bytes
    read = sum(s.bytes for s in ins if s is not None)
    return read, written, weight_bytes


_new_work = writer(NodeWork, defaults=True)  # NodeWork(...) without the frozen constructor (`core.records`)


def estimate_node_work(node: Node, graph: Graph) -> NodeWork:
    op_class = classify_op(node.op_type)
    ins = [graph.spec(i) for i in node.inputs]
    outs = [graph.spec(o) for o in node.outputs if o]
    if not outs:  # ONNX nodes write at least one tensor; a mutated or hand-edited file may not
        return NodeWork(
            node.name,
            node.op_type,
            OpClass.UNMODELED,
            0,
            0,
            0,
            0,
            0,
            0,
            reason="the node has no outputs: the file is malformed, nothing can use it",
        )
    if any(o is None for o in outs) or any(s is None for i, s in zip(node.inputs, ins) if i):
        why = dict(graph.unresolved).get(node.name, "shapes unknown")
        return NodeWork(node.name, node.op_type, OpClass.UNMODELED, 0, 0, 0, 0, 0, 0, reason=f"shape unknown: {why}")
    if op_class is OpClass.UNMODELED:
        domain = f" (domain {node.domain})" if node.domain not in ("", "ai.onnx") else ""
        read, written, weight = _traffic(node, op_class, ins, outs, graph)
        return NodeWork(
            node.name,
            node.op_type,
            op_class,
            0,
            0,
            0,
            read,
            written,
            weight,
            reason=f"no work rule for {node.op_type}{domain}: its time is not estimated",
        )
    matrix = None
    rule_node, rule_ins, quantized = node, ins, node.op_type in QUANTIZED_OPS
    if quantized:  # the float twin's rule over the data operands
        rule_node, positions = twin_node(node)
        rule_ins = [ins[p] for p in positions]
    if op_class is OpClass.MATRIX:
        flops, matrix_flops, sfu, matrix = MATRIX_RULES[rule_node.op_type](rule_node, rule_ins, outs)
    else:
        flops, sfu = _vector_work(rule_node, op_class, rule_ins, outs)
        flops, matrix_flops = flops + (REQUANTIZE * outs[0].elements if quantized else 0.0), 0.0
    read, written, weight = _traffic(node, op_class, ins, outs, graph)
    reason = HOST_REASONS[node.op_type in SUBGRAPH_OPS] if op_class is OpClass.CONTROL else ""
    return _new_work(
        node.name,
        node.op_type,
        op_class,
        float(flops),
        float(matrix_flops),
        float(sfu),
        float(read),
        float(written),
        float(weight),
        matrix,
        reason,
    )


LayerPlacer = Callable[[str, str, OpClass], tuple[LayerType, int]]  # (name, op type, class) -> (layer, group)
