"""Graphs of a given size and shape, built with onnx.helper: what bench/bench_scale.py maps at 10^4-10^5
nodes and tests/security/test_linear.py at a few thousand, to show every stage linear in nodes plus edges.

Each builder takes `n`, the number of nodes it aims for (the graphs hold n to n + a few), and returns
(ModelProto, dims): the bindings to map it at. Tensors are tiny ([1, 16]): the size is in the structure.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mapper.core import limits

OPSET = 17
WIDTH = 16
ELEMENTWISE_CYCLE = ("Relu", "Add", "Mul")  # the long chain alternates these


def _model(nodes, name: str, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bench.scale")
    model.ir_version = 8
    return model


def _x() -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])


def _out(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, WIDTH])


def _vector(name: str) -> TensorProto:
    return numpy_helper.from_array(np.full(WIDTH, 0.5, np.float32), name)


def fan_in(n: int, op: str = "Sum") -> tuple[onnx.ModelProto, dict]:
    """One Sum (or Concat, or Max) of n - 1 Relu outputs, each Relu reading x: a node of n - 1 inputs, or, past
    the engine's MAX_NODE_INPUTS (an upload's bound), that many-input joins of the Relus joined once more.
    Max can ride in a kernel's epilogue with its tiny operands; each Relu's result is also a graph output
    there, so that no kernel may take them all."""
    relus = [helper.make_node("Relu", ["x"], [f"r{i}"], name=f"relu{i}") for i in range(n - 1)]
    attrs = {"axis": 1} if op == "Concat" else {}
    names = [f"r{i}" for i in range(n - 1)]
    width = limits.MAX_NODE_INPUTS
    joins = []
    if len(names) > width:  # partial joins of at most `width` inputs each, then the last join of those
        parts = [names[i : i + width] for i in range(0, len(names), width)]
        joins = [helper.make_node(op, p, [f"j{k}"], name=f"join{k}", **attrs) for k, p in enumerate(parts)]
        names = [f"j{k}" for k in range(len(parts))]
    last = helper.make_node(op, names, ["y"], name="fan_in", **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH * (n - 1) if op == "Concat" else WIDTH])
    escaping = [_out(f"r{i}") for i in range(n - 1)] if op == "Max" else []
    return _model([*relus, *joins, last], f"fan-in-{op.lower()}-{n}", [_x()], [out, *escaping]), {}


def fan_out(n: int) -> tuple[onnx.ModelProto, dict]:
    """One tensor (x's Relu) read by n - 1 Relus, each result a graph output."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="source")]
    nodes += [helper.make_node("Relu", ["h"], [f"y{i}"], name=f"reader{i}") for i in range(n - 1)]
    return _model(nodes, f"fan-out-{n}", [_x()], [_out(f"y{i}") for i in range(n - 1)]), {}


def chain(n: int) -> tuple[onnx.ModelProto, dict]:
    """n elementwise ops in a row, Relu -> Add -> Mul -> Relu ..., the binary ones with a constant."""
    nodes, t = [], "x"
    for i in range(n):
        op = ELEMENTWISE_CYCLE[i % len(ELEMENTWISE_CYCLE)]
        inputs = [t] if op == "Relu" else [t, "c"]
        nodes.append(helper.make_node(op, inputs, [f"t{i}"], name=f"{op.lower()}{i}"))
        t = f"t{i}"
    nodes.append(helper.make_node("Identity", [t], ["y"], name="out"))
    return _model(nodes, f"chain-{n}", [_x()], [_out("y")], [_vector("c")]), {}


def mlp_blocks(n: int) -> tuple[onnx.ModelProto, dict]:
    """n / 10 MLP blocks in a row, 10 nodes each: MatMul -> Add -> Relu -> MatMul -> Add, a residual Add,
    then a Gemm -> Sigmoid gate multiplied in, and a Relu."""
    nodes, inits, t = [], [_vector("bias")], "x"
    weight = numpy_helper.from_array(np.full((WIDTH, WIDTH), 0.01, np.float32), "w")
    inits.append(weight)  # one weight shared by every block: the file stays small at 10^5 nodes
    for b in range(max(n // 10, 1)):

        def node(op, inputs, b=b, **attrs):
            name = f"b{b}/{op}_{len(nodes)}"
            nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
            return name

        h = node("Relu", [node("Add", [node("MatMul", [t, "w"]), "bias"])])
        h = node("Add", [node("Add", [node("MatMul", [h, "w"]), "bias"]), t])
        gate = node("Sigmoid", [node("Gemm", [h, "w", "bias"])])
        t = node("Relu", [node("Mul", [h, gate])])
    nodes.append(helper.make_node("Identity", [t], ["y"], name="out"))
    return _model(nodes, f"mlp-{n}", [_x()], [_out("y")], inits), {}


def view_chain(n: int) -> tuple[onnx.ModelProto, dict]:
    """A Relu, then n - 2 views in a row (Identity, Reshape...), then a Relu: free views a planner looks
    through, deeper than Python's recursion limit."""
    nodes = [helper.make_node("Relu", ["x"], ["v0"], name="first")]
    for i in range(1, n - 1):
        nodes.append(helper.make_node("Identity", [f"v{i - 1}"], [f"v{i}"], name=f"view{i}"))
    nodes.append(helper.make_node("Relu", [f"v{n - 2}"], ["y"], name="last"))
    return _model(nodes, f"view-chain-{n}", [_x()], [_out("y")]), {}


def tiny_singles(n: int) -> tuple[onnx.ModelProto, dict]:
    """n / 2 tiny Relus of x that nothing reads (each waits for a kernel to ride in), between n / 2
    Softmaxes in a row over a wide tensor: one kernel each."""
    wide = helper.make_tensor_value_info("wide", TensorProto.FLOAT, [1, 1 << 16])
    nodes, t = [], "wide"
    for i in range(n // 2):
        nodes.append(helper.make_node("Relu", ["x"], [f"s{i}"], name=f"tiny{i}"))
        nodes.append(helper.make_node("Softmax", [t], [f"w{i}"], name=f"softmax{i}", axis=-1))
        t = f"w{i}"
    outputs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, 1 << 16])]
    return _model(nodes, f"tiny-singles-{n}", [_x(), wide], outputs), {}


def softmax_fan_out(n: int) -> tuple[onnx.ModelProto, dict]:
    """QK^T -> Softmax (the start of an attention block, q and k graph inputs) whose result n - 2 Casts
    read: the block finder walks the probabilities' readers."""
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [WIDTH, WIDTH])
    nodes = [
        helper.make_node("MatMul", ["x", "k"], ["scores"], name="qk"),
        helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
    ]
    nodes += [helper.make_node("Cast", ["p"], [f"c{i}"], name=f"cast{i}", to=TensorProto.FLOAT) for i in range(n - 2)]
    return _model(nodes, f"softmax-fan-out-{n}", [_x(), k], [_out(f"c{n - 3}")]), {}


def _flag() -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("flag", TensorProto.BOOL, [1])


def _branch(name: str, nodes, output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [_out(output)])


def if_sequence(n: int) -> tuple[onnx.ModelProto, dict]:
    """n / 4 Ifs in a row on the bound input `flag`, each branch three elementwise nodes on the outer
    tensor: the import inlines the branch taken (three nodes and an Identity per If)."""
    nodes, t = [], "x"
    for k in range(max(n // 4, 1)):

        def body(tag: str, op: str, k: int = k, t: str = t) -> onnx.GraphProto:
            a, b, c = (f"if{k}/{tag}{j}" for j in range(3))
            return _branch(
                f"if{k}_{tag}",
                [
                    helper.make_node("Relu", [t], [a], name=a),
                    helper.make_node(op, [a, "c"], [b], name=b),
                    helper.make_node("Relu", [b], [c], name=c),
                ],
                c,
            )

        nodes.append(
            helper.make_node(
                "If",
                ["flag"],
                [f"o{k}"],
                name=f"if{k}",
                then_branch=body("then", "Add"),
                else_branch=body("else", "Mul"),
            )
        )
        t = f"o{k}"
    nodes.append(helper.make_node("Identity", [t], ["y"], name="out"))
    return _model(nodes, f"if-sequence-{n}", [_x(), _flag()], [_out("y")], [_vector("c")]), {"flag": 1}


def nested_if(n: int, depth: int = 8) -> tuple[onnx.ModelProto, dict]:
    """Ifs nested `depth` deep on the bound input `flag`, n / depth Relus in a row at each level (the
    import inlines 8 levels, `branches.MAX_INLINE_ROUNDS`; deeper ones stay a host-side If). Built in
    place from the outside in: protobuf refuses to copy a message nested past 100 levels (31 Ifs), and
    refuses to parse one, so a file nested deeper is refused at parse with the one-line error."""
    per_level = max(n // depth, 1)
    model = _model([], f"nested-if-{depth}", [_x(), _flag()], [_out("y")])
    graph, result = model.graph, "y"
    for level in range(depth, 0, -1):
        t = f"o{level}"
        for j in range(per_level - 1):
            graph.node.append(helper.make_node("Relu", [t], [f"l{level}_{j}"], name=f"relu{level}_{j}"))
            t = f"l{level}_{j}"
        graph.node.append(helper.make_node("Relu", [t], [result], name=f"relu{level}"))
        node = graph.node.add(op_type="If", name=f"if{level}", input=["flag"], output=[f"o{level}"])
        other = node.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH).g
        other.name = f"else{level}"
        other.node.append(helper.make_node("Relu", ["x"], [f"e{level}"], name=f"else{level}"))
        other.output.append(_out(f"e{level}"))
        taken = node.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH).g
        taken.name, result = f"level{level}", f"v{level - 1}"
        taken.output.append(_out(result))
        graph = taken
    graph.node.append(helper.make_node("Relu", ["x"], [result], name="leaf"))
    return model, {"flag": 1}


def transformer(n: int) -> tuple[onnx.ModelProto, dict]:
    """The built-in Llama generator at a small width and as many layers as make about n nodes
    (about 56 nodes a layer)."""
    from mapper.zoo.llama import LlamaConfig, build_llama

    layers = max(n // 56, 1)
    config = LlamaConfig(layers=layers, hidden=256, heads=4, kv_heads=2, ffn=512, vocab=1000)
    return build_llama(config, f"llama-{layers}-layers"), {"batch": 1, "seq": 16, "past": 0}


SHAPES: dict[str, Callable[[int], tuple[onnx.ModelProto, dict]]] = {
    "fan-in (Sum)": fan_in,
    "fan-in (Concat)": lambda n: fan_in(n, "Concat"),
    "fan-in (Max)": lambda n: fan_in(n, "Max"),
    "fan-out": fan_out,
    "chain": chain,
    "view-chain": view_chain,
    "tiny-singles": tiny_singles,
    "softmax-fan-out": softmax_fan_out,
    "if-sequence": if_sequence,
    "nested-if": nested_if,
    "mlp-blocks": mlp_blocks,
    "transformer": transformer,
}
