"""Fuzz cases for the untrusted-input boundary, shared by tests/test_fuzz.py and bench/fuzz.py.

`make_case(seed)` builds one deterministic case (a model upload, a hardware profile or a CSV trace)
from a seed; `run_case(case)` pushes it through the public API the dashboard uses and returns
"mapped" or "rejected" (a MapperError). Anything else it raises is a crash the engine must fix, and so
is a broken contract: a message of more than one line or over `MESSAGE_CHARS`, an outcome other than
the one the generator implies (`Case.expect`), or a failed extra check (`Case.checks`, tests/fuzz_checks.py).
A fifth of the seeds make the attack classes of issue 15 (`ATTACK_SHARES`); the rest make the same
cases as before it (`classic_case`), so the seeds of earlier runs replay with `classic_case(seed)`.
`time_bound` turns a case that runs too long into `CaseTimeout` (a BaseException, so no
`except Exception` in the engine can swallow it).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import random
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mapper
from tests import fuzz_attacks, fuzz_checks
from tests.fuzz_attacks import FILES, SHEET

ROOT = Path(__file__).resolve().parents[1]
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS_DIR = ROOT / "tests" / "models"
HUGE = 1 << 62
BAD_DIMS = (0, -1, -7, HUGE, 1 << 31, (1 << 31) + 1, 1 << 40, 3, 1)
BAD_NUMBERS = (
    0,
    -1,
    -1e300,
    float("nan"),
    float("inf"),
    float("-inf"),
    1e308,
    5e-324,
    True,
    "12",
    None,
    [],
    {},
    [1, 2],
    1 << 70,
    1.5,
    2.0**80,
)
# Ops the engine has rules for, some it has not, and control flow (subgraph attributes).
OPS = (
    "MatMul",
    "Gemm",
    "Conv",
    "ConvTranspose",
    "Add",
    "Mul",
    "Relu",
    "Softmax",
    "LayerNormalization",
    "Reshape",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "Expand",
    "Tile",
    "Pad",
    "Resize",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "ReduceMean",
    "ReduceSum",
    "Shape",
    "Size",
    "ConstantOfShape",
    "Range",
    "Where",
    "Cast",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Einsum",
    "TopK",
    "OneHot",
    "DepthToSpace",
    "SpaceToDepth",
    "NonZero",
    "Attention",
    "MultiHeadAttention",
    "GroupQueryAttention",
    "Constant",
    "Identity",
    "Erf",
    "BatchNormalization",
    "ArgMax",
    "Trilu",
    "If",
    "Loop",
    "Scan",
    "FancyUnknownOp",
)
ATTR_NAMES = (
    "axis",
    "axes",
    "perm",
    "kernel_shape",
    "strides",
    "pads",
    "dilations",
    "group",
    "transA",
    "transB",
    "keepdims",
    "to",
    "k",
    "blocksize",
    "num_heads",
    "equation",
    "mode",
    "split",
    "starts",
    "ends",
    "value",
    "allowzero",
    "upper",
    "output_padding",
    "output_shape",
    "epsilon",
    "alpha",
)
ELEM_TYPES = (
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.BFLOAT16,
    TensorProto.INT64,
    TensorProto.INT32,
    TensorProto.INT8,
    TensorProto.BOOL,
    TensorProto.STRING,
    TensorProto.UNDEFINED,
    TensorProto.DOUBLE,
    TensorProto.FLOAT8E4M3FN,
    999,
)


class CaseTimeout(BaseException):
    """A case ran past its time bound (a hang, as far as the fuzzer is concerned)."""


@contextlib.contextmanager
def time_bound(seconds: float):
    """Raise CaseTimeout in the main thread after `seconds` (SIGALRM; the main thread only)."""

    def fire(signum, frame):
        raise CaseTimeout(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Case:
    kind: str  # model | hardware | trace
    label: str  # which generator and mutation made it
    payload: object  # model bytes, profile dict/bytes, or CSV bytes
    dims: dict = field(default_factory=dict)
    source: str = "h100-sxm"  # model cases: the profile; hardware cases: the model to map
    expect: str | None = None  # "mapped" | "rejected" where the generator implies it
    checks: tuple[str, ...] = ()  # extra checks after the run (fuzz_attacks.FILES, SHEET)

    def describe(self) -> str:
        size = len(self.payload) if isinstance(self.payload, (bytes, bytearray)) else "dict"
        return f"{self.kind}:{self.label} size={size} dims={self.dims}"


# ---- seed corpora ------------------------------------------------------------------------------


@functools.cache
def real_models() -> tuple[tuple[str, bytes], ...]:
    """(name, bytes) of every real model: onnx's light models, the HF fixtures, the built-ins (but the 70B)."""
    out = [(p.stem, p.read_bytes()) for p in sorted(LIGHT_DIR.glob("*.onnx"))]
    out += [(p.stem, p.read_bytes()) for p in sorted(MODELS_DIR.glob("*.onnx"))]
    out += [(name, mapper.zoo_model_bytes(name)) for name in mapper.ZOO_NAMES if name != "llama2-70b"]
    return tuple(out)


@functools.cache
def parsed(name: str) -> onnx.ModelProto:
    data = dict(real_models())[name]
    m = onnx.ModelProto()
    m.ParseFromString(data)
    return m


@functools.cache
def free_dims(name: str) -> tuple[str, ...]:
    from mapper.model.bindings import symbolic_dims

    return tuple(symbolic_dims(parsed(name)))


@functools.cache
def base_profile() -> dict:
    return mapper.load_hardware("h100-sxm").to_dict()


@functools.cache
def small_workload():
    return mapper.load_workload("resnet50", {"batch": 1})


@functools.cache
def branch_dims(name: str) -> frozenset[str]:
    """The dims an If branches on (use_cache_branch): bound to 0 or 1 only."""
    return frozenset(d for d, role in mapper.dim_roles(dict(real_models())[name]).items() if role == "branch")


def sane_dims(name: str, dims: dict) -> bool:
    """Bindings a real model as it is must map at: 1..128, and 0 or 1 where an If branches on the dim."""
    return all(0 < v <= 128 and (k not in branch_dims(name) or v == 1) for k, v in dims.items())


def pick_dims(rng: random.Random, names, wild: float = 0.1) -> dict:
    dims = {}
    for n in names:
        dims[n] = rng.choice(BAD_DIMS) if rng.random() < wild else rng.choice((1, 2, 4, 16, 128))
    return dims


# ---- model cases ---------------------------------------------------------------------------------


def mutate_bytes(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    b = bytearray(data)
    how = rng.choice(("truncate", "flip", "splice", "insert", "delete", "overwrite", "prefix"))
    if how == "truncate":
        b = b[: rng.randrange(len(b) + 1)]
    elif how == "flip":
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif how == "splice":
        other = rng.choice(real_models())[1]
        cut, cut2 = rng.randrange(len(b) + 1), rng.randrange(len(other) + 1)
        b = b[:cut] + other[cut2:]
    elif how == "insert":
        at = rng.randrange(len(b) + 1)
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif how == "delete":
        at = rng.randrange(len(b) + 1)
        del b[at : at + rng.randint(1, 64)]
    elif how == "overwrite":  # varints of extreme values where a length or a dim may sit
        at = rng.randrange(len(b) + 1)
        b[at : at + 10] = rng.choice((b"\xff" * 9 + b"\x01", b"\x80" * 9 + b"\x00", b"\x00" * 10, b"\x7f"))
    else:
        b = bytearray(rng.choice((b"", b"\x00", b"\x0a\xff\xff\xff\xff\x0f", b"\x3a\x00"))) + b
    return how, bytes(b)


def _set_dim(d, rng: random.Random) -> None:
    choice = rng.random()
    if choice < 0.6:
        d.dim_value = rng.choice(BAD_DIMS)
    elif choice < 0.8:
        d.dim_param = rng.choice(
            (
                "batch",
                "seq",
                "s0 + s1",
                "2*seq",
                "batch // 0",
                "x" * 300,
                "((((" * 50,
                "1" + "*2" * 200,
                "__import__('os')",
                "",
                "seq % 0",
                "9" * 50,
            )
        )
    else:
        d.Clear()


def mutate_proto(rng: random.Random, m: onnx.ModelProto) -> str:
    """One structural mutation of a parsed model, in place; returns its name."""
    g = m.graph
    nodes = list(g.node)
    how = rng.choice(
        (
            "dim",
            "init_dims",
            "cycle",
            "dangling",
            "dup_name",
            "dup_output",
            "huge_attr",
            "attr_type",
            "domain",
            "subgraph",
            "opset",
            "op_type",
            "drop_init",
            "dtype",
            "drop_input",
            "self_loop",
            "no_shape",
            "graph_output",
            "many_inputs",
        )
    )
    if how == "dim":
        vis = list(g.input) + list(g.output) + list(g.value_info)
        if vis:
            dims = rng.choice(vis).type.tensor_type.shape.dim
            if len(dims):
                _set_dim(dims[rng.randrange(len(dims))], rng)
            else:
                _set_dim(dims.add(), rng)
    elif how == "init_dims" and len(g.initializer):
        t = g.initializer[rng.randrange(len(g.initializer))]
        if len(t.dims):
            t.dims[rng.randrange(len(t.dims))] = rng.choice(BAD_DIMS)
        else:
            t.dims.extend([rng.choice(BAD_DIMS)] * rng.randint(1, 3))
    elif how == "cycle" and len(nodes) > 1:
        i, j = sorted(rng.sample(range(len(nodes)), 2))
        if nodes[j].output:
            g.node[i].input.append(nodes[j].output[0])
    elif how == "self_loop" and nodes:
        n = g.node[rng.randrange(len(nodes))]
        if n.output:
            n.input.append(n.output[0])
    elif how == "dangling" and nodes:
        n = g.node[rng.randrange(len(nodes))]
        if len(n.input):
            n.input[rng.randrange(len(n.input))] = rng.choice(("nowhere", "", "../../etc/passwd"))
        else:
            n.input.append("nowhere")
    elif how == "dup_name" and nodes:
        name = rng.choice(nodes).name
        for n in rng.sample(list(g.node), min(len(nodes), 3)):
            n.name = name
    elif how == "dup_output" and len(nodes) > 1:
        a, b = rng.sample(list(g.node), 2)
        if a.output and b.output:
            b.output[0] = a.output[0]
    elif how == "huge_attr" and nodes:
        n = g.node[rng.randrange(len(nodes))]
        name = rng.choice(ATTR_NAMES)
        value = rng.choice(
            (
                [HUGE] * 4,
                [-HUGE, HUGE],
                list(range(rng.choice((20_000, 64)))),
                HUGE,
                -HUGE,
                "x" * 100_000,
                [0] * 8,
                1e308,
                float("nan"),
            )
        )
        del_attr(n, name)
        n.attribute.append(helper.make_attribute(name, value))
    elif how == "attr_type" and nodes:
        n = g.node[rng.randrange(len(nodes))]
        if len(n.attribute):
            a = n.attribute[rng.randrange(len(n.attribute))]
            name = a.name
            del_attr(n, name)
            n.attribute.append(
                helper.make_attribute(
                    name, rng.choice((1.5, "str", [1.0, 2.0], ["a"], 7, [7], numpy_helper.from_array(np.zeros(3))))
                )
            )
    elif how == "domain" and nodes:
        g.node[rng.randrange(len(nodes))].domain = rng.choice(("com.evil", "ai.onnx.ml", "com.microsoft", "x" * 500))
    elif how == "subgraph" and nodes:
        i = rng.randrange(len(nodes))
        g.node[i].CopyFrom(control_node(rng, nodes[i], depth=rng.randint(1, 12)))
    elif how == "opset":
        for o in m.opset_import:
            o.version = rng.choice((0, 1, 6, 7, 13, 18, 21, 99, -1, HUGE))
        if rng.random() < 0.2:
            del m.opset_import[:]
    elif how == "op_type" and nodes:
        g.node[rng.randrange(len(nodes))].op_type = rng.choice(OPS)
    elif how == "drop_init" and len(g.initializer):
        del g.initializer[rng.randrange(len(g.initializer))]
    elif how == "dtype":
        vis = list(g.input) + list(g.initializer)
        if vis:
            v = rng.choice(vis)
            if isinstance(v, TensorProto):
                v.data_type = rng.choice(ELEM_TYPES)
            else:
                v.type.tensor_type.elem_type = rng.choice(ELEM_TYPES)
    elif how == "drop_input" and len(g.input):
        del g.input[rng.randrange(len(g.input))]
    elif how == "no_shape" and len(g.input):
        g.input[rng.randrange(len(g.input))].type.tensor_type.ClearField("shape")
    elif how == "graph_output":
        g.output.append(
            helper.make_tensor_value_info(
                rng.choice(("nowhere", g.input[0].name if len(g.input) else "x")),
                TensorProto.FLOAT,
                [rng.choice(BAD_DIMS)],
            )
        )
    elif how == "many_inputs" and nodes:
        n = g.node[rng.randrange(len(nodes))]
        n.input.extend([n.input[0] if len(n.input) else "x"] * rng.choice((10, 1000)))
    return how


def make_attr(name: str, value) -> onnx.AttributeProto:
    if isinstance(value, list) and not value:
        return helper.make_attribute(name, value, attr_type=onnx.AttributeProto.INTS)
    return helper.make_attribute(name, value)


def del_attr(node: onnx.NodeProto, name: str) -> None:
    keep = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(keep)


def control_node(rng: random.Random, inner: onnx.NodeProto, depth: int) -> onnx.NodeProto:
    """`inner` wrapped in `depth` levels of If/Loop/Scan subgraphs (outputs kept)."""
    body = helper.make_graph(
        [inner], "body", [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in inner.output]
    )
    for _ in range(depth):
        op = rng.choice(("If", "Loop", "Scan"))
        outs = [o.name for o in body.output] or ["out"]
        if op == "If":
            node = helper.make_node("If", ["cond"], outs, then_branch=body, else_branch=body)
        elif op == "Loop":
            node = helper.make_node("Loop", ["trip", "cond"], outs, body=body)
        else:
            node = helper.make_node("Scan", list(inner.input)[:1] or ["x"], outs, body=body, num_scan_inputs=1)
        body = helper.make_graph(
            [node], f"level{_}", [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
        )
    node.name = inner.name or "ctl"
    return node


def random_attr(rng: random.Random, name: str):
    return rng.choice(
        (
            rng.randint(-4, 4),
            [rng.randint(-2, 5) for _ in range(rng.randint(0, 6))],
            HUGE,
            -HUGE,
            [HUGE, 1],
            1e308,
            "abc",
            "ij,jk->ik",
            "bij,bjk->bik",
            "...,...",
            "constant",
            numpy_helper.from_array(np.array([rng.randint(-3, 9)] * rng.randint(0, 4), np.int64)),
        )
    )


def random_graph(rng: random.Random) -> tuple[str, bytes, dict]:
    """A small random graph: random ops, wiring, attributes, shapes and initializers."""
    names = ["x"]
    shape_x = [rng.choice(("batch", 1, 2, 3, 8, 16, 0, HUGE, -1)) for _ in range(rng.randint(0, 5))]
    inputs = [helper.make_tensor_value_info("x", rng.choice(ELEM_TYPES[:4]), shape_x)]
    inits = []
    for k in range(rng.randint(0, 4)):
        if rng.random() < 0.5:
            arr = np.array([rng.randint(-3, 64) for _ in range(rng.randint(0, 5))], dtype=np.int64)
            t = numpy_helper.from_array(arr, f"c{k}")
        else:
            t = numpy_helper.from_array(
                np.zeros([rng.randint(1, 4) for _ in range(rng.randint(0, 4))], np.float32), f"c{k}"
            )
            if rng.random() < 0.3:  # dims that disagree with the data, or are absurd
                t.dims[:] = [rng.choice(BAD_DIMS) for _ in range(rng.randint(1, 4))]
        inits.append(t)
        names.append(t.name)
    nodes = []
    for i in range(rng.randint(1, 12)):
        op = rng.choice(OPS)
        ins = [rng.choice(names + ["", "ghost"]) for _ in range(rng.randint(0, 4))]
        out = f"t{i}" if rng.random() > 0.05 else rng.choice(names)
        attrs = {a: random_attr(rng, a) for a in rng.sample(ATTR_NAMES, rng.randint(0, 3))}
        if op in ("If", "Loop", "Scan"):
            node = control_node(rng, helper.make_node("Relu", ins[:1] or ["x"], [f"{out}_in"]), rng.randint(1, 10))
            del node.output[:]
            node.output.append(out)
        else:
            node = helper.make_node(
                op,
                ins,
                [out] + ([f"t{i}b"] if rng.random() < 0.2 else []),
                domain=rng.choice(("", "", "", "com.microsoft", "weird.domain")),
            )
            node.attribute.extend(make_attr(k, v) for k, v in attrs.items())
        nodes.append(node)
        names += list(node.output)
    outputs = [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", rng.choice((13, 17, 18, 7, 21)))])
    dims = {"batch": rng.choice((1, 2, 0, 1 << 31))} if "batch" in shape_x else {}
    return "random_graph", model.SerializeToString(), dims


def random_protobuf(rng: random.Random, depth: int = 0) -> bytes:
    """Bytes that are well-formed protobuf of random field numbers and wire types."""
    out = bytearray()
    for _ in range(rng.randint(1, 40 if depth == 0 else 6)):
        field_no, wire = rng.randint(1, 20), rng.choice((0, 1, 2, 5))
        out += varint(field_no << 3 | wire)
        if wire == 0:
            out += varint(rng.choice((0, 1, HUGE, (1 << 64) - 1, rng.randrange(1 << 20))))
        elif wire == 1:
            out += bytes(rng.randrange(256) for _ in range(8))
        elif wire == 5:
            out += bytes(rng.randrange(256) for _ in range(4))
        else:
            body = (
                random_protobuf(rng, depth + 1)
                if depth < 4 and rng.random() < 0.3
                else bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
            )
            out += varint(len(body)) + body
    return bytes(out)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def model_case(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.08:  # (a random protobuf may parse as a ModelProto, but never as a graph that maps)
        return Case("model", "random_protobuf", random_protobuf(rng), expect="rejected")
    if roll < 0.1:
        return Case(
            "model", "random_bytes", bytes(rng.randrange(256) for _ in range(rng.randint(0, 512))), expect="rejected"
        )
    if roll < 0.35:
        label, data, dims = random_graph(rng)
        return Case("model", label, data, dims)
    name, data = rng.choice(real_models())
    dims = pick_dims(rng, free_dims(name))
    if roll < 0.55:
        how, data = mutate_bytes(rng, data)
        return Case("model", f"bytes:{how}:{name}", data, dims)
    if roll < 0.6:
        dims = pick_dims(rng, free_dims(name), wild=0.5)
        return Case("model", f"as-is:{name}", data, dims, expect="mapped" if sane_dims(name, dims) else None)
    m = copy.deepcopy(parsed(name))
    hows = [mutate_proto(rng, m) for _ in range(rng.randint(1, 3))]
    return Case("model", f"proto:{'+'.join(hows)}:{name}", m.SerializeToString(), dims)


# ---- hardware cases ----------------------------------------------------------------------------


def _paths(tree, prefix=()):
    for k, v in tree.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (k,))


def hardware_case(rng: random.Random) -> Case:
    tree = copy.deepcopy(base_profile())
    hows = []
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(tree))
        path = rng.choice(paths)
        parent = tree
        for k in path[:-1]:
            parent = parent[k]
        how = rng.choice(("missing", "bad_value", "bad_value", "extra", "huge_table", "curve", "type"))
        hows.append(f"{how}:{'.'.join(map(str, path))}")
        if how == "missing":
            del parent[path[-1]]
        elif how == "bad_value":
            target = parent[path[-1]]
            if isinstance(target, dict) and "value" in target:
                target["value"] = rng.choice(BAD_NUMBERS)
            else:
                parent[path[-1]] = rng.choice(BAD_NUMBERS + ("", "x" * 5000, "H100"))
        elif how == "extra":
            parent[rng.choice(("bogus", "value", "source", "fp64"))] = rng.choice(BAD_NUMBERS)
        elif how == "huge_table":
            parent[path[-1]] = {
                f"k{i}": {"value": 1.0, "source": "x"} for i in range(rng.choice((10, 10, 10, 100_000)))
            }
        elif how == "curve":
            key = rng.choice(("matrix_by_flops", "vector_by_bytes", "dram_by_bytes"))
            pts = [[1.0 + i, 0.5] for i in range(rng.choice((1, 2, 257, 257, 100_000)))]
            if pts and rng.random() < 0.5:
                pts[rng.randrange(len(pts))] = [rng.choice(BAD_NUMBERS), rng.choice(BAD_NUMBERS)]
            if isinstance(tree.get("efficiency"), dict) and isinstance(tree["efficiency"].get(key), dict):
                tree["efficiency"][key]["value"] = pts  # (an earlier mutation may have removed the table)
        else:
            parent[path[-1]] = rng.choice(([1, 2], "str", 3, None, [[1, 0.5]]))
    fmt = rng.choice(("dict", "dict", "json", "toml", "bytes"))
    payload: object = tree
    if fmt == "json":
        payload = json.dumps(tree, default=str).encode()
    elif fmt == "toml":
        payload = to_toml(tree).encode()
    elif fmt == "bytes":
        _, payload = mutate_bytes(rng, json.dumps(tree, default=str).encode())
    return Case("hardware", f"{fmt}:{'|'.join(hows)}", payload)


def to_toml(tree: dict) -> str:
    """A minimal TOML writer for profile-shaped trees (tables of inline tables)."""

    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(str(k))} = {val(x)}" for k, x in v.items()) + " }"
        return '""'

    lines = []
    for section, body in tree.items():
        if not isinstance(body, dict):
            lines.append(f"{json.dumps(str(section))} = {val(body)}")
            continue
        lines.append(f"[{json.dumps(str(section))}]")
        lines += [f"{json.dumps(str(k))} = {val(v)}" for k, v in body.items()]
    return "\n".join(lines)


# ---- trace cases ---------------------------------------------------------------------------------


def trace_case(rng: random.Random) -> Case:
    cols = rng.choice(
        (
            ["arrival_s"],
            ["arrival_s", "prompt_tokens"],
            ["arrival_s", "prompt_tokens", "output_tokens"],
            ["arrival_s", "bogus"],
            [],
            ["arrival_s", "arrival_s"],
            [" arrival_s "],
        )
    )
    rows, t = [], 0.0
    for _ in range(rng.choice((0, 1, 3, 50, 2000))):
        t += rng.expovariate(100)
        row = [repr(t)] + [str(rng.randint(1, 4096)) for _ in cols[1:]]
        if rng.random() < 0.05 and row:
            row[rng.randrange(len(row))] = rng.choice(
                ("nan", "inf", "-1", "1e400", "", "x", "1.5", "0", "9" * 400, "\x00", '"', "1,2")
            )
        rows.append(",".join(row))
    text = "\n".join([",".join(cols)] + rows)
    data = text.encode()
    if rng.random() < 0.2:
        _, data = mutate_bytes(rng, data)
    if rng.random() < 0.05:
        data = rng.choice((b"\xef\xbb\xbf", b"\xff\xfe", b"")) + data
    return Case("trace", f"csv:{'+'.join(cols) or 'none'}", data)


# ---- one case ------------------------------------------------------------------------------------

# Attack classes (tests/fuzz_attacks.py) and their share of all seeds: a fifth together.
ATTACK_SHARES = (
    (0.05, fuzz_attacks.external_data_model),  # external data in attributes, sparse tensors, subgraphs
    (0.06, fuzz_attacks.hostile_names_model),  # hostile strings in every name field
    (0.04, fuzz_attacks.wide_graph_model),  # wide fan-in / fan-out, long chains
    (0.05, fuzz_attacks.amplifier_model),  # amplifying constants, trip counts, big bodies
)
MESSAGE_CHARS = 2000  # a one-line error longer than this is a page of echoed input, not a message


def make_case(seed: int) -> Case:
    """The case of a seed: an attack class for a fifth of the seeds (drawn from their own stream, so the
    other seeds keep their case from before the attack classes), else `classic_case(seed)`."""
    generator = attack_generator(seed)
    if generator is None:
        return classic_case(seed)
    a = generator(random.Random(f"attack:{seed}"))
    return Case("model", a.label, a.data, dict(a.dims), expect=a.expect, checks=a.checks)


def attack_generator(seed: int):
    """The attack class a seed draws (its generator), or None for a classic case."""
    roll = random.Random(f"class:{seed}").random()
    for share, generator in ATTACK_SHARES:
        if roll < share:
            return generator
        roll -= share
    return None


def classic_case(seed: int) -> Case:
    """The corpus before the attack classes: mutated real models, random graphs, profiles, traces."""
    rng = random.Random(seed)
    roll = rng.random()
    if roll < 0.7:
        return model_case(rng)
    if roll < 0.9:
        return hardware_case(rng)
    return trace_case(rng)


def _run(case: Case) -> None:
    if case.kind == "model":
        hw = mapper.load_hardware(case.source)  # (before any file check: the profile is the engine's own file)
        if FILES in case.checks:
            map_opening_nothing(case, hw)
        else:
            map_model(case, hw)
    elif case.kind == "hardware":
        mapper.map_workload(small_workload(), mapper.load_hardware(case.payload))
    else:
        from mapper.serve.serving import ServingConfig, simulate_serving
        from mapper.serve.trace import load_trace

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.csv"
            path.write_bytes(case.payload)
            trace = load_trace(path)
        simulate_serving(
            lambda batch: 1e-3 * (1 + 0.1 * batch), ServingConfig(max_batch=8, max_wait_s=1e-3, trace=trace)
        )


def map_opening_nothing(case: Case, hw) -> None:
    """map_model, failing the case when it opened a file (also when the model was rejected)."""
    errors = []

    def attempt():
        try:
            map_model(case, hw)
        except mapper.MapperError as exc:
            errors.append(exc)

    opened = fuzz_checks.files_opened(attempt)
    if opened:
        raise AssertionError(f"the model made the engine open {opened[:3]}")
    if errors:
        raise errors[0]


def map_model(case: Case, hw) -> None:
    result = mapper.map_workload(mapper.load_workload(case.payload, case.dims), hw)
    if SHEET in case.checks:
        fuzz_checks.check_sheets(result, case.payload)


def run_case(case: Case) -> str:
    """'mapped' or 'rejected'; any other exception propagates (a crash), and so does a broken contract."""
    message = ""
    try:
        _run(case)
        outcome = "mapped"
    except mapper.MapperError as exc:
        message = str(exc)
        if "\n" in message or not message or len(message) > MESSAGE_CHARS:
            raise AssertionError(
                f"MapperError message is not one line of 1..{MESSAGE_CHARS} characters: {message[:300]!r}"
            ) from exc
        outcome = "rejected"
    if FILES in case.checks:
        fuzz_checks.check_no_external_reference(case.payload)
    if case.expect and outcome != case.expect:
        raise AssertionError(f"{case.label[:100]} must be {case.expect}, was {outcome} {message[:200]}")
    return outcome
