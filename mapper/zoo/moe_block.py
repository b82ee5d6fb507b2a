"""The one sparse mixture-of-experts block (Mixtral's block_sparse_moe), used by the built-in Mixtral
(zoo/mixtral.py) and by decoders from Hugging Face configs (zoo/hf_decoder.py).

HF MixtralSparseMoeBlock as an exporter traces it with static shapes: the router (`block_sparse_moe.gate`,
a MatMul to E logits), Softmax, TopK(k) renormalised over the top k, the top-k weights scattered into a
[batch, seq, E] routing table (ScatterElements), and E SwiGLU experts (`experts.{e}.w1/w3/w2`, HF's
parameter names) whose outputs are weighted by their routing column (zero for tokens not routed to them)
and summed. The graph alone runs every expert on every token; the engine's MoE rule (work/moe.py)
recognises this pattern and costs each expert at its expected tokens (T x k / E) and weight coverage.
"""

from __future__ import annotations

from mapper.zoo import blocks
from mapper.zoo.builder import GraphBuilder


def expert(b: GraphBuilder, x: str, hidden: int, ffn: int, e: int) -> str:
    """MixtralBlockSparseTop2MLP: w2(silu(w1(x)) * w3(x))."""
    with b.scope(f"experts.{e}"):
        gate = blocks.linear(b, x, hidden, ffn, "w1", bias=False)
        up = blocks.linear(b, x, hidden, ffn, "w3", bias=False)
        act = b.op("Mul", gate, b.op("Sigmoid", gate))
        return blocks.linear(b, b.op("Mul", act, up), ffn, hidden, "w2", bias=False)


def sparse_moe(b: GraphBuilder, h: str, hidden: int, ffn: int, experts: int, top_k: int) -> str:
    """h [batch, seq, hidden] -> the routing-weighted sum of its top_k experts' SwiGLU outputs, same shape."""
    with b.scope("block_sparse_moe"):
        probs = b.op("Softmax", blocks.linear(b, h, hidden, experts, "gate", bias=False), axis=-1)
        top, chosen = b.op("TopK", probs, b.const([top_k]), axis=-1, outputs=2)
        top = b.op("Div", top, b.op("ReduceSum", top, b.const([-1]), keepdims=1))
        routing = b.op("ScatterElements", b.op("Mul", probs, b.scalar(0.0)), chosen, top, axis=-1)
        out: str | None = None
        for e in range(experts):
            weight = b.op("Gather", routing, b.const([e]), axis=-1)  # [batch, seq, 1]
            y = b.op("Mul", expert(b, h, hidden, ffn, e), weight)
            out = y if out is None else b.op("Add", out, y)
        if out is None:
            raise ValueError("a sparse MoE block needs at least one expert")
        return out
