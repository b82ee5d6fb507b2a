"""A sparse mixture-of-experts block (Mixtral's block_sparse_moe) with static shapes.

Router MatMul -> Softmax -> TopK (weights renormalized over the top k, as Mixtral does), then each
(token, expert) pair is dispatched: the pairs are grouped into D = min(experts, tokens x top_k) expert
slots of C = ceil(tokens x top_k / D) tokens each (Pad, Reshape), every slot's expert weights are
gathered from the stacked [experts, ...] tensors (Gather), the SwiGLU runs as batched MatMuls over the
slots, and the outputs are weighted and summed back per token (Mul, ReduceSum). FLOPs are exactly those
of top_k experts a token wherever D x C = tokens x top_k (decode with tokens x top_k <= experts; prefill
with tokens x top_k a multiple of experts); weights read are D experts' (2 of 8 at batch-1 decode, all 8
at prefill). Values are not routed faithfully (slot i takes the i-th chosen expert id): the graph is for
shapes and costs, and runs under ONNX Runtime only for timing.

`sparse_moe` is the one entry point: the built-in Mixtral (mapper/zoo/mixtral.py, another change) can
take its place here without touching hf_decoder.
"""

from __future__ import annotations

from mapper.zoo import blocks
from mapper.zoo.builder import GraphBuilder


def _slots(b: GraphBuilder, pairs: str, experts: int) -> tuple[str, str, str]:
    """1-D [1] int64 sizes: D expert slots, C tokens a slot, and the padding D*C - pairs."""
    d = b.op("Min", pairs, b.const([experts]))
    c = b.op("Div", b.op("Sub", b.op("Add", pairs, d), b.const([1])), d)
    return d, c, b.op("Sub", b.op("Mul", d, c), pairs)


def sparse_moe(b: GraphBuilder, x: str, c, batch: str, seq: str) -> str:
    """x [batch, seq, hidden] -> the weighted sum of its top_k experts' SwiGLU outputs, same shape.
    `c` has hidden, ffn, experts and top_k."""
    h, k = c.hidden, c.top_k
    with b.scope("block_sparse_moe"):
        flat = b.op("Reshape", x, b.const([-1, h]))  # [T, hidden]
        probs = b.op("Softmax", blocks.linear(b, flat, h, c.experts, "gate", bias=False), axis=-1)
        top_w, top_i = b.op("TopK", probs, b.const([k]), axis=-1, outputs=2)  # [T, k]
        top_w = b.op("Div", top_w, b.op("ReduceSum", top_w, b.const([-1]), keepdims=1))
        pairs = b.op("Mul", b.op("Shape", flat, end=1), b.const([k]))  # [1]: T * k
        d, per_slot, pad = _slots(b, pairs, c.experts)
        chosen = b.op("Slice", b.op("Reshape", top_i, b.const([-1])), b.const([0]), d)  # [D] expert ids
        token_of_pair = b.op("Div", b.op("Range", b.const(0), b.op("Squeeze", pairs), b.const(1)), b.const(k))
        routed = b.op("Gather", flat, token_of_pair, axis=0)  # [T*k, hidden], token-major
        routed = b.op("Pad", routed, b.op("Concat", b.const([0, 0]), pad, b.const([0]), axis=0))
        routed = b.op("Reshape", routed, b.op("Concat", d, per_slot, b.const([h]), axis=0))  # [D, C, hidden]
        with b.scope("experts"):
            w1, w3 = (b.op("Gather", b.weight(n, [c.experts, h, c.ffn]), chosen, axis=0) for n in ("w1", "w3"))
            w2 = b.op("Gather", b.weight("w2", [c.experts, c.ffn, h]), chosen, axis=0)
            gate, up = b.op("MatMul", routed, w1), b.op("MatMul", routed, w3)  # [D, C, ffn]
            y = b.op("MatMul", b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up), w2)  # [D, C, hidden]
        y = b.op("Slice", b.op("Reshape", y, b.const([-1, h])), b.const([0]), pairs)  # [T*k, hidden]
        y = b.op("Mul", y, b.op("Reshape", top_w, b.const([-1, 1])))
        y = b.op("ReduceSum", b.op("Reshape", y, b.const([-1, k, h])), b.const([1]), keepdims=0)  # [T, hidden]
        return b.op("Reshape", y, b.shape_of(batch, seq, [h]))
