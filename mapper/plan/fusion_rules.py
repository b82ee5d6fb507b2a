"""The fusion rule table: which ops a kernel may start from and absorb, under which policies, how far it grows.

Ordered, first match wins (fusion.py's planner walks it); `start_kinds` says which rule starts a node
can open. Adding a fusion is a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import LayerType, OpClass
from mapper.core.result import NodeWork
from mapper.core.vocab import KernelRule
from mapper.ops import OPS, FusionRole

# Each op's part in a kernel is its registry entry's fusion role. A QDQ model marks each int8 tensor with a
# QuantizeLinear -> DequantizeLinear pair; an int8 kernel requantizes its result in the epilogue, so the pair
# rides along without counting toward max_ops.
QDQ_OPS = OPS.with_role(FusionRole.QDQ)
EPILOGUE_OPS = OPS.with_role(FusionRole.EPILOGUE, FusionRole.QDQ)  # a GEMM's epilogue (and a chain) absorbs these
CHAIN_OPS = EPILOGUE_OPS | OPS.with_role(FusionRole.CHAIN)  # an elementwise chain absorbs these
MATRIX_STARTS = OPS.with_role(FusionRole.MATRIX)  # ops that open a GEMM-epilogue kernel
ROW_OPS = OPS.with_role(FusionRole.ROW)  # elementwise by class, but no chain starts from them
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
        CHAIN_OPS,
        12,
    ),
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
    elif w.op_class in ELEMENTWISE_CLASSES and w.op_type not in ROW_OPS:
        kinds.append("elementwise")
    return tuple(kinds)
