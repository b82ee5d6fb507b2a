"""Sparse mixture-of-experts blocks: Mixtral's per-expert block, and the grouped block of today's MoE decoders
(Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3), used by zoo/mixtral.py and zoo/hf_decoder.py.

`sparse_moe` is HF MixtralSparseMoeBlock as an exporter traces it with static shapes: the router
(`block_sparse_moe.gate`, a MatMul to E logits), Softmax, TopK(k) renormalised over the top k, the top-k weights
scattered into a [batch, seq, E] routing table (ScatterElements), and E SwiGLU experts (`experts.{e}.w1/w3/w2`,
HF's parameter names) whose outputs are weighted by their routing column (zero for tokens not routed to them)
and summed.

`grouped_moe` holds a layer's experts as stacked weights, one GEMM per projection for all of them
(`experts.gate_up_proj` [E, hidden, 2 x ffn], `experts.down_proj` [E, ffn, hidden]: transformers >= 5's stacked
experts, and the grouped GEMMs serving engines run: vLLM's fused_moe, SGLang's, DeepGEMM's), so a 256-expert
layer is a handful of nodes, not 256 subgraphs. The routing table, transposed to [E, tokens, 1], weights the
[E, tokens, hidden] result before the sum over E. Its router is the family's (`Scoring`), beside it the shared
experts every token runs (DeepSeek's `shared_experts`; Qwen2-MoE's `shared_expert`, scaled by a sigmoid gate).

Either graph alone runs every expert on every token; the engine's MoE rule (work/moe.py) recognises the router,
the routing table and the expert GEMMs behind the Muls by it, and costs each expert GEMM at its expected tokens
(T x k / E) and weight coverage. Left out of the grouped router: DeepSeek's group-limited choice (n_group,
topk_group: which experts a token may pick, not how many) and Qwen's capacity-free drop rules; neither changes
the expected work.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

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


class Scoring(StrEnum):
    """How a grouped router scores the experts (the config's scoring_func)."""

    SOFTMAX = "softmax"  # Qwen-MoE, DeepSeek-V2: softmax over the E logits, the top k of it
    SIGMOID = "sigmoid"  # DeepSeek-V3: sigmoid per expert; the top k chosen by score + a learnt bias (noaux_tc)


@dataclass(frozen=True, slots=True)
class MoeSpec:
    """A grouped MoE layer as a config gives it."""

    experts: int  # routed experts E (n_routed_experts, num_experts)
    top_k: int  # experts each token is routed to (num_experts_per_tok)
    ffn: int  # each routed expert's intermediate size (moe_intermediate_size)
    shared_ffn: int = 0  # the shared experts' intermediate size in all (0: none)
    shared_gate: bool = False  # Qwen2-MoE: the shared expert's output x sigmoid(shared_expert_gate(h))
    scoring: Scoring = Scoring.SOFTMAX
    renormalize: bool = False  # norm_topk_prob: the top-k weights divided by their sum
    routed_scale: float = 1.0  # routed_scaling_factor on the routed experts' weights
    dense_layers: int = 0  # the first layers keep a dense MLP (DeepSeek's first_k_dense_replace)


def grouped_experts(b: GraphBuilder, x: str, hidden: int, ffn: int, experts: int) -> str:
    """x [T, hidden] -> every expert's SwiGLU of every token, [E, T, hidden] (stacked weights, one GEMM each)."""
    with b.scope("experts"):
        with b.scope("gate_up_proj"):
            fused = b.op("MatMul", x, b.weight("weight", [experts, hidden, 2 * ffn]))
        gate, up = b.op("Split", fused, b.const([ffn, ffn]), axis=-1, outputs=2)
        act = b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up)
        with b.scope("down_proj"):
            return b.op("MatMul", act, b.weight("weight", [experts, ffn, hidden]))


def _route(b: GraphBuilder, h: str, hidden: int, m: MoeSpec) -> str:
    """The router: h [batch, seq, hidden] -> the [batch, seq, E] routing table (each token's top-k weights)."""
    logits = blocks.linear(b, h, hidden, m.experts, "gate", bias=False)
    if m.scoring == Scoring.SOFTMAX:
        scores = choice = b.op("Softmax", logits, axis=-1)
    else:  # the bias steers the choice only; the weights are the sigmoid scores themselves
        scores = b.op("Sigmoid", logits)
        with b.scope("gate"):
            choice = b.op("Add", scores, b.weight("e_score_correction_bias", [m.experts]))
    top, chosen = b.op("TopK", choice, b.const([m.top_k]), axis=-1, outputs=2)
    if m.scoring == Scoring.SIGMOID:
        top = b.op("GatherElements", scores, chosen, axis=-1)
    if m.renormalize:
        top = b.op("Div", top, b.op("ReduceSum", top, b.const([-1]), keepdims=1))
    if m.routed_scale != 1.0:
        top = b.op("Mul", top, b.scalar(m.routed_scale))
    return b.op("ScatterElements", b.op("Mul", scores, b.scalar(0.0)), chosen, top, axis=-1)


def grouped_moe(b: GraphBuilder, h: str, hidden: int, m: MoeSpec) -> str:
    """h [batch, seq, hidden] -> the routed experts' weighted sum plus the shared experts' output, same shape."""
    with b.scope("mlp"):
        routing = _route(b, h, hidden, m)
        tokens = b.op("Reshape", h, b.const([-1, hidden]))
        experts = grouped_experts(b, tokens, hidden, m.ffn, m.experts)
        table = b.op("Transpose", b.op("Reshape", routing, b.const([-1, m.experts])), perm=[1, 0])
        weighted = b.op("Mul", experts, b.op("Unsqueeze", table, b.const([2])))  # [E, T, hidden] x [E, T, 1]
        routed = b.op("ReduceSum", weighted, b.const([0]), keepdims=0)
        out = b.op("Reshape", routed, b.op("Shape", h))
        if not m.shared_ffn:
            return out
        name = "shared_expert" if m.shared_gate else "shared_experts"  # Qwen2-MoE's one, DeepSeek's n of them
        shared = blocks.swiglu(b, h, hidden, m.shared_ffn, name)
        if m.shared_gate:
            gate = blocks.linear(b, h, hidden, 1, "shared_expert_gate", bias=False)
            shared = b.op("Mul", shared, b.op("Sigmoid", gate))
        return b.op("Add", out, shared)


def moe_parameters(hidden: int, m: MoeSpec) -> int:
    """One grouped MoE layer's parameters: the router (and DeepSeek-V3's per-expert bias), E experts of three
    hidden x ffn matrices, the shared experts' three, Qwen2-MoE's shared gate."""
    router = hidden * m.experts + (m.experts if m.scoring == Scoring.SIGMOID else 0)
    shared = 3 * hidden * m.shared_ffn + (hidden if m.shared_gate else 0)
    return router + 3 * hidden * m.ffn * m.experts + shared
