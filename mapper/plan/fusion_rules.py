"""The fusion rule table: which ops a kernel may start from and absorb, under which policies, how far it grows.

Ordered, first match wins (fusion.py's planner walks it); `start_kinds` says which rule starts a node
can open. Adding a fusion is a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import LayerType, OpClass
from mapper.core.result import NodeWork
from mapper.core.vocab import KernelRule
from mapper.model.quantized import QUANTIZED_OPS

# A QDQ model marks each int8 tensor with a QuantizeLinear -> DequantizeLinear pair; an int8 kernel
# requantizes its result in the epilogue, so the pair rides along without counting toward max_ops.
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_FLOAT_EPILOGUE_OPS = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "LeakyRelu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "QuickGelu",
    "HardSwish",
    "HardSigmoid",
    "Cast",
    "Where",
    "BatchNormalization",
    "Pow",
    "Softplus",
    "Mish",
    "Elu",
    "Selu",
    "Max",
    "Min",
    *QDQ_OPS,
}
EPILOGUE_OPS = frozenset(_FLOAT_EPILOGUE_OPS | {op for op, q in QUANTIZED_OPS.items() if q.twin in _FLOAT_EPILOGUE_OPS})
ELEMENTWISE_CLASSES = frozenset({OpClass.ELEMENTWISE, OpClass.TRANSCENDENTAL})


@dataclass(frozen=True, slots=True)
class FusionRule:
    name: KernelRule
    policies: frozenset[str]  # fusion policies under which the rule applies
    starts: str  # "attention" | "norm" | "matrix" | "elementwise"
    absorbs: frozenset[str]  # op types the group may grow into
    max_ops: int  # nodes in one kernel, the start included


# Ordered: the first rule whose start matches a node claims it.
FUSION_RULES: tuple[FusionRule, ...] = (
    FusionRule(KernelRule.FLASH_ATTENTION, frozenset({"aggressive"}), "attention", frozenset(), 64),
    FusionRule(KernelRule.NORM, frozenset({"default", "aggressive"}), "norm", frozenset(), 16),
    FusionRule(KernelRule.GEMM_EPILOGUE, frozenset({"aggressive"}), "matrix", EPILOGUE_OPS, 10),
    FusionRule(KernelRule.GEMM_EPILOGUE, frozenset({"default"}), "matrix", EPILOGUE_OPS, 4),
    FusionRule(
        KernelRule.ELEMENTWISE_CHAIN,
        frozenset({"default", "aggressive"}),
        "elementwise",
        EPILOGUE_OPS
        | {
            "Exp",
            "Log",
            "Sqrt",
            "Reciprocal",
            "Neg",
            "Abs",
            "Sin",
            "Cos",
            "Not",
            "Equal",
            "Less",
            "Greater",
            "And",
            "Or",
            "Softsign",
            "Sign",
        },
        12,
    ),
)
_FLOAT_MATRIX_STARTS = {
    "MatMul",
    "Gemm",
    "Conv",
    "ConvTranspose",
    "FusedMatMul",
    "MatMulNBits",
    "MatMulInteger",
    "ConvInteger",
    "FusedConv",
    "GemmFastGelu",
}
MATRIX_STARTS = frozenset(
    _FLOAT_MATRIX_STARTS | {op for op, q in QUANTIZED_OPS.items() if q.twin in _FLOAT_MATRIX_STARTS}
)


def start_kinds(w: NodeWork) -> tuple[str, ...]:
    """The rule starts a node can open, most specific first (attention nodes fall back to plain rules)."""
    kinds = []
    if w.layer_type is LayerType.ATTENTION and w.layer_group >= 0:
        kinds.append("attention")
    if w.layer_type is LayerType.NORMALIZATION and (w.layer_group >= 0 or w.op_class is OpClass.REDUCTION):
        kinds.append("norm")
    elif w.op_type in MATRIX_STARTS:
        kinds.append("matrix")
    elif w.op_class in ELEMENTWISE_CLASSES and w.op_type != "Softmax":
        kinds.append("elementwise")
    return tuple(kinds)
