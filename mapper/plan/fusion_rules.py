"""The fusion rule table: which ops a kernel may start from and absorb, under which policies, how far it grows.

Ordered, first match wins (fusion.py's planner walks it); `start_kinds` says which rule starts a node
can open; `anchor_index` names the op a kernel is built around (its name's place, its backward's entry).
Adding a fusion is a row here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from mapper.core.graph import LayerType, OpClass
from mapper.core.result import NodeWork
from mapper.core.vocab import FusionPolicy, KernelRule
from mapper.ops import OPS, Backward, FusionRole

# Each op's part in a kernel is its registry entry's fusion role. A QDQ model marks each int8 tensor with a
# QuantizeLinear -> DequantizeLinear pair; an int8 kernel requantizes its result in the epilogue, so the pair
# rides along without counting toward max_ops.
QDQ_OPS = OPS.with_role(FusionRole.QDQ)
EPILOGUE_OPS = OPS.with_role(FusionRole.EPILOGUE, FusionRole.QDQ)  # a GEMM's epilogue (and a chain) absorbs these
CHAIN_OPS = EPILOGUE_OPS | OPS.with_role(FusionRole.CHAIN)  # an elementwise chain absorbs these
MATRIX_STARTS = OPS.with_role(FusionRole.MATRIX)  # ops that open a GEMM-epilogue kernel
ROW_OPS = OPS.with_role(FusionRole.ROW)  # elementwise by class, but no chain starts from them
ELEMENTWISE_CLASSES = frozenset({OpClass.ELEMENTWISE, OpClass.TRANSCENDENTAL})


class RuleStart(StrEnum):
    """What kind of node a fusion rule's kernel opens at (`start_kinds`)."""

    ATTENTION = "attention"
    NORM = "norm"
    MATRIX = "matrix"
    ELEMENTWISE = "elementwise"


_DEFAULT = frozenset({FusionPolicy.DEFAULT})
_AGGRESSIVE = frozenset({FusionPolicy.AGGRESSIVE})
_EITHER = _DEFAULT | _AGGRESSIVE


@dataclass(frozen=True, slots=True)
class FusionRule:
    name: KernelRule
    policies: frozenset[FusionPolicy]  # fusion policies under which the rule applies
    starts: RuleStart
    absorbs: frozenset[str]  # op types the group may grow into
    max_ops: int  # nodes in one kernel, the start included
    backward: Backward | None = None  # a pattern over several ops with a backward of its own; None: its anchor op's


# Ordered: the first rule whose start matches a node claims it.
FUSION_RULES: tuple[FusionRule, ...] = (
    # scores, softmax and values in one kernel: FlashAttention-2's backward, which none of its ops has alone
    FusionRule(KernelRule.FLASH_ATTENTION, _AGGRESSIVE, RuleStart.ATTENTION, frozenset(), 64, Backward.ATTENTION),
    FusionRule(KernelRule.NORM, _EITHER, RuleStart.NORM, frozenset(), 16),
    FusionRule(KernelRule.GEMM_EPILOGUE, _AGGRESSIVE, RuleStart.MATRIX, EPILOGUE_OPS, 10),
    FusionRule(KernelRule.GEMM_EPILOGUE, _DEFAULT, RuleStart.MATRIX, EPILOGUE_OPS, 4),
    FusionRule(KernelRule.ELEMENTWISE_CHAIN, _EITHER, RuleStart.ELEMENTWISE, CHAIN_OPS, 12),
)

RULE_BACKWARD = {rule.name: rule.backward for rule in FUSION_RULES if rule.backward is not None}


def anchor_index(op_types: Sequence[str]) -> int:
    """Where a kernel's anchor op sits among its members' op types: its matrix op (a GEMM epilogue's start, an
    attention block's first product), else its first member (a chain's start, a norm block's first op, an op
    alone). The kernel is named after it (`kernel_names.where_it_is`), and a rule without a backward of its own
    takes the anchor's registry entry's (`train.backward`)."""
    return next((i for i, op in enumerate(op_types) if op in MATRIX_STARTS), 0)


def start_kinds(w: NodeWork) -> tuple[RuleStart, ...]:
    """The rule starts a node can open, most specific first (attention nodes fall back to plain rules)."""
    kinds = []
    if w.layer_type is LayerType.ATTENTION and w.layer_group >= 0:
        kinds.append(RuleStart.ATTENTION)
    if w.layer_type is LayerType.NORMALIZATION and (w.layer_group >= 0 or w.op_class is OpClass.REDUCTION):
        kinds.append(RuleStart.NORM)
    elif w.op_type in MATRIX_STARTS:
        kinds.append(RuleStart.MATRIX)
    elif w.op_class in ELEMENTWISE_CLASSES and w.op_type not in ROW_OPS:
        kinds.append(RuleStart.ELEMENTWISE)
    return tuple(kinds)
