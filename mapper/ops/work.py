"""The work formulas of the vector ops, as typed records with their numbers, and the per-element constants.

FLOPs per element after onnx-tool's node.py constants: a transcendental is one special-function-unit (SFU) op
plus its arithmetic. Conventions (the work stage's): FLOPs count multiply and add apart (2 x MACs); a vector
op's matrix FLOPs are 0. The matrix ops' formulas are functions beside their shape rules (ops/matrix.py,
ops/contrib.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.core.graph import Node, TensorSpec
from mapper.ops.registry import Work

ADD = 1  # add, sub, mul, div, max, min, compare, select: one op
EXP = 1  # one SFU op (MUFU.EX2 on NVIDIA)
SIGMOID = EXP + 2  # 1 / (1 + exp(-x)): exp, add, div
TANH = EXP + 4  # (e^2x - 1) / (e^2x + 1)
GELU_ERF = EXP + 4  # 0.5 * x * (1 + erf(x / sqrt 2)): erf, div, add, mul, mul
GELU_TANH = TANH + 6  # 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
SOFTMAX = 5  # max, subtract, exp, sum, divide per element
LAYERNORM = 8  # mean, subtract, square, mean, normalize, scale, shift
RMSNORM = 4  # square, mean, normalize, scale
BATCHNORM = 2  # inference: folded scale and shift
REQUANTIZE = 2  # QLinear elementwise/pooling ops rescale each result: multiply, add zero point
LRN_SIZE = 5  # LRN's default window (ONNX operator spec)

Ins = Sequence[TensorSpec | None]
Outs = Sequence[TensorSpec]


@dataclass(frozen=True, slots=True)
class PerOutput:
    """`flops` and `sfu` per element of output 0; `variadic`: per element and operand past the first (Sum)."""

    flops: float
    sfu: float = 0
    variadic: bool = False

    def __call__(self, node: Node, ins: Ins, outs: Outs) -> Work:
        n = outs[0].elements
        if self.variadic:
            n *= max(len([i for i in ins if i is not None]) - 1, 1)
        return self.flops * n, 0.0, self.sfu * n, None


@dataclass(frozen=True, slots=True)
class PerRow:
    """A normalization: `flops` per output element and one rsqrt (an SFU op) per normalized row."""

    flops: float

    def __call__(self, node: Node, ins: Ins, outs: Outs) -> Work:
        n = outs[0].elements
        rows = n // max(outs[0].shape[-1], 1) if outs[0].shape else 1
        return self.flops * n, 0.0, rows, None


@dataclass(frozen=True, slots=True)
class PerInput:
    """A reduction: one op per input element."""

    def __call__(self, node: Node, ins: Ins, outs: Outs) -> Work:
        return float(_first_input_elements(ins)), 0.0, 0.0, None


@dataclass(frozen=True, slots=True)
class Pooled:
    """A pooling window: each output element reads its kernel's elements (a global pool reads its input once)."""

    def __call__(self, node: Node, ins: Ins, outs: Outs) -> Work:
        if node.op_type.startswith("Global"):
            return _first_input_elements(ins), 0.0, 0.0, None
        return outs[0].elements * math.prod(node.attr("kernel_shape") or (1,)), 0.0, 0.0, None


def lrn(node: Node, ins: Ins, outs: Outs) -> Work:
    """Local response normalization: a window sum of squares, then a pow per element."""
    n = outs[0].elements
    return (2 * int(node.attr("size", LRN_SIZE)) + 3) * n, 0.0, n, None


def _first_input_elements(ins: Ins) -> int:
    return ins[0].elements if ins and ins[0] is not None else 0
