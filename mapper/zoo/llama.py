"""Built-in Llama-2 decoders (7B, 70B-shaped): RMSNorm, RoPE, SwiGLU, GQA, KV cache.

One graph serves prefill (seq = prompt, past = 0) and decode (seq = 1, past = cache length).
Names follow HF LlamaForCausalLM (model.layers.0.self_attn.q_proj.weight, lm_head.weight).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from mapper.zoo import blocks
from mapper.zoo.builder import INT64, Dim, GraphBuilder


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 32000
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# HF meta-llama/Llama-2-7b-hf config.json: 32 layers, hidden 4096, 32 heads (no GQA), intermediate
# 11008, vocab 32000, rms_norm_eps 1e-5, rope_theta 10000. 6,738,415,616 params.
LLAMA2_7B = LlamaConfig(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008)
# HF meta-llama/Llama-2-70b-hf config.json: 80 layers, hidden 8192, 64 heads, 8 key/value heads,
# intermediate 28672, vocab 32000. 68,976,648,192 params.
LLAMA2_70B = LlamaConfig(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672)


def rope_tables(b: GraphBuilder, c, past: str, total: str, inv_freq: np.ndarray | None = None) -> tuple[str, str]:
    """cos, sin [seq, head_dim] for positions past..total-1, computed the way LlamaRotaryEmbedding is:
    outer(positions, inv_freq), duplicated to head_dim, then Cos and Sin (inv_freq is a buffer; `c` has
    head_dim and rope_theta; a scaled `inv_freq` may be given, see hf_decoder.inv_freq)."""
    with b.scope("model.rotary_emb"):
        if inv_freq is None:
            inv_freq = 1.0 / c.rope_theta ** (np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim)
        pos = b.op("Unsqueeze", b.op("Cast", blocks.positions(b, past, total), to=1), b.const([1]))
        freqs = b.op("Mul", pos, b.const(inv_freq, np.float32))
        angles = b.op("Concat", freqs, freqs, axis=-1)
        return b.op("Cos", angles), b.op("Sin", angles)


def apply_rope(b: GraphBuilder, x: str, cos: str, sin: str, head_dim: int) -> str:
    """x * cos + rotate_half(x) * sin, rotate_half = Concat(-x[..., d/2:], x[..., :d/2])."""
    half = head_dim // 2
    first = b.op("Slice", x, b.const([0]), b.const([half]), b.const([-1]))
    second = b.op("Slice", x, b.const([half]), b.const([blocks.INT64_MAX]), b.const([-1]))
    rotated = b.op("Concat", b.op("Neg", second), first, axis=-1)
    return b.op("Add", b.op("Mul", x, cos), b.op("Mul", rotated, sin))


def build_llama(c: LlamaConfig, name: str, inline_weights: bool = False) -> onnx.ModelProto:
    """Llama-2 decoder (HF LlamaForCausalLM, eager attention, KV cache in and out).

    Reference: HF meta-llama/Llama-2-7b-hf and Llama-2-70b-hf config.json,
    transformers/models/llama/modeling_llama.py; Touvron et al. 2023 "Llama 2".
    Inputs input_ids [batch, seq] and past_key_values.{i}.key/.value [batch, kv_heads, past, 128];
    outputs logits [batch, seq, 32000] and present.{i}.key/.value [batch, kv_heads, past+seq, 128].
    The causal mask is additive (Trilu with k = past, Where -> 0 / float32 min); GQA repeats K/V
    with Unsqueeze -> Expand -> Reshape (HF repeat_kv). LM head is untied.
    """
    b = GraphBuilder(name, inline_weights=inline_weights)
    d = c.head_dim
    ids = b.input("input_ids", ["batch", "seq"], INT64)
    cache_shape: list[Dim] = ["batch", c.kv_heads, "past", d]
    past_kv = [
        tuple(b.input(f"past_key_values.{i}.{t}", cache_shape) for t in ("key", "value")) for i in range(c.layers)
    ]
    batch, seq_1d = b.dims_1d(ids, [0, 1])
    seq, past, total = blocks.cache_lengths(b, ids, past_kv[0][0])
    keep = blocks.causal_keep_mask(b, seq, past, total)
    mask = b.op("Where", keep, b.scalar(0.0), b.scalar(blocks.FLOAT32_MIN))
    cos, sin = rope_tables(b, c, past, total)
    x = b.op("Gather", b.weight("model.embed_tokens.weight", [c.vocab, c.hidden]), ids)
    for i in range(c.layers):
        with b.scope(f"model.layers.{i}"):
            h = blocks.rms_norm(b, x, c.hidden, "input_layernorm", c.norm_eps)
            with b.scope("self_attn"):
                q = blocks.linear(b, h, c.hidden, c.heads * d, "q_proj", bias=False)
                k = blocks.linear(b, h, c.hidden, c.kv_heads * d, "k_proj", bias=False)
                v = blocks.linear(b, h, c.hidden, c.kv_heads * d, "v_proj", bias=False)
                q = apply_rope(b, blocks.split_heads(b, q, batch, seq_1d, c.heads, d), cos, sin, d)
                k = apply_rope(b, blocks.split_heads(b, k, batch, seq_1d, c.kv_heads, d), cos, sin, d)
                v = blocks.split_heads(b, v, batch, seq_1d, c.kv_heads, d)
                k = blocks.append_cache(b, past_kv[i][0], k, f"present.{i}.key")
                v = blocks.append_cache(b, past_kv[i][1], v, f"present.{i}.value")
                n_rep = c.heads // c.kv_heads
                k, v = (blocks.repeat_kv(b, t, batch, total, c.kv_heads, n_rep, d) for t in (k, v))
                context = blocks.scaled_dot_product(b, q, k, v, d, additive_mask=mask)
                attn = blocks.linear(
                    b, blocks.merge_heads(b, context, batch, seq_1d, c.hidden), c.hidden, c.hidden, "o_proj", bias=False
                )
            x = b.op("Add", x, attn)
            h = blocks.rms_norm(b, x, c.hidden, "post_attention_layernorm", c.norm_eps)
            x = b.op("Add", x, blocks.swiglu(b, h, c.hidden, c.ffn, "mlp"))
    x = blocks.rms_norm(b, x, c.hidden, "model.norm", c.norm_eps)
    b.output(blocks.linear(b, x, c.hidden, c.vocab, "lm_head", bias=False), "logits", ["batch", "seq", c.vocab])
    for i in range(c.layers):
        for t in ("key", "value"):
            b.output(f"present.{i}.{t}", f"present.{i}.{t}", ["batch", c.kv_heads, None, d])
    return b.build(build_llama.__doc__)


def build_llama2_7b() -> onnx.ModelProto:
    return build_llama(LLAMA2_7B, "llama2-7b")


def build_llama2_70b() -> onnx.ModelProto:
    return build_llama(LLAMA2_70B, "llama2-70b")
