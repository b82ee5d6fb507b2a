"""A training step's backward read off the operator registry (mapper/ops/backward.py, mapper/train/backward.py): a
kernel's backward is its anchor op's entry's (or its fusion rule's), checked by hand on a GEMM, an attention, a
norm and a transpose, and on every kernel of a mapped decoder."""

from __future__ import annotations

import pytest

import mapper
from mapper.core.graph import LayerType
from mapper.core.result import Kernel, MatrixShape
from mapper.core.vocab import Engine, KernelRule, MatrixKind, Shard
from mapper.ops import OPS, Backward
from mapper.ops.backward import Grad
from mapper.plan.fusion_rules import RULE_BACKWARD, anchor_index
from mapper.train.backward import backward_kind, backward_of
from mapper.train.forward import map_forward
from mapper.zoo.transformers import EncoderConfig, build_gpt2

FP16 = Grad(2.0, 2.0)  # fp16 activations and weights


def _kernel(**fields) -> Kernel:
    base = dict(
        name="k", nodes=("n",), op_types=("MatMul",), rule=KernelRule.SINGLE, engine=Engine.MATRIX,
        layer_type=LayerType.LINEAR, flops=0.0, matrix_flops=0.0, sfu_ops=0.0, dram_bytes=0.0, weight_bytes=0.0,
        shard=Shard.COLUMN,
    )  # fmt: skip
    base.update(fields)
    return Kernel(**base)


def test_a_gemm_with_its_epilogue_runs_the_data_and_weight_gradients():
    # gelu(X[64, 16] W[16, 32] + b): 2 x 64 x 32 x 16 matrix FLOPs and 5 FLOPs an output element of epilogue
    matrix, epilogue = 2.0 * 64 * 32 * 16, 5.0 * 64 * 32
    weights = 2.0 * (16 * 32 + 32)  # W and b, fp16
    k = _kernel(
        op_types=("MatMul", "Add", "Gelu"),
        rule=KernelRule.GEMM_EPILOGUE,
        flops=matrix + epilogue,
        matrix_flops=matrix,
        weight_bytes=weights,
        dram_bytes=1e5,
        matrix=MatrixShape(1, 64, 32, 16),
    )
    assert backward_kind(k) is OPS["MatMul"].backward is Backward.GEMM
    dgrad, wgrad = backward_of(k, FP16)
    assert dgrad.matrix == MatrixShape(1, 64, 16, 32) and wgrad.matrix == MatrixShape(1, 16, 32, 64)
    assert dgrad.flops == matrix + 2 * epilogue and wgrad.flops == wgrad.matrix_flops == matrix
    assert dgrad.dram_bytes == 2 * 64 * (32 + 16) + weights  # dY read, dX written, W and b read
    assert wgrad.dram_bytes == 2 * 64 * (16 + 32) + 2 * 4 * (16 * 32 + 32)  # X, dY; the fp32 main gradient r+w


def test_scores_of_an_unfused_attention_are_two_activation_gradients():
    # S = Q K^T / 8 masked: 8 sequences x heads of Q[128, 64] K^T[64, 128]; the causal mask a constant (a weight
    # to the kernel, not a parameter): dQ = dS K and dK = dS^T Q, the scale and mask's backward with dQ
    matrix, epilogue, mask = 2.0 * 8 * 128 * 128 * 64, 2.0 * 8 * 128 * 128, 1.0 * 128 * 128
    k = _kernel(
        op_types=("MatMul", "Div", "Where"),
        rule=KernelRule.GEMM_EPILOGUE,
        layer_type=LayerType.ATTENTION,
        flops=matrix + epilogue,
        matrix_flops=matrix,
        weight_bytes=mask,
        matrix=MatrixShape(8, 128, 128, 64),
    )
    da, db = backward_of(k, FP16)
    both = 2 * 8 * (128 * 128 + 128 * 64 + 64 * 128)  # dS and the other operand read, the gradient written
    assert da.matrix == MatrixShape(8, 128, 64, 128) and db.matrix == MatrixShape(8, 64, 128, 128)
    assert (da.flops, db.flops) == (matrix + 2 * epilogue, matrix)
    assert (da.dram_bytes, db.dram_bytes) == (both + mask, both)  # no fp32 main gradient: the mask is no parameter


def test_attention_backward_is_flashattention_2_by_the_rule_or_the_op():
    fields = dict(
        layer_type=LayerType.ATTENTION,
        flops=1100.0,
        matrix_flops=1000.0,
        sfu_ops=7.0,
        dram_bytes=100.0,
        matrix=MatrixShape(4, 64, 64, 16, kind=MatrixKind.ATTENTION),
    )
    # a fused block: its anchor (the scores' MatMul) alone would say GEMM; the rule says FlashAttention-2
    fused = _kernel(
        op_types=("Transpose", "MatMul", "Div", "Softmax", "MatMul"), rule=KernelRule.FLASH_ATTENTION, **fields
    )
    assert OPS["MatMul"].backward is Backward.GEMM and RULE_BACKWARD[KernelRule.FLASH_ATTENTION] is Backward.ATTENTION
    op = _kernel(op_types=("MultiHeadAttention",), **fields)  # an attention op alone: its entry's
    for k in (fused, op):
        assert backward_kind(k) is Backward.ATTENTION
        (back,) = backward_of(k, FP16)
        assert (back.flops, back.matrix_flops, back.sfu_ops, back.dram_bytes) == (2750.0, 2500.0, 7.0, 200.0)


def test_a_norm_reads_twice_its_activations_and_accumulates_its_scale():
    # LayerNormalization over [64, 1024] fp16: x read, y written, gamma and beta read; 8 FLOPs an element
    elements, params = 64 * 1024, 2 * 1024
    k = _kernel(
        op_types=("LayerNormalization",),
        rule=KernelRule.NORM,
        engine=Engine.VECTOR,
        layer_type=LayerType.NORMALIZATION,
        flops=8.0 * elements,
        dram_bytes=2.0 * (2 * elements + params),
        weight_bytes=2.0 * params,
        shard=Shard.REPLICATED,
    )
    assert backward_kind(k) is OPS["LayerNormalization"].backward is Backward.VECTOR
    (back,) = backward_of(k, FP16)
    assert back.flops == 16.0 * elements
    assert back.dram_bytes == 2 * (2.0 * 2 * elements) + 2.0 * params + 2 * 4 * params  # 2x x, y; gamma, beta; fp32 r+w


def test_a_transpose_moves_its_gradient_once_even_inside_attention():
    """Attention's K^T as an op of its own (unfused): the registry says movement, whatever layer it rolls up into
    (the kernel-kind table it replaces gave an attention-layer transpose a vector backward: twice the bytes)."""
    k = _kernel(
        op_types=("Transpose",),
        engine=Engine.VECTOR,
        layer_type=LayerType.ATTENTION,
        dram_bytes=2.0 * 2 * 8 * 128 * 64,
        shard=Shard.SHARDED,
    )
    assert backward_kind(k) is OPS["Transpose"].backward is Backward.MOVEMENT
    (back,) = backward_of(k, FP16)
    assert (back.flops, back.dram_bytes, back.matrix) == (0.0, 2.0 * 2 * 8 * 128 * 64, None)


def test_a_chain_without_a_gradient_at_its_start_takes_its_first_members():
    mask = _kernel(
        op_types=("Equal", "Not"),
        rule=KernelRule.ELEMENTWISE_CHAIN,
        engine=Engine.VECTOR,
        layer_type=LayerType.ELEMENTWISE,
        flops=10.0,
        dram_bytes=40.0,
    )
    assert backward_kind(mask) is Backward.NONE and backward_of(mask, FP16) == []
    where = mask.replaced(op_types=("Equal", "Where"))
    assert backward_kind(where) is Backward.VECTOR and backward_of(where, FP16)[0].dram_bytes == 80.0
    loss = mask.replaced(op_types=("SoftmaxCrossEntropyLoss",))  # the step's own loss: no registry entry
    assert OPS.backward("SoftmaxCrossEntropyLoss") is None and backward_kind(loss) is Backward.VECTOR


@pytest.mark.parametrize("fused", [False, True])
def test_every_kernel_of_a_decoder_takes_its_anchor_ops_backward(fused):
    config = EncoderConfig(2, 64, 4, 256, 512, 32, 1e-5)
    model = mapper.open_model(build_gpt2(config, name="gpt-tiny").SerializeToString())
    options = mapper.TrainOptions(tp=2, seq=32, global_batch=1, dtype="fp16", fused_attention=fused)
    forward = map_forward(model, mapper.load_hardware("a100-sxm-80gb"), options)
    seen = set()
    for k in forward.kernels:
        anchor = OPS.backward(k.op_types[anchor_index(k.op_types)])
        expected = (
            Backward.CONJUGATE if k.rule == KernelRule.COLLECTIVE
            else RULE_BACKWARD.get(k.rule) or anchor or Backward.VECTOR
        )  # fmt: skip
        assert backward_kind(k) is expected, k.name
        seen.add(expected)
        if k.op_types == ("Transpose",):
            (back,) = backward_of(k, FP16)
            assert back.dram_bytes == k.dram_bytes and back.flops == 0.0
    assert seen >= {Backward.GEMM, Backward.VECTOR, Backward.MOVEMENT, Backward.CONJUGATE}
    assert (Backward.ATTENTION in seen) is fused
