"""Shape inference: what every rule shares (the context a rule sees, the registry, broadcasting).

The importer calls `infer_node` for every node in topological order. A rule sees the input specs
(concrete shapes) and, where the importer knows them, the input values (small constants: shape
arithmetic), and returns the output shapes and element types. An op without a rule raises `NoRule`;
the importer then falls back to the model's value_info, onnx's inference and, for com.microsoft ops,
ONNX Runtime's (`ort_shapes`), and finally marks the node unmodeled. The rules register themselves from
shapes/rules.py and shapes/movement.py, which the package imports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mapper.core.graph import Node, TensorSpec
from mapper.model.quantized import QUANTIZED_OPS, operand_positions

Shape = tuple[int, ...]


class NoRule(Exception):
    """This op (or this use of it) has no shape rule here."""


@dataclass(frozen=True, slots=True)
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

    def ints(self, key: str, default: Sequence[int] | None = None) -> list[int] | None:
        v = self.node.attr(key)
        return list(v) if v is not None else (list(default) if default is not None else None)

    def axes(self, input_index: int, rank: int) -> list[int] | None:
        """Axes given as attribute (old opsets) or as an input (newer opsets), normalized."""
        axes = self.ints("axes")
        if axes is None and self.has(input_index):
            axes = [int(a) for a in self.value(input_index).reshape(-1)]
        return None if axes is None else [a + rank if a < 0 else a for a in axes]


Out = list[tuple[Shape, str]]
RULES: dict[str, Callable[[Ctx], Out]] = {}


def rule(*op_types: str):
    """Register the function as the shape rule of these op types; a second rule for one op type raises
    (two rules for one op would make the winner depend on import order)."""

    def register(fn: Callable[[Ctx], Out]) -> Callable[[Ctx], Out]:
        for op in op_types:
            if op in RULES:
                raise ValueError(f"a second shape rule for {op} ({fn.__name__}; {RULES[op].__name__} has it)")
            RULES[op] = fn
        return fn

    return register


# The inputs an op's shape and work rules index, and the least rank of each (ONNX requires these; a
# hostile file need not honour them). Checked before the rule and before any fallback to declared shapes.
MIN_RANKS: dict[str, tuple[int, ...]] = {  # required inputs, in order
    "MatMul": (1, 1),
    "MatMulInteger": (1, 1),
    "FusedMatMul": (1, 1),
    "MatMulNBits": (1,),
    "Gemm": (2, 2),
    "GemmFastGelu": (1, 1),
    "Conv": (3, 3),
    "ConvInteger": (3, 3),
    "FusedConv": (3, 3),
    "ConvTranspose": (3, 3),
    "Attention": (3, 2),
    "MultiHeadAttention": (3,),
    "GroupQueryAttention": (3,),
    "PackedAttention": (3,),
    "BiasSplitGelu": (1,),
}
OPTIONAL_MIN_RANKS: dict[str, dict[int, int]] = {  # optional inputs: input index -> least rank where present
    "MultiHeadAttention": {1: 2},
    "GroupQueryAttention": {1: 2},
}


_RANKED = frozenset(MIN_RANKS) | frozenset(OPTIONAL_MIN_RANKS) | frozenset(QUANTIZED_OPS)  # ops check_ranks reads


def check_ranks(ctx: Ctx) -> None:
    op = ctx.node.op_type
    if op not in _RANKED:  # most ops: nothing to check
        return
    if op in QUANTIZED_OPS:  # the float twin's ranks, at the data operands' positions
        positions = operand_positions(op, len(ctx.node.inputs))
        required = dict(zip(positions, MIN_RANKS.get(QUANTIZED_OPS[op].twin, ())))
    else:
        required = dict(enumerate(MIN_RANKS.get(op, ())))
    for i, least in (required | OPTIONAL_MIN_RANKS.get(op, {})).items():
        if (i in required or ctx.has(i)) and len(ctx.shape(i)) < least:
            raise ValueError(f"input {i} of {op} has rank {len(ctx.shape(i))}, below {least}")


def infer_node(ctx: Ctx) -> Out:
    check_ranks(ctx)
    fn = RULES.get(ctx.node.op_type)
    if fn is None:
        raise NoRule(f"no shape rule for {ctx.node.op_type}")
    return fn(ctx)


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


def reshape_target(x: Shape, target: Sequence[int], allowzero: bool) -> Shape:
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
