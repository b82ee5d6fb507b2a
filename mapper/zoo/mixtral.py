"""Built-in Mixtral-8x7B-shaped decoder: Llama-2's attention with GQA, and a sparse mixture of experts.

Each layer's feed-forward block is HF MixtralSparseMoeBlock as an exporter traces it with static shapes:
the router (`block_sparse_moe.gate`, a MatMul to 8 logits), Softmax, TopK(2) renormalised, the top-2
weights scattered into a [batch, seq, 8] routing table (ScatterElements), and eight SwiGLU experts
(`experts.{e}.w1/w3/w2`) whose outputs are gathered by their routing column and summed.
"""

from __future__ import annotations

import onnx

from mapper.zoo import blocks
from mapper.zoo.builder import GraphBuilder
from mapper.zoo.llama import LlamaConfig, build_llama

# HF mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 key/value heads,
# intermediate 14336, vocab 32000, num_local_experts 8, num_experts_per_tok 2, rope_theta 1e6.
# 46,702,792,704 params.
MIXTRAL_8X7B = LlamaConfig(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, rope_theta=1e6)
EXPERTS = 8
TOP_K = 2


def expert(b: GraphBuilder, x: str, hidden: int, ffn: int, e: int) -> str:
    """MixtralBlockSparseTop2MLP: w2(silu(w1(x)) * w3(x))."""
    with b.scope(f"experts.{e}"):
        gate = blocks.linear(b, x, hidden, ffn, "w1", bias=False)
        up = blocks.linear(b, x, hidden, ffn, "w3", bias=False)
        act = b.op("Mul", gate, b.op("Sigmoid", gate))
        return blocks.linear(b, b.op("Mul", act, up), ffn, hidden, "w2", bias=False)


def sparse_moe(b: GraphBuilder, h: str, c: LlamaConfig, experts: int = EXPERTS, top_k: int = TOP_K) -> str:
    """Router -> Softmax -> TopK -> renormalise -> scatter into a routing table; each expert's output
    times its routing column (zero for the tokens not routed to it), summed."""
    with b.scope("block_sparse_moe"):
        probs = b.op("Softmax", blocks.linear(b, h, c.hidden, experts, "gate", bias=False), axis=-1)
        top, chosen = b.op("TopK", probs, b.const([top_k]), axis=-1, outputs=2)
        top = b.op("Div", top, b.op("ReduceSum", top, b.const([-1]), keepdims=1))
        routing = b.op("ScatterElements", b.op("Mul", probs, b.scalar(0.0)), chosen, top, axis=-1)
        out = None
        for e in range(experts):
            weight = b.op("Gather", routing, b.const([e]), axis=-1)  # [batch, seq, 1]
            y = b.op("Mul", expert(b, h, c.hidden, c.ffn, e), weight)
            out = y if out is None else b.op("Add", out, y)
        return out


def build_mixtral(c: LlamaConfig, name: str, inline_weights: bool = False) -> onnx.ModelProto:
    """Mixtral (Jiang et al. 2024, "Mixtral of Experts"; transformers/models/mixtral/modeling_mixtral.py)."""
    return build_llama(c, name, inline_weights, mlp=lambda b, h: sparse_moe(b, h, c))


def build_mixtral_8x7b() -> onnx.ModelProto:
    return build_mixtral(MIXTRAL_8X7B, "mixtral-8x7b")
