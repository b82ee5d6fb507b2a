"""The backward pass of a mapped forward, kernel by kernel, as new kernels the same cost stage prices.

Part of the train stage (`train.step`), after the forward is mapped (`pipeline.map_workload`) and before the
kernels are costed (`cost.assess.estimate_kernels`, the forward's own cost functions). A kernel's backward is the
one its ops' registry entries name (`OpDef.backward`; the formulas: `ops.backward`), read off:

- the fusion rule, where the rule fuses a pattern whose backward is its own: FlashAttention-2's for a fused
  attention (`fusion_rules.RULE_BACKWARD`; its scores' MatMul alone would say GEMM);
- else the entry of the op that anchors the kernel (`fusion_rules.anchor_index`: a GEMM epilogue's matrix op, a
  chain's start, a norm block's first op, an op alone); where that op passes no gradient (a comparison starting a
  chain), the first member's that does;
- a collective the plan inserts (no ONNX op) takes its conjugate; an op the registry does not hold (the step's
  own loss, a custom op) the vector backward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mapper.core.result import Kernel
from mapper.core.vocab import Collective, Engine, KernelRule, Shard
from mapper.ops import OPS, Backward
from mapper.ops.backward import Grad, backward_kernels
from mapper.plan.fusion_rules import RULE_BACKWARD, anchor_index

UNREGISTERED = Backward.VECTOR  # the backward of an op the registry does not hold (a vector kernel's, as its forward)


def backward_kind(k: Kernel) -> Backward:
    """Which formula `k`'s backward runs (see the module)."""
    if k.rule == KernelRule.COLLECTIVE:
        return Backward.CONJUGATE
    fused = RULE_BACKWARD.get(k.rule)
    if fused is not None:
        return fused
    kinds = [OPS.backward(op) or UNREGISTERED for op in k.op_types] or [UNREGISTERED]
    anchor = kinds[anchor_index(k.op_types)]
    if anchor is Backward.NONE:
        return next((b for b in kinds if b is not Backward.NONE), Backward.NONE)
    return anchor


def backward_of(k: Kernel, g: Grad) -> list[Kernel]:
    """The kernels of one forward kernel's backward: the formula its registry entries name (`backward_kind`)."""
    return backward_kernels(backward_kind(k), k, g)


def sequence_parallel(forward: Sequence[Kernel], tp: int) -> list[Kernel]:
    """The forward under Megatron's sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2): the kernels every
    tensor-parallel rank ran whole (norms, residual adds, dropouts, the embedding's output) run on 1/tp of the
    tokens, and each all-reduce of a row-parallel GEMM's partial sums becomes a reduce-scatter there and an
    all-gather before the next column-parallel GEMM (the same ring traffic: Korthikanti sec. 4.2.2)."""
    if tp <= 1:
        return list(forward)
    out: list[Kernel] = []
    for k in forward:
        if k.engine == Engine.INTERCONNECT and k.collective == Collective.ALL_REDUCE and k.devices == tp:
            out.append(k.replaced(name=f"{k.name} (reduce-scatter)", collective=Collective.REDUCE_SCATTER,
                                  op_types=(Collective.REDUCE_SCATTER.op_type,)))  # fmt: skip
            out.append(k.replaced(name=f"{k.name} (all-gather)", collective=Collective.ALL_GATHER,
                                  op_types=(Collective.ALL_GATHER.op_type,)))  # fmt: skip
        elif k.shard == Shard.REPLICATED and k.engine != Engine.INTERCONNECT and k.matrix is None:
            activations = max(k.dram_bytes - k.weight_bytes, 0.0)
            out.append(
                k.replaced(
                    flops=k.flops / tp,
                    sfu_ops=k.sfu_ops / tp,
                    dram_bytes=activations / tp + k.weight_bytes,
                    rows=math.ceil(k.rows / tp),
                    reduction_rows=math.ceil(k.reduction_rows / tp),
                )
            )
        else:
            out.append(k)
    return out
