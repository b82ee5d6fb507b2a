"""Generators for the attack classes of issue 15, which the random corpus of `fuzz_cases.py` did not reach.

Each takes a seeded `random.Random` and returns an `Attack`: model bytes, the dims to bind, what the
case must give where that is known ("mapped"/"rejected", else None) and the extra checks `run_case`
makes on it ("files": nothing the model names is opened and no external reference survives the
stripping copy; "sheet": the .xlsx/.csv/.html written from the mapping carry no live formula or markup).
The checks themselves are in `fuzz_checks.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HUGE = 1 << 62
FILES, SHEET = "files", "sheet"


@dataclass(frozen=True, slots=True)
class Attack:
    label: str
    data: bytes
    dims: tuple = ()  # (name, value) pairs, bound at import
    expect: str | None = None  # "mapped" | "rejected" where the class implies it
    checks: tuple[str, ...] = ()


def _model(nodes, inputs, outputs, inits=(), opset=17, **graph_fields) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "attack", inputs, outputs, initializer=list(inits), **graph_fields)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


# ---- 1. external data anywhere: attributes, sparse tensors, subgraph initializers ---------------------

LOCATIONS = (
    ".streamlit/config.toml",
    "../../etc/passwd",
    "/proc/self/environ",
    "/dev/zero",
    "/etc/shadow",
    "a" * 5000,
    "weights\x00.bin",
    "file:///etc/passwd",
    "..\\..\\windows\\win.ini",
    "~/.ssh/id_rsa",
    "/proc/self/mem",
    "",
    ".",
    "/",
    "data/hardware/h100-sxm.toml",
    "pyproject.toml",
)


def _external(rng, t: onnx.TensorProto) -> onnx.TensorProto:
    """`t` with its data moved to a hostile external location (and sometimes odd offset/length entries)."""
    t.ClearField("raw_data")
    del t.float_data[:], t.int64_data[:], t.int32_data[:]
    how = rng.random()  # EXTERNAL and a location; rarely EXTERNAL without entries, or entries alone
    if how < 0.9:
        t.data_location = TensorProto.EXTERNAL
    entries = [("location", rng.choice(LOCATIONS))]
    if rng.random() < 0.5:
        entries += [
            ("offset", rng.choice(("0", "1", "-1", "x", str(HUGE)))),
            ("length", rng.choice(("1", "4096", "99999999999", "-5", ""))),
        ]
    if rng.random() < 0.1:
        entries.append(("checksum", "0" * 40))
    if not 0.8 < how < 0.9:
        for k, v in entries:
            t.external_data.add(key=k, value=v)
    return t


def _weight(rng, name: str, shape=(2, 4), dtype=np.float32) -> onnx.TensorProto:
    return _external(rng, numpy_helper.from_array(np.ones(shape, dtype), name))


def _sparse(rng, name: str) -> onnx.SparseTensorProto:
    values = numpy_helper.from_array(np.ones(3, np.float32), name)
    indices = numpy_helper.from_array(np.array([0, 3, 5], np.int64), f"{name}_idx")
    for t in rng.sample((values, indices), rng.randint(1, 2)):
        _external(rng, t)
    return helper.make_sparse_tensor(values, indices, [2, 4])


def _body(rng, outer: str, out: str, inputs=()) -> onnx.GraphProto:
    """A subgraph adding an external initializer to an outer-scope tensor."""
    return helper.make_graph(
        [helper.make_node("Add", [outer, "bw"], [out])],
        "body",
        list(inputs),
        [_vi(out, [2, 4])],
        initializer=[_weight(rng, "bw")],
    )


# Where external data can hide: a Constant's value and sparse_value, sparse_initializer, the main graph's
# initializer, initializers in If, Loop and Scan bodies, tensor attributes, three levels down.
EXTERNAL_PLACES = (
    "constant",
    "constant_sparse",
    "sparse_init",
    "main_init",
    "if_body",
    "loop_body",
    "scan_body",
    "tensors_attr",
    "nested",
)


def external_data_model(rng) -> Attack:
    """y = x + c, where c's data (or a body's weight) points at a file the server must never open."""
    where = rng.choice(EXTERNAL_PLACES)
    x, inits, extra = _vi("x", [2, 4]), [], {}
    add = helper.make_node("Add", ["x", "c"], ["y"])
    if where == "constant":
        nodes = [helper.make_node("Constant", [], ["c"], value=_weight(rng, "cv")), add]
    elif where == "constant_sparse":
        nodes = [helper.make_node("Constant", [], ["c"], sparse_value=_sparse(rng, "cv")), add]
    elif where == "sparse_init":
        nodes, extra = [add], {"sparse_initializer": [_sparse(rng, "c")]}
    elif where == "main_init":
        nodes, inits = [add], [_weight(rng, "c")]
    elif where == "if_body":
        nodes = [
            helper.make_node("If", ["cond"], ["c"], then_branch=_body(rng, "x", "c"), else_branch=_body(rng, "x", "c")),
            add,
        ]
        inits = [numpy_helper.from_array(np.array(rng.random() < 0.5), "cond")]
    elif where == "loop_body":
        body = helper.make_graph(
            [helper.make_node("Identity", ["cin"], ["cout"]), helper.make_node("Add", ["x", "bw"], ["c_scan"])],
            "body",
            [_vi("i", [], TensorProto.INT64), _vi("cin", [], TensorProto.BOOL)],
            [_vi("cout", [], TensorProto.BOOL), _vi("c_scan", [2, 4])],
            initializer=[_weight(rng, "bw")],
        )
        nodes = [helper.make_node("Loop", ["trip", ""], ["c"], body=body), add]
        inits = [numpy_helper.from_array(np.array(rng.choice((1, 3, 255)), np.int64), "trip")]
    elif where == "scan_body":
        body = _body(rng, "s_in", "s_out", [_vi("s_in", [2, 4])])
        nodes = [
            helper.make_node("Scan", ["x3"], ["c3"], body=body, num_scan_inputs=1),
            helper.make_node("ReduceSum", ["c3"], ["c"], keepdims=0, axes=[0]),
            add,
        ]
        x = _vi("x3", [1, 2, 4])
        nodes.insert(0, helper.make_node("Squeeze", ["x3"], ["x"], axes=[0]))
    elif where == "tensors_attr":  # tensor-list and single-tensor attributes on a node nobody models
        node = helper.make_node(
            rng.choice(("FancyUnknownOp", "Identity", "Constant")), ["x"], ["c"], domain=rng.choice(("", "com.evil"))
        )
        node.attribute.append(helper.make_attribute("weights", [_weight(rng, f"t{i}") for i in range(3)]))
        node.attribute.append(helper.make_attribute("value", _weight(rng, "tv")))
        node.attribute.append(helper.make_attribute("sparse", _sparse(rng, "sv")))
        nodes = [node, add]
    else:  # an If inside a Loop body inside an If, the weight at the bottom
        inner = helper.make_node(
            "If", ["cond"], ["c"], then_branch=_body(rng, "x", "c"), else_branch=_body(rng, "x", "c")
        )
        mid = helper.make_graph([inner], "mid", [], [_vi("c", [2, 4])])
        nodes = [helper.make_node("If", ["cond"], ["c"], then_branch=mid, else_branch=mid), add]
        inits = [numpy_helper.from_array(np.array(True), "cond")]
    m = _model(nodes, [x], [_vi("y", [2, 4])], inits, **extra)
    return Attack(f"external:{where}", m.SerializeToString(), checks=(FILES,))


# ---- 2. hostile strings in every name field --------------------------------------------------------

HOSTILE = (
    "<script>alert(1)</script>",
    "<div style=position:fixed;inset:0>Session expired</div>",
    "<iframe src=http://127.0.0.1:1>",
    "![x](http://127.0.0.1:9/b.png)",
    ":red[x] **bold**",
    "$\\x$",
    "$$\\int$$",
    '=HYPERLINK("http://127.0.0.1:9","x")',
    "=cmd|' /C calc'!A0",
    "+1",
    "-1",
    "@SUM(A1)",
    "\tTAB",
    "\rCR",
    "=1+1",
    "".join(map(chr, range(32))) + "\x7f",
    "\x1b[31mred\x1b[0m\x1b]0;t\x07",
    "\u202eevil\u202c",
    "a\u0000b",
    "../../x",
    "/etc/passwd",
    "{{7*7}}",
    "%s%n",
    "' OR 1=1 --",
    "\ufeff",
    "\ud7ff\ue000",
    "x" * 100_000,
)
NAME_FIELDS = ("graph", "node", "op_type", "domain", "tensor", "dim_param", "doc", "metadata", "producer")
NOT_UTF8 = b"Q\xecQ\x80"


def _hostile_base(rng) -> onnx.ModelProto:
    """x[batch, 8] @ w -> + b -> Relu -> y, with value_info; every name in it can be replaced."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"], name="act"),
    ]
    inits = [
        numpy_helper.from_array(np.zeros((8, 4), np.float32), "w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "b"),
    ]
    return _model(
        nodes,
        [_vi("x", ["batch", 8])],
        [_vi("y", ["batch", 4])],
        inits,
        value_info=[_vi("h", ["batch", 4]), _vi("a", ["batch", 4])],
    )


def hostile_names_model(rng) -> Attack:
    """The base model with a hostile payload in some (or every) name field; 1 in 5 also writes its sheet."""
    m = _hostile_base(rng)
    g = m.graph
    fields = NAME_FIELDS if rng.random() < 0.3 else rng.sample(NAME_FIELDS, rng.randint(1, 3))
    long_used = False

    def payload() -> str:
        nonlocal long_used
        text = rng.choice(HOSTILE)
        if len(text) > 1000:
            if long_used:  # one 10^5-character name per model keeps a case under a few ms to build
                return rng.choice(HOSTILE[:-1])
            long_used = True
        return text

    dim = "batch"
    for f in fields:
        if f == "graph":
            g.name = payload()
        elif f == "node":
            for n in g.node:
                n.name = payload()
        elif f == "op_type":
            g.node[1].op_type = payload()  # the Add: an unknown op is unmodeled, not a crash
        elif f == "domain":
            g.node[rng.randrange(3)].domain = payload()
        elif f == "tensor":
            new = {t: f"{payload()}#{t}" for t in ("x", "w", "h", "b", "a", "y")}
            for n in g.node:
                n.input[:] = [new[i] for i in n.input]
                n.output[:] = [new[o] for o in n.output]
            for v in (*g.input, *g.output, *g.value_info, *g.initializer):
                v.name = new[v.name]
        elif f == "dim_param":
            dim = payload()
            for v in (*g.input, *g.output, *g.value_info):
                v.type.tensor_type.shape.dim[0].dim_param = dim
        elif f == "doc":
            m.doc_string, g.doc_string = payload(), payload()
            g.node[0].doc_string = payload()
        elif f == "metadata":
            helper.set_model_props(m, {payload(): payload(), "k": payload()})
        else:
            m.producer_name, m.producer_version, m.domain = payload(), payload(), payload()
    data = m.SerializeToString()
    label = f"names:{'+'.join(fields)}"
    if rng.random() < 0.05:  # invalid UTF-8 inside a protobuf string field: must be refused
        g.node[2].name = "QQQQ"
        return Attack(
            label + "+not_utf8",
            m.SerializeToString().replace(b"QQQQ", NOT_UTF8),
            (("batch", 2),) if dim == "batch" else ((dim, 2),),
            expect="rejected",
        )
    checks = (SHEET,) if rng.random() < 0.2 else ()
    # (a dim_param that reads as an expression, '-1' or '{{7*7}}', cannot be bound by its name: either outcome)
    expect = None if "dim_param" in fields else "mapped"
    return Attack(label, data, ((dim, rng.choice((1, 2, 8))),), expect=expect, checks=checks)


# ---- 3. wide fan-in, wide fan-out, long chains ---------------------------------------------------


def _nodes_fast(op: str, inputs: list[list[str]], outputs: list[list[str]]) -> list[onnx.NodeProto]:
    out = []
    for ins, outs in zip(inputs, outputs):
        n = onnx.NodeProto()
        n.op_type = op
        n.input.extend(ins)
        n.output.extend(outs)
        out.append(n)
    return out


def wide_graph_model(rng) -> Attack:
    """N branches from one input joined by one variadic node (fan-in), N readers of one tensor (fan-out),
    or a chain N long; N log-uniform up to 20,000 (a linear engine maps 20,000 nodes in well under a second)."""
    n = round(2 ** rng.uniform(1, np.log2(20_000)))
    shape = rng.choice(([1, 8], [4, 16], ["batch", 8]))
    dims = (("batch", 2),) if "batch" in shape else ()
    branch = rng.choice(("Relu", "Identity", "Sigmoid"))
    how = rng.choice(("fan_in", "fan_in", "fan_out", "chain"))
    if how == "fan_in":
        join = rng.choice(("Sum", "Concat", "Max", "Mean", "Min"))
        nodes = _nodes_fast(branch, [["x"]] * n, [[f"r{i}"] for i in range(n)])
        nodes.append(
            helper.make_node(join, [f"r{i}" for i in range(n)], ["y"], **({"axis": 0} if join == "Concat" else {}))
        )
        out_shape = [None, shape[1]] if join == "Concat" else shape
        outputs = [_vi("y", out_shape)]
        label = f"wide:fan_in:{join}:{n}"
    elif how == "fan_out":
        nodes = _nodes_fast(branch, [["x"]] * n, [[f"r{i}"] for i in range(n)])
        outputs = [_vi(f"r{i}", shape) for i in range(n)]
        label = f"wide:fan_out:{n}"
    else:
        names = ["x"] + [f"r{i}" for i in range(n)]
        nodes = _nodes_fast(branch, [[a] for a in names[:-1]], [[b] for b in names[1:]])
        outputs = [_vi(names[-1], shape)]
        label = f"wide:chain:{n}"
    m = _model(nodes, [_vi("x", shape)], outputs)
    return Attack(label, m.SerializeToString(), dims, expect="mapped")


# ---- 4. amplifying constants: huge shapes, trip counts and bodies ---------------------------------

HUGE_SHAPES = ([1 << 16, 1 << 17], [1 << 31], [1 << 20] * 3, [0, HUGE], [HUGE], [1 << 31, 1 << 31], [-1, 4])
MANY_BODY_NODES = 200_001  # over MAX_NODES=200,000 (mapper/core/limits.py) in a body alone


def _int64(name, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _relu_body(count: int, name="body") -> onnx.GraphProto:
    names = ["bx"] + [f"b{i}" for i in range(count)]
    nodes = _nodes_fast("Relu", [[a] for a in names[:-1]], [[b] for b in names[1:]])
    return helper.make_graph(
        nodes,
        name,
        [],
        [_vi(names[-1], [2, 4])],
        initializer=[numpy_helper.from_array(np.zeros((2, 4), np.float32), "bx")],
    )


def _loop(trip: str, body_nodes: int, depth: int) -> tuple[onnx.NodeProto, list]:
    """A Loop of `depth` levels (each a Loop of the trip count), the innermost a chain of Relus."""
    inner = _relu_body(body_nodes)
    for level in range(depth):
        last = inner.output[0].name
        body = helper.make_graph(
            [*inner.node, helper.make_node("Identity", ["cin"], ["cout"])],
            f"loop{level}",
            [_vi("i", [], TensorProto.INT64), _vi("cin", [], TensorProto.BOOL)],
            [_vi("cout", [], TensorProto.BOOL), _vi(last, [2, 4])],
            initializer=list(inner.initializer),
        )
        node = helper.make_node("Loop", [trip, "go"], [f"l{level}"], body=body)
        inner = helper.make_graph([node], f"wrap{level}", [], [_vi(f"l{level}", None)])
    return node, [_int64(trip, HUGE), numpy_helper.from_array(np.array(True), "go")]


def amplifier_model(rng) -> Attack:
    """Small files whose constants ask for enormous work or memory (ConstantOfShape, Expand, Tile, Range,
    Resize targets; a Loop of 2^62 trips, nested; an If whose branches hold many nodes)."""
    over_limit = rng.random() < 0.001  # 1 in 1,000: a body over MAX_NODES (a 10 MB model, ~4 s a case)
    how = (
        "if_body"
        if over_limit
        else rng.choice(("constant_of_shape", "expand", "tile", "range", "resize", "loop", "nested_loop", "if_body"))
    )
    x, inits, expect = _vi("x", [2, 4]), [], None
    if how == "constant_of_shape":
        shape = rng.choice(HUGE_SHAPES)
        nodes = [
            helper.make_node(
                "ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([1.0], np.float32))
            ),
            helper.make_node("Relu", ["c"], ["y"]),
        ]
        inits = [_int64("s", shape)]
    elif how in ("expand", "tile"):
        target = rng.choice(HUGE_SHAPES[:-1])
        target = (target + [4])[:2] if how == "tile" else [*target, 4][-max(2, len(target)) :]
        nodes = [helper.make_node(how.capitalize(), ["x", "s"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
        inits = [_int64("s", target)]
    elif how == "range":
        nodes = [helper.make_node("Range", ["a", "b", "d"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
        inits = [_int64("a", 0), _int64("b", rng.choice((HUGE, 1 << 40, -HUGE))), _int64("d", rng.choice((1, -1, 0)))]
    elif how == "resize":
        nodes = [helper.make_node("Resize", ["x", "", "sc"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
        inits = [numpy_helper.from_array(np.array([rng.choice((1e9, 1e30, float("inf"))), 1e6], np.float32), "sc")]
    elif how in ("loop", "nested_loop"):
        depth = 1 if how == "loop" else rng.randint(2, 5)
        loop, inits = _loop("trip", rng.choice((1, 10, 200)), depth)
        loop.output[0] = "c"
        nodes = [loop, helper.make_node("ReduceSum", ["c"], ["y"], keepdims=0)]
    else:
        count = MANY_BODY_NODES if over_limit else rng.choice((10, 1000, 5000))
        expect = "rejected" if over_limit else None
        nodes = [
            helper.make_node(
                "If",
                ["cond"],
                ["c"],
                then_branch=_relu_body(count, "then"),
                else_branch=_relu_body(rng.choice((1, count)), "else"),
            ),
            helper.make_node("Relu", ["c"], ["y"]),
        ]
        inits = [numpy_helper.from_array(np.array(rng.random() < 0.5), "cond")]
        how = f"if_body:{count}"
    m = _model(nodes, [x], [_vi("y", None)], inits)
    return Attack(f"amplifier:{how}", m.SerializeToString(), expect=expect)
