"""Values at import time: ONNX element types, attributes, small constants, and folding.

Shape subgraphs (Shape -> Gather -> Concat -> Reshape, Range, Expand, Where...) are
evaluated here with numpy at the user's bindings so that every Reshape target is a
constant. Only small tensors are ever materialized, and external data is never read.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from mapper.core.dtypes import tensor_dtype
from mapper.core.graph import Node
from mapper.model.sandbox import is_external
from mapper.ops.shape import NoRule, reshape_target

FOLD_MAX_ELEMENTS = (
    1024  # the largest tensor we evaluate at import: shape arithmetic is tiny; masks and weights need no value
)


def is_small_inline(t: onnx.TensorProto) -> bool:
    """Stored in the file and small enough to evaluate (FOLD_MAX_ELEMENTS)."""
    return not is_external(t) and math.prod(t.dims) <= FOLD_MAX_ELEMENTS


def small_value(t: onnx.TensorProto) -> np.ndarray | None:
    """The tensor's value if it is small and stored inline; never touches external data."""
    if not is_small_inline(t):
        return None
    if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        return tensor_array(t)
    except Exception:  # noqa: BLE001 - a malformed tensor is simply not a known constant
        return None


# Element types whose raw_data numpy reads directly (little-endian, as ONNX stores it).
_RAW_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "<f4",
    onnx.TensorProto.DOUBLE: "<f8",
    onnx.TensorProto.INT64: "<i8",
    onnx.TensorProto.INT32: "<i4",
    onnx.TensorProto.INT8: "i1",
    onnx.TensorProto.UINT8: "u1",
    onnx.TensorProto.FLOAT16: "<f2",
    onnx.TensorProto.BOOL: "?",
}


def tensor_array(t: onnx.TensorProto) -> np.ndarray:
    """An inline tensor's value: raw bytes of common types read directly (the usual case), the rest
    through onnx's converter. Raises on a malformed tensor."""
    raw = _RAW_DTYPES.get(t.data_type)
    if raw is not None and t.raw_data:
        shape = tuple(t.dims)
        data = np.frombuffer(t.raw_data, dtype=raw)
        if data.size != math.prod(shape):
            raise ValueError(f"tensor {t.name!r}: raw data holds {data.size} elements, dims say {math.prod(shape)}")
        return data.reshape(shape).astype(raw[-2:] if raw[0] == "<" else raw)  # a native, writable copy
    return numpy_helper.to_array(t)


def attr_value(a: onnx.AttributeProto):
    """Plain Python value of an attribute; tensors stay TensorProto, graphs are kept as GraphProto."""
    kind = a.type
    if kind == onnx.AttributeProto.INT:
        return int(a.i)
    if kind == onnx.AttributeProto.FLOAT:
        return float(a.f)
    if kind == onnx.AttributeProto.STRING:
        return a.s.decode("utf-8", "replace")
    if kind == onnx.AttributeProto.INTS:
        return tuple(int(v) for v in a.ints)
    if kind == onnx.AttributeProto.FLOATS:
        return tuple(float(v) for v in a.floats)
    if kind == onnx.AttributeProto.STRINGS:
        return tuple(v.decode("utf-8", "replace") for v in a.strings)
    if kind == onnx.AttributeProto.TENSOR:
        return a.t
    if kind == onnx.AttributeProto.GRAPH:
        return a.g
    if kind == onnx.AttributeProto.GRAPHS:
        return tuple(a.graphs)
    return None


def constant_node_value(node: Node) -> tuple[np.ndarray | None, tuple[int, ...], str]:
    """(value if small, shape, dtype) of a Constant node."""
    for key, value in node.attrs.items():
        if key == "value" and isinstance(value, onnx.TensorProto):
            return small_value(value), tuple(int(d) for d in value.dims), tensor_dtype(value)
        if key == "value_int":
            return np.array(value, dtype=np.int64), (), "int64"
        if key == "value_ints":
            return np.array(value, dtype=np.int64), (len(value),), "int64"
        if key == "value_float":
            return np.array(value, dtype=np.float32), (), "float32"
        if key == "value_floats":
            return np.array(value, dtype=np.float32), (len(value),), "float32"
    return None, (), "undefined"


# --- numpy evaluators for shape arithmetic -----------------------------------------------------
Evaluator = Callable[[Node, list[np.ndarray], list[tuple[int, ...]]], list[np.ndarray]]
EVALUATORS: dict[str, Evaluator] = {}


def _check_size(shape) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape) or math.prod(shape) > FOLD_MAX_ELEMENTS:
        raise ValueError("too large to fold")
    return shape


def evaluator(*ops: str):
    def register(fn: Evaluator) -> Evaluator:
        for op in ops:
            EVALUATORS[op] = fn
        return fn

    return register


_BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Max": np.maximum,
    "Min": np.minimum,
    "Pow": np.power,
}
_UNARY = {
    "Neg": np.negative,
    "Abs": np.abs,
    "Not": np.logical_not,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Sqrt": np.sqrt,
    "Identity": lambda x: x,
    "Sign": np.sign,
    "Reciprocal": np.reciprocal,
}


@evaluator(*_BINARY)
def _binary(node, v, shapes):
    _check_size(np.broadcast_shapes(*(x.shape for x in v)))  # broadcasting amplifies: sized before computed
    out = v[0]
    for other in v[1:]:
        out = _BINARY[node.op_type](out, other)
    return [np.asarray(out)]


@evaluator("Div")
def _div(node, v, shapes):
    a, b = v
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        return [np.trunc(a / b).astype(a.dtype)]
    return [np.asarray(a / b, dtype=a.dtype)]


@evaluator("Mod")
def _mod(node, v, shapes):
    return [np.fmod(v[0], v[1]) if node.attr("fmod", 0) else np.mod(v[0], v[1])]


@evaluator(*_UNARY)
def _unary(node, v, shapes):
    return [np.asarray(_UNARY[node.op_type](v[0]))]


@evaluator("Shape")
def _shape(node, v, shapes):
    return [np.array(shapes[0][node.attr("start", 0) : node.attr("end")], dtype=np.int64)]


@evaluator("Size")
def _size(node, v, shapes):
    return [np.array(int(np.prod(shapes[0])), dtype=np.int64)]


@evaluator("Cast")
def _cast(node, v, shapes):
    target = onnx.helper.tensor_dtype_to_np_dtype(int(node.attr("to", 1)))
    return [v[0].astype(target)]


@evaluator("Gather")
def _gather(node, v, shapes):
    return [np.take(v[0], v[1].astype(np.int64), axis=int(node.attr("axis", 0)))]


@evaluator("Concat")
def _concat(node, v, shapes):
    _check_size((sum(x.size for x in v),))  # one small input listed 10^5 times is a large output
    return [np.concatenate([np.atleast_1d(x) if x.ndim == 0 else x for x in v], axis=int(node.attr("axis", 0)))]


@evaluator("Unsqueeze")
def _unsqueeze(node, v, shapes):
    axes = node.attr("axes") or tuple(int(a) for a in v[1].reshape(-1))
    shape = list(v[0].shape)
    rank = len(shape) + len(axes)
    for a in sorted(a % rank for a in axes):  # np.expand_dims a time, as one reshape (the same view)
        shape.insert(a, 1)
    return [v[0].reshape(shape)]


@evaluator("Squeeze")
def _squeeze(node, v, shapes):
    axes = node.attr("axes") or (tuple(int(a) for a in v[1].reshape(-1)) if len(v) > 1 else None)
    return [np.squeeze(v[0], axis=axes)]


@evaluator("Reshape")
def _reshape(node, v, shapes):
    try:
        target = reshape_target(v[0].shape, v[1].reshape(-1), bool(node.attr("allowzero", 0)))
    except NoRule as exc:  # a target that does not fit the data: nothing to fold
        raise ValueError(str(exc)) from exc
    return [v[0].reshape(target)]


# Slice's inputs from opset 10 (ONNX operator spec): data, starts, ends, then optional axes and steps.
SLICE_AXES_INPUT = 3
SLICE_STEPS_INPUT = 4


@evaluator("Slice")
def _slice(node, v, shapes):
    data = v[0]
    if node.attr("starts") is not None:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes = node.attr("axes") or tuple(range(len(starts)))
        steps = (1,) * len(starts)
    else:
        starts, ends = v[1].reshape(-1), v[2].reshape(-1)
        axes = v[SLICE_AXES_INPUT].reshape(-1) if len(v) > SLICE_AXES_INPUT else range(len(starts))
        steps = v[SLICE_STEPS_INPUT].reshape(-1) if len(v) > SLICE_STEPS_INPUT else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[int(a) % data.ndim] = slice(int(s), int(max(min(e, 2**62), -(2**62))), int(st))
    return [data[tuple(index)]]


@evaluator("Range")
def _range(node, v, shapes):
    start, limit, delta = (x.reshape(-1)[0] for x in v)
    _check_size((max(0, int(np.ceil((limit - start) / delta))),))
    return [np.arange(start, limit, delta, dtype=v[0].dtype)]


# ConstantOfShape makes shape vectors (a few elements) and weights (light models' parameters): only the
# former feed shape arithmetic, so larger outputs stay unevaluated (they are constants all the same).
CONST_OF_SHAPE_FOLD_MAX = 64


@evaluator("ConstantOfShape")
def _const_of_shape(node, v, shapes):
    shape = _check_size(v[0].reshape(-1))  # before anything is allocated
    if math.prod(shape) > CONST_OF_SHAPE_FOLD_MAX:
        raise ValueError("a weight, not shape arithmetic")
    value = node.attr("value")
    fill = tensor_array(value).reshape(-1)[0] if value is not None else np.float32(0)
    return [np.full(shape, fill, dtype=np.asarray(fill).dtype)]


@evaluator("Expand")
def _expand(node, v, shapes):
    target = np.broadcast_shapes(v[0].shape, tuple(int(d) for d in v[1].reshape(-1)))
    return [np.broadcast_to(v[0], _check_size(target)).copy()]


@evaluator("Where")
def _where(node, v, shapes):
    _check_size(np.broadcast_shapes(*(x.shape for x in v)))
    return [np.where(v[0], v[1], v[2])]


@evaluator("Transpose")
def _transpose(node, v, shapes):
    return [np.transpose(v[0], node.attr("perm"))]


@evaluator("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin")
def _reduce(node, v, shapes):
    fn = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}[node.op_type]
    axes = node.attr("axes") or (tuple(int(a) for a in v[1].reshape(-1)) if len(v) > 1 else None)
    return [np.asarray(fn(v[0], axis=axes, keepdims=bool(node.attr("keepdims", 1))))]


@evaluator("Tile")
def _tile(node, v, shapes):
    reps = tuple(int(r) for r in v[1].reshape(-1))
    _check_size(np.multiply(v[0].shape, reps) if v[0].ndim == len(reps) else (FOLD_MAX_ELEMENTS + 1,))
    return [np.tile(v[0], reps)]


@evaluator("Trilu")
def _trilu(node, v, shapes):
    k = int(v[1].reshape(-1)[0]) if len(v) > 1 else 0
    return [np.triu(v[0], k) if node.attr("upper", 1) else np.tril(v[0], k)]


# The largest output worth evaluating, by op type (default FOLD_MAX_ELEMENTS).
FOLD_LIMITS = {"ConstantOfShape": CONST_OF_SHAPE_FOLD_MAX}


def evaluate(
    node: Node, values: list[np.ndarray], shapes: list[tuple[int, ...]], out_shapes: list[tuple[int, ...]]
) -> list[np.ndarray] | None:
    """Fold a node whose inputs are known; None when it cannot (or should not) be folded. A node whose
    inferred outputs are over the fold limit is not even tried (a light model's 239 ConstantOfShape
    weights)."""
    fn = EVALUATORS.get(node.op_type)
    if fn is None:
        return None
    limit = FOLD_LIMITS.get(node.op_type, FOLD_MAX_ELEMENTS)
    if any(math.prod(shape) > limit for shape in out_shapes):
        return None
    with np.errstate(all="ignore"):
        try:
            out = fn(node, values, shapes)
        except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError, MemoryError, RuntimeError):
            return None  # RuntimeError: numpy's own limits (64 dims), reached by a hostile file's shapes
    if any(o.size > FOLD_MAX_ELEMENTS for o in out):
        return None
    return out
