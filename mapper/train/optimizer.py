"""The optimizer step and the gradient clipping of a training step, as kernels the cost stage prices.

Part of the train stage (`train.totals`): AdamW with fp32 master weights and two fp32 moments over the
parameters a device updates (Loshchilov & Hutter 2019; Megatron-LM's fused Adam: one memory-bound elementwise pass),
and the gradients' global norm (one read of them) before it.
"""

from __future__ import annotations

from mapper.core.graph import LayerType
from mapper.core.result import Kernel
from mapper.core.vocab import Engine, KernelRule, Shard

ADAMW_FLOPS_PER_PARAMETER = 12  # two moment updates, bias corrections, the sqrt and divide, weight decay, the step
ADAMW_SFU_PER_PARAMETER = 1  # the second moment's square root
# fp32 master weight, first and second moments and gradient read; master and moments written; the 16-bit copy
ADAMW_BYTES_PER_PARAMETER = 4 * 4 + 4 * 3 + 2
NORM_FLOPS_PER_PARAMETER = 2  # a square and an add
NORM_BYTES_PER_PARAMETER = 4  # each fp32 gradient read once


def _vector(name: str, flops: float, sfu: float, dram: float, parameters: float) -> Kernel:
    return Kernel(
        name=name,
        nodes=(),
        op_types=(name.split(" ")[0],),
        rule=KernelRule.ELEMENTWISE_CHAIN,
        engine=Engine.VECTOR,
        layer_type=LayerType.OTHER,
        flops=flops,
        matrix_flops=0.0,
        sfu_ops=sfu,
        dram_bytes=dram,
        weight_bytes=0.0,
        shard=Shard.SHARDED,
        note=f"over {parameters:,.0f} parameters",
    )


def optimizer_kernels(parameters: float, offloaded: bool) -> list[Kernel]:
    """The gradients' norm for clipping and, unless the optimizer state lives on the host, the AdamW update."""
    norm = _vector(
        "GradNorm · gradient clipping", NORM_FLOPS_PER_PARAMETER * parameters, 0.0,
        NORM_BYTES_PER_PARAMETER * parameters, parameters,
    )  # fmt: skip
    if offloaded:
        return [norm]
    adam = _vector(
        "AdamW · optimizer step", ADAMW_FLOPS_PER_PARAMETER * parameters, ADAMW_SFU_PER_PARAMETER * parameters,
        ADAMW_BYTES_PER_PARAMETER * parameters, parameters,
    )  # fmt: skip
    return [norm, adam]
