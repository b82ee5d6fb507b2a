"""The backward formulas: for each `Backward` an op's registry entry names, the kernels its gradient runs as.

A formula takes a mapped forward kernel and returns its backward as new kernels the forward's own cost stage
prices (the train stage, `train.backward`, picks the formula from the entry of the op that anchors the kernel):

- `Backward.GEMM`, a weight GEMM Y = X W: the data gradient dX = dY W^T (m x k from m x n by n x k) and the weight
  gradient dW = X^T dY (k x n over the m rows), each a GEMM of its own shape and the forward's FLOPs; dW
  accumulates into the fp32 main gradient (Megatron-LM's gradient-accumulation fusion: read and written once a
  micro-batch). A GEMM of two activations (attention's scores and values where attention is not fused): both
  operands' gradients, dA = dC B^T and dB = A^T dC. A matrix op without a GEMM view (an Einsum) or a depthwise
  convolution runs its gradients as the vector kernels its forward is;
- `Backward.ATTENTION`, fused attention as FlashAttention-2 runs its backward (Dao 2023, "FlashAttention-2", sec.
  3.1.2 and Algorithm 2): five matmuls to the forward's two, 2.5x its matrix FLOPs, the softmax recomputed from
  the log-sum-exp (its exps once more), Q, K, V, O and dO read and dQ, dK, dV written: twice the forward's traffic;
- `Backward.CONJUGATE`, a collective: its conjugate (Megatron's f and g: an all-reduce stays one, an all-gather
  becomes a reduce-scatter and back, an all-to-all stays one), the same bytes;
- `Backward.MOVEMENT`, a data movement (transpose, slice, concat): the same movement of the gradient;
- `Backward.VECTOR`, any other vector kernel (norm, activation, residual, embedding): it reads its saved inputs and
  dY and writes dX: twice its activation traffic and FLOPs, the exps once, and a weight's gradient (a norm's
  scale, the embedding table) accumulated into the fp32 main gradient;
- `Backward.NONE`: no kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.graph import LayerType
from mapper.core.result import Kernel, MatrixShape
from mapper.core.vocab import Collective, Engine, KernelRule
from mapper.ops.registry import Backward

# FlashAttention-2's backward: the forward's S = QK^T and O = PV become S = QK^T (recomputed), dV = P^T dO,
# dP = dO V^T, dQ = dS K, dK = dS^T Q: five matmuls to two (Dao 2023, sec. 3.1.2: "2.5 times the forward")
ATTENTION_BACKWARD_FLOPS = 2.5
ATTENTION_BACKWARD_TRAFFIC = 2.0  # reads Q, K, V, O, dO; writes dQ, dK, dV: eight tensors to the forward's four
VECTOR_BACKWARD_WORK = 2.0  # a vector kernel's backward reads its input and dY and writes dX; ~2x its arithmetic
MAIN_GRAD_BYTES = 4  # fp32 main gradients (Megatron-LM --accumulate-allreduce-grads-in-fp32, its bf16 default)
MAIN_GRAD_PASSES = 2  # a weight gradient accumulated: the fp32 main gradient read and written once a micro-batch
BACKWARD_COLLECTIVE = {
    Collective.ALL_REDUCE: Collective.ALL_REDUCE,
    Collective.ALL_GATHER: Collective.REDUCE_SCATTER,
    Collective.REDUCE_SCATTER: Collective.ALL_GATHER,
    Collective.ALL_TO_ALL: Collective.ALL_TO_ALL,
    Collective.P2P: Collective.P2P,
}


@dataclass(frozen=True, slots=True)
class Grad:
    """What a backward formula needs besides the kernel: the activations' and the weights' element bytes."""

    act_bytes: float
    weight_bytes: float

    def main_grad_bytes(self, k: Kernel) -> float:
        """The fp32 main gradient traffic of the parameters `k` reads (read and written once a micro-batch)."""
        return MAIN_GRAD_PASSES * MAIN_GRAD_BYTES * k.weight_bytes / self.weight_bytes if holds_parameters(k) else 0.0


PARAMETER_LAYERS = frozenset({LayerType.LINEAR, LayerType.CONV, LayerType.NORMALIZATION, LayerType.EMBEDDING})


def holds_parameters(k: Kernel) -> bool:
    """Whether the weights a kernel reads are trained parameters: a GEMM's, a norm's scale, an embedding table
    (not the constants an export folds into weights: a causal mask, rotary tables)."""
    return k.weight_bytes > 0 and k.layer_type in PARAMETER_LAYERS and k.engine != Engine.INTERCONNECT


def _named(k: Kernel, what: str, **changes) -> Kernel:
    return k.replaced(name=f"{k.name} · {what}", note=f"backward of {k.name}", **changes)


def conjugate(k: Kernel, g: Grad) -> list[Kernel]:
    kind = BACKWARD_COLLECTIVE[Collective(k.collective)]
    return [_named(k, "backward", collective=kind, op_types=(kind.op_type,))]


def flash_attention(k: Kernel, g: Grad) -> list[Kernel]:
    return [
        _named(
            k,
            "attention backward (FlashAttention-2)",
            flops=k.flops * ATTENTION_BACKWARD_FLOPS,
            matrix_flops=k.matrix_flops * ATTENTION_BACKWARD_FLOPS,
            dram_bytes=k.dram_bytes * ATTENTION_BACKWARD_TRAFFIC,
        )
    ]


def _gemm(k: Kernel, s: MatrixShape, flops: float, what: str, dram: float, weights: float) -> Kernel:
    return _named(
        k,
        what,
        matrix=s,
        flops=flops,
        matrix_flops=flops,
        sfu_ops=0.0,
        dram_bytes=dram,
        weight_bytes=weights,
        rule=KernelRule.SINGLE,
        op_types=("MatMul",),
        rows=0,
        row_length=0,
    )


def weight_gemm(k: Kernel, g: Grad) -> list[Kernel]:
    """dX = dY W^T and dW = X^T dY, the fused epilogue's backward with dX (its vector work twice)."""
    s, a = k.shape, g.act_bytes
    rows = s.batch * s.m  # the tokens: dW sums over them
    flops = 2.0 * rows * s.n * s.k
    epilogue = max(k.flops - k.matrix_flops, 0.0) * VECTOR_BACKWARD_WORK  # the fused activation's backward
    dgrad = _gemm(
        k, MatrixShape(s.batch, s.m, s.k, s.n), flops, "data gradient", a * rows * (s.n + s.k) + k.weight_bytes,
        k.weight_bytes,
    )  # fmt: skip
    dgrad = dgrad.replaced(flops=flops + epilogue)
    wgrad = _gemm(
        k, MatrixShape(1, s.k, s.n, rows), flops, "weight gradient", a * rows * (s.k + s.n) + g.main_grad_bytes(k),
        0.0,
    )  # fmt: skip
    return [dgrad, wgrad]


def activation_gemm(k: Kernel, g: Grad) -> list[Kernel]:
    """dA = dC B^T and dB = A^T dC, each reading dC and the other operand and writing its own; the fused epilogue's
    backward with dA, as a weight GEMM's with dX (its vector work twice, the constants it reads: attention's mask)."""
    s, a = k.shape, g.act_bytes
    b = s.batch
    flops = 2.0 * b * s.m * s.n * s.k
    epilogue = max(k.flops - k.matrix_flops, 0.0) * VECTOR_BACKWARD_WORK
    both = a * b * (s.m * s.n + s.m * s.k + s.k * s.n)
    da = _gemm(k, MatrixShape(b, s.m, s.k, s.n), flops, "gradient of A", both + k.weight_bytes, k.weight_bytes)
    return [
        da.replaced(flops=flops + epilogue),
        _gemm(k, MatrixShape(b, s.k, s.n, s.m), flops, "gradient of B", both, 0.0),
    ]


def gemm_gradients(k: Kernel, g: Grad) -> list[Kernel]:
    """A matrix op's gradients: a weight GEMM's where it reads trained parameters, else both activations'; as
    vector kernels where its forward has no GEMM view (an Einsum) or is a depthwise convolution."""
    if k.matrix is None or k.matrix.depthwise:
        return vector(k, g)
    if holds_parameters(k):
        return weight_gemm(k, g)
    return activation_gemm(k, g)


def movement(k: Kernel, g: Grad) -> list[Kernel]:
    return [_named(k, "backward")]


def vector(k: Kernel, g: Grad) -> list[Kernel]:
    activations = max(k.dram_bytes - k.weight_bytes, 0.0)
    return [
        _named(
            k,
            "backward",
            flops=k.flops * VECTOR_BACKWARD_WORK,
            dram_bytes=activations * VECTOR_BACKWARD_WORK + k.weight_bytes + g.main_grad_bytes(k),
        )
    ]


def no_gradient(k: Kernel, g: Grad) -> list[Kernel]:
    return []


BackwardFormula = Callable[[Kernel, Grad], list[Kernel]]
FORMULAS: dict[Backward, BackwardFormula] = {
    Backward.GEMM: gemm_gradients,
    Backward.ATTENTION: flash_attention,
    Backward.CONJUGATE: conjugate,
    Backward.MOVEMENT: movement,
    Backward.VECTOR: vector,
    Backward.NONE: no_gradient,
}


def backward_kernels(kind: Backward, k: Kernel, g: Grad) -> list[Kernel]:
    """The kernels of `k`'s backward by the formula `kind` names."""
    return FORMULAS[kind](k, g)
