"""A decoder graph from a Hugging Face config's numbers: Llama 1-3.2, Mistral, Qwen2, Gemma, Gemma-2, Phi-3,
Mixtral.

One builder, the built-in Llama's (mapper/zoo/llama.py) generalized by what the families differ in:
head_dim apart from hidden/heads (Gemma), q/k/v biases (Qwen2), tied embeddings (Gemma, Llama-3.2),
GeGLU (Gemma), embeddings scaled by sqrt(hidden) (Gemma), a sliding-window causal mask (Mistral v0.1, Phi-3;
on alternate layers in Gemma-2), RoPE scaling (Llama-3.1's "llama3", "linear", "dynamic" base), fused
qkv_proj and gate_up_proj (Phi-3), Gemma-2's soft-capped scores and logits and its norms around both blocks,
and a sparse mixture of experts (Mixtral). Dims are named as the built-in decoders' (`batch`, `seq`, `past`);
names follow HF's modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from mapper.zoo import blocks, moe_block
from mapper.zoo.builder import INT64, Dim, GraphBuilder
from mapper.zoo.llama import apply_rope, rope_tables
from mapper.zoo.mla import MlaSpec, mla_attention, mla_parameters, mla_weight_flops
from mapper.zoo.moe_block import MoeSpec, moe_parameters


@dataclass(frozen=True, slots=True)
class DecoderSpec:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    rope_scaling: tuple[tuple[str, str | float], ...] = ()  # the config's rope_scaling dict, as items
    tied: bool = False
    qkv_bias: bool = False
    sliding_window: int | None = None
    activation: str = "silu"  # "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    embed_scale: bool = False  # Gemma multiplies the embeddings by sqrt(hidden)
    experts: int = 0  # 0: a dense MLP; else the experts of each sparse MoE block
    top_k: int = 0  # experts each token is routed to
    fused_projections: bool = False  # Phi-3: one qkv_proj and one gate_up_proj, split after the GEMM
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's query and key (q_norm, k_norm)
    sliding_period: int = 1  # the window masks layers i % period == 0 (Gemma-2: 2, from layer 0); others are full
    attn_softcap: float = 0.0  # Gemma-2 attn_logit_softcapping: scores -> cap * tanh(scores / cap)
    final_softcap: float = 0.0  # Gemma-2 final_logit_softcapping, on the logits
    query_scale: int = 0  # Gemma-2 query_pre_attn_scalar: scores / sqrt(it) (0: / sqrt(head_dim))
    sandwich_norms: bool = False  # Gemma-2: a norm after attention and one before and after the MLP
    moe: MoeSpec | None = None  # a grouped mixture of experts (Qwen-MoE, DeepSeek) in place of the dense MLP
    mla: MlaSpec | None = None  # DeepSeek's latent attention (head_dim is then its rotary width)
    mtp_layers: int = 0  # DeepSeek-V3's multi-token prediction modules: counted (`mtp_parameters`), not built


def inv_freq(c: DecoderSpec) -> np.ndarray:
    """RoPE inverse frequencies with the config's scaling (transformers modeling_rope_utils):
    linear divides them by the factor; llama3 divides the low frequencies by it and blends the middle."""
    freqs = 1.0 / c.rope_theta ** (np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim)
    scaling = dict(c.rope_scaling)
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return freqs / factor
    if kind == "llama3":
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / freqs
        smooth = np.clip((old / wavelen - low) / (high - low), 0.0, 1.0)
        return (1 - smooth) * freqs / factor + smooth * freqs
    return freqs  # default, dynamic (rescales past the trained length only: same graph)


def layer_keep_masks(b: GraphBuilder, c: DecoderSpec, seq: str, past: str, total: str) -> list[str]:
    """Each layer's bool [seq, total] mask: the causal mask, and where the layer slides (a window, on layers
    i % sliding_period == 0) only the last `window` keys (j > past + i - window: Mistral's sliding_window)."""
    keep = blocks.causal_keep_mask(b, seq, past, total)
    if c.sliding_window is None:
        return [keep] * c.layers
    ones = b.op(
        "ConstantOfShape",
        b.shape_of(b.op("Unsqueeze", seq, b.const([0])), b.op("Unsqueeze", total, b.const([0]))),
        value=helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0]),
    )
    too_old = b.op("Cast", b.op("Trilu", ones, b.op("Sub", past, b.const(c.sliding_window)), upper=0), to=9)
    window = b.op("And", keep, b.op("Not", too_old))
    return [window if i % c.sliding_period == 0 else keep for i in range(c.layers)]


def gated_mlp(b: GraphBuilder, x: str, c: DecoderSpec) -> str:
    """The dense MLP: SwiGLU (blocks.swiglu) or Gemma's GeGLU (gelu_pytorch_tanh on the gate)."""
    if c.activation == "silu" and not c.fused_projections:
        return blocks.swiglu(b, x, c.hidden, c.ffn, "mlp")
    with b.scope("mlp"):
        if c.fused_projections:  # Phi-3's gate_up_proj: one GEMM, chunked in two
            fused = blocks.linear(b, x, c.hidden, 2 * c.ffn, "gate_up_proj", bias=False)
            gate, up = b.op("Split", fused, b.const([c.ffn, c.ffn]), axis=-1, outputs=2)
        else:
            gate = blocks.linear(b, x, c.hidden, c.ffn, "gate_proj", bias=False)
            up = blocks.linear(b, x, c.hidden, c.ffn, "up_proj", bias=False)
        act = b.op("Mul", gate, b.op("Sigmoid", gate)) if c.activation == "silu" else blocks.gelu_tanh(b, gate)
        return blocks.linear(b, b.op("Mul", act, up), c.ffn, c.hidden, "down_proj", bias=False)


def rotary_heads(b: GraphBuilder, x: str, c: DecoderSpec, ctx: dict, heads: int, norm: str) -> str:
    """[batch, seq, heads*head_dim] -> its heads with RoPE applied (Qwen3 normalizes each head first)."""
    x = blocks.split_heads(b, x, ctx["batch"], ctx["seq_1d"], heads, c.head_dim)
    if c.qk_norm:
        x = blocks.rms_norm(b, x, c.head_dim, norm, c.norm_eps)
    return apply_rope(b, x, ctx["cos"], ctx["sin"], c.head_dim)


def attention(b: GraphBuilder, h: str, c: DecoderSpec, ctx: dict, i: int) -> str:
    """Self-attention with RoPE, the KV cache in and out and GQA (HF repeat_kv)."""
    d, batch, seq_1d, total = c.head_dim, ctx["batch"], ctx["seq_1d"], ctx["total"]
    q_width, kv_width = c.heads * d, c.kv_heads * d
    with b.scope("self_attn"):
        if c.fused_projections:  # Phi-3's qkv_proj: one GEMM, split into q, k, v
            qkv = blocks.linear(b, h, c.hidden, q_width + 2 * kv_width, "qkv_proj", bias=c.qkv_bias)
            q, k, v = b.op("Split", qkv, b.const([q_width, kv_width, kv_width]), axis=-1, outputs=3)
        else:
            q = blocks.linear(b, h, c.hidden, q_width, "q_proj", bias=c.qkv_bias)
            k = blocks.linear(b, h, c.hidden, kv_width, "k_proj", bias=c.qkv_bias)
            v = blocks.linear(b, h, c.hidden, kv_width, "v_proj", bias=c.qkv_bias)
        q = rotary_heads(b, q, c, ctx, c.heads, "q_norm")
        k = rotary_heads(b, k, c, ctx, c.kv_heads, "k_norm")
        v = blocks.split_heads(b, v, batch, seq_1d, c.kv_heads, d)
        k = blocks.append_cache(b, ctx["past_kv"][i][0], k, f"present.{i}.key")
        v = blocks.append_cache(b, ctx["past_kv"][i][1], v, f"present.{i}.value")
        n_rep = c.heads // c.kv_heads
        k, v = (blocks.repeat_kv(b, t, batch, total, c.kv_heads, n_rep, d) for t in (k, v))
        scale = c.query_scale or d
        context = blocks.scaled_dot_product(b, q, k, v, scale, keep_mask=ctx["keep"][i], softcap=c.attn_softcap)
        merged = blocks.merge_heads(b, context, batch, seq_1d, q_width)
        return blocks.linear(b, merged, q_width, c.hidden, "o_proj", bias=False)


def lm_head(b: GraphBuilder, x: str, c: DecoderSpec, embed: str, ctx: dict) -> str:
    if not c.tied:
        logits = blocks.linear(b, x, c.hidden, c.vocab, "lm_head", bias=False)
    else:
        with b.scope("lm_head"):  # tied: a Gemm(transB=1) on the embedding itself, so the weight appears once
            flat = b.op("Gemm", b.op("Reshape", x, b.const([-1, c.hidden])), embed, transB=1)
            logits = b.op("Reshape", flat, b.shape_of(ctx["batch"], ctx["seq_1d"], [c.vocab]))
    if not c.final_softcap:
        return logits
    with b.scope("lm_head"):  # Gemma2ForCausalLM caps the logits right after the head
        return blocks.soft_cap(b, logits, c.final_softcap)


def decoder_layer(b: GraphBuilder, x: str, c: DecoderSpec, ctx: dict, i: int) -> str:
    """One layer: pre-norm attention and MLP, each added to the residual (Gemma-2 also normalizes each
    block's output before the add: post_attention_layernorm, pre_/post_feedforward_layernorm)."""
    eps = c.norm_eps
    h = blocks.rms_norm(b, x, c.hidden, "input_layernorm", eps)
    if c.mla is not None:
        a = mla_attention(b, h, c, ctx, i)
    else:
        a = attention(b, h, c, ctx, i)
    if c.sandwich_norms:
        a = blocks.rms_norm(b, a, c.hidden, "post_attention_layernorm", eps)
    x = b.op("Add", x, a)
    pre = "pre_feedforward_layernorm" if c.sandwich_norms else "post_attention_layernorm"
    h = blocks.rms_norm(b, x, c.hidden, pre, eps)
    if c.moe is not None and i >= c.moe.dense_layers:
        mlp = moe_block.grouped_moe(b, h, c.hidden, c.moe)
    elif c.experts:
        mlp = moe_block.sparse_moe(b, h, c.hidden, c.ffn, c.experts, c.top_k)
    else:
        mlp = gated_mlp(b, h, c)
    if c.sandwich_norms:
        mlp = blocks.rms_norm(b, mlp, c.hidden, "post_feedforward_layernorm", eps)
    return b.op("Add", x, mlp)


def build_decoder(c: DecoderSpec, name: str) -> onnx.ModelProto:
    """The decoder of a Hugging Face *ForCausalLM at config `c` (eager attention, KV cache in and out).

    Inputs input_ids [batch, seq] and past_key_values.{i}.key/.value [batch, kv_heads, past, head_dim];
    outputs logits [batch, seq, vocab] and present.{i}.key/.value [batch, kv_heads, past+seq, head_dim]."""
    b = GraphBuilder(name)
    ids = b.input("input_ids", ["batch", "seq"], INT64)
    cache, kinds = cache_layout(c)
    past_kv = [tuple(b.input(f"past_key_values.{i}.{t}", cache) for t in kinds) for i in range(c.layers)]
    batch, seq_1d = b.dims_1d(ids, [0, 1])
    seq, past, total = blocks.cache_lengths(b, ids, past_kv[0][0])
    cos, sin = rope_tables(b, c, past, total, inv_freq(c))
    keep = layer_keep_masks(b, c, seq, past, total)
    ctx = dict(batch=batch, seq_1d=seq_1d, total=total, cos=cos, sin=sin, keep=keep, past_kv=past_kv)
    embed = b.weight("model.embed_tokens.weight", [c.vocab, c.hidden])
    x = b.op("Gather", embed, ids)
    if c.embed_scale:
        x = b.op("Mul", x, b.scalar(math.sqrt(c.hidden)))
    for i in range(c.layers):
        with b.scope(f"model.layers.{i}"):
            x = decoder_layer(b, x, c, ctx, i)
    x = blocks.rms_norm(b, x, c.hidden, "model.norm", c.norm_eps)
    b.output(lm_head(b, x, c, embed, ctx), "logits", ["batch", "seq", c.vocab])
    for i in range(c.layers):
        for t in kinds:
            b.output(f"present.{i}.{t}", f"present.{i}.{t}", [cache[0], cache[1], None, cache[3]])
    return b.build(build_decoder.__doc__)


def cache_layout(c: DecoderSpec) -> tuple[list[Dim], tuple[str, ...]]:
    """A layer's cache shape and its tensors: key and value [batch, kv_heads, past, head_dim], or MLA's one
    latent [batch, 1, past, d_c + d_h^R] (past_key_values.{i}.latent in, present.{i}.latent out). The graph's
    doc string is build_decoder's, unchanged since the acceptance corpus was recorded: its bytes name the model."""
    if c.mla is not None:
        return ["batch", 1, "past", c.mla.cache_width], ("latent",)
    return ["batch", c.kv_heads, "past", c.head_dim], ("key", "value")


def parameters(c: DecoderSpec) -> int:
    """The closed-form parameter count (embeddings, attention, MLP or experts and router, norms, head)."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    attn = c.hidden * (q + 2 * kv) + q * c.hidden + (q + 2 * kv if c.qkv_bias else 0)
    attn += 2 * c.head_dim if c.qk_norm else 0
    if c.mla is not None:
        attn = mla_parameters(c.hidden, c.heads, c.mla)
    dense = 3 * c.hidden * c.ffn * max(c.experts, 1) + (c.hidden * c.experts if c.experts else 0)
    norms = (4 if c.sandwich_norms else 2) * c.hidden
    moe_layers = c.layers - c.moe.dense_layers if c.moe is not None else 0
    mlps = (c.layers - moe_layers) * dense + (moe_layers * moe_parameters(c.hidden, c.moe) if c.moe else 0)
    return c.layers * (attn + norms) + mlps + c.vocab * c.hidden * (1 if c.tied else 2) + c.hidden


def mtp_parameters(c: DecoderSpec) -> int:
    """DeepSeek-V3's multi-token prediction modules as its checkpoint stores them (model.layers.61 on): each an
    MoE decoder layer, enorm and hnorm, eh_proj [2 x hidden, hidden], shared_head's norm, and its own copies of
    the embedding and the output head (the paper shares them with the main model; the files hold them again)."""
    if not c.mtp_layers or c.moe is None or c.mla is None:
        return 0
    layer = mla_parameters(c.hidden, c.heads, c.mla) + moe_parameters(c.hidden, c.moe) + 2 * c.hidden
    return c.mtp_layers * (layer + 3 * c.hidden + 2 * c.hidden * c.hidden + 2 * c.vocab * c.hidden)


def flops_per_token(c: DecoderSpec, context: int) -> int:
    """Closed-form matmul FLOPs of one token attending to `context` keys: 2 x the weights it multiplies
    (top_k experts of each MoE block, its shared experts, the router, the head; not the embedding lookup nor
    Qwen2-MoE's one-column shared gate) plus attention's
    QK^T and PV (2 x 2 x heads x head_dim x context a layer)."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    experts = c.top_k if c.experts else 1
    attn = c.hidden * (q + 2 * kv) + q * c.hidden
    scored = 4 * q * context  # QK^T and PV, 2 x heads x head_dim x context each
    if c.mla is not None:  # absorbed: both over the latent row (d_c + d_h^R) on every head
        attn, scored = mla_weight_flops(c.hidden, c.heads, c.mla), 4 * c.heads * c.mla.cache_width * context
    dense = 3 * c.hidden * c.ffn * experts + c.hidden * c.experts
    moe_layers, moe = (c.layers - c.moe.dense_layers, c.moe) if c.moe is not None else (0, None)
    routed = 3 * c.hidden * (moe.ffn * moe.top_k + moe.shared_ffn) + c.hidden * moe.experts if moe else 0
    weights = c.layers * attn + (c.layers - moe_layers) * dense + moe_layers * routed
    return 2 * (weights + c.vocab * c.hidden) + c.layers * scored
