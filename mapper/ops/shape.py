"""What every shape rule shares: the context a rule sees, `NoRule`, broadcasting, Reshape's target.

A rule (an `OpDef.shape`, mapper/ops/) sees the input specs (concrete shapes) and, where the importer knows them,
the input values (small constants: shape arithmetic), and returns the output shapes and element types. An op
without a rule, or a use of one it does not cover, raises `NoRule`; the importer then falls back to the model's
value_info, onnx's inference and, for com.microsoft ops, ONNX Runtime's (`model/ort_shapes.py`), and finally
marks the node unmodeled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import numpy as np

from mapper.core.graph import Node, TensorSpec
from mapper.core.records import record

Shape = tuple[int, ...]


class NoRule(Exception):
    """This op (or this use of it) has no shape rule here."""


@record
class Ctx:
    node: Node
    specs: tuple[TensorSpec | None, ...]  # one per node input ('' inputs are None)
    values: tuple[np.ndarray | None, ...]  # known constant values, else None

    def shape(self, i: int) -> Shape:
        spec = self.specs[i] if i < len(self.specs) else None
        if spec is None:  # the importer resolves every present input first: this one is absent
            raise ValueError(f"input {i} of {self.node.op_type} is missing")
        return spec.shape

    def dtype(self, i: int = 0) -> str:
        spec = self.specs[i] if i < len(self.specs) else None
        return spec.dtype if spec is not None else "float32"

    def value(self, i: int) -> np.ndarray:
        v = self.values[i] if i < len(self.values) else None
        if v is None:
            raise NoRule(f"{self.node.op_type} needs the value of input {i}, which is computed at run time")
        return v

    def has(self, i: int) -> bool:
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    @overload
    def ints(self, key: str) -> list[int] | None: ...
    @overload
    def ints(self, key: str, default: Sequence[int]) -> list[int]: ...
    def ints(self, key: str, default: Sequence[int] | None = None) -> list[int] | None:
        v = self.node.attr(key)
        return list(v) if v is not None else (list(default) if default is not None else None)

    def axes(self, input_index: int, rank: int) -> list[int] | None:
        """Axes given as attribute (old opsets) or as an input (newer opsets), normalized."""
        axes = self.ints("axes")
        if axes is None and self.has(input_index):
            axes = [int(a) for a in self.value(input_index).reshape(-1)]
        return None if axes is None else [a + rank if a < 0 else a for a in axes]


Out = list[tuple[Shape, str]]  # per output: its shape and element type


def broadcast(*shapes: Shape) -> Shape:
    """numpy's broadcasting rule at any rank (np.broadcast_shapes stops at 64 dims with a RuntimeError;
    a hostile file's initializer can have more)."""
    first = shapes[0] if shapes else ()
    if all(s == first for s in shapes):  # the usual case (a residual add): one shape
        return tuple([int(d) for d in first])
    rank = max([len(s) for s in shapes])
    out = [1] * rank
    for s in shapes:  # right-aligned: each axis takes the one size other than 1 its shapes have
        for axis, d in enumerate(s, rank - len(s)):
            d = int(d)
            if d != 1:
                if out[axis] == 1:
                    out[axis] = d
                elif out[axis] != d:
                    raise NoRule(f"shapes {list(shapes)} do not broadcast")
    return tuple(out)


def reshape_target(x: Shape, target: Sequence[int] | np.ndarray, allowzero: bool) -> Shape:
    out = [int(t) for t in target]
    for i, t in enumerate(out):
        if t == 0 and not allowzero:
            if i >= len(x):
                raise NoRule("Reshape copies a dim that the input does not have")
            out[i] = x[i]
    if out.count(-1) > 1:
        raise NoRule("Reshape has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(x)
        if known == 0 or total % known:
            raise NoRule(f"Reshape cannot split {total} elements into {target}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(x):
        raise NoRule(f"Reshape of {x} into {tuple(out)} changes the element count")
    return tuple(out)


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
