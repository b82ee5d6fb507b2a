"""Multi-head latent attention (DeepSeek-V2/V3), built in the absorbed form serving engines decode with.

MLA (DeepSeek-AI, "DeepSeek-V2", 2024, sec. 2.1) caches one compressed latent a token a layer: c^KV, the
kv_a_proj_with_mqa output normalized (kv_lora_rank d_c = 512 wide), and the rotary key k^R every head shares
(qk_rope_head_dim d_h^R = 64): (d_c + d_h^R) = 576 elements, 4.5 d_h at d_h = 128 (the paper's Table 1). The graph
holds it as one cache a layer, `past_key_values.{i}.latent` [batch, 1, past, d_c + d_h^R] -> `present.{i}.latent`,
so the engine's cache recognition (plan/runtime.find_kv_appends), the memory plan and serving's KV budget count
the compressed size: 576 x 61 layers x 2 bytes = 70,272 bytes a token for DeepSeek-V3 at bf16.

Attention is the absorbed form (sec. 2.1.2: "W^UK can be absorbed into W^Q, and W^UV can be absorbed into W^O"),
the one vLLM (MLACommonImpl, decode) and SGLang (FlashMLA, FlashInfer MLA) decode with: each head's non-rotary
query goes through its slice of W^UK (kv_b_proj's key half, [heads, qk_nope_head_dim, d_c]) to the latent width,
is joined by its rotary part, and scores the latent cache as one key head shared by every query head (MQA over
576 dims); the probabilities weight the latent rows, the rotary 64 are sliced off, and each head's result goes
through its slice of W^UV (kv_b_proj's value half, [heads, d_c, v_head_dim]) before o_proj. Both halves together
are kv_b_proj's parameters exactly. The query is compressed too where the config says (q_a_proj, q_a_layernorm,
q_b_proj: DeepSeek-V3's q_lora_rank 1536) or one q_proj (DeepSeek-V2-Lite).

Left out: at prefill vLLM and SGLang expand K and V from the latent instead (QK over 192 dims a head, PV over 128:
cheaper for long prompts), so this graph states a long prefill's attention FLOPs about (576 + 576) / (192 + 128)
= 3.6x high (PV here weights all 576 latent columns, 12.5% over the 512 a fused kernel multiplies); RoPE is the
rotate-half form where DeepSeek interleaves pairs (the same work, channels permuted); YaRN's attention scale
(mscale) is a constant's value, not work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mapper.zoo import blocks
from mapper.zoo.builder import GraphBuilder
from mapper.zoo.llama import apply_rope

if TYPE_CHECKING:
    from mapper.zoo.hf_decoder import DecoderSpec


@dataclass(frozen=True, slots=True)
class MlaSpec:
    """The latent attention's widths, as a DeepSeek config names them."""

    kv_rank: int  # kv_lora_rank d_c: the compressed latent a token caches
    rope_dim: int  # qk_rope_head_dim d_h^R: the rotary key every head shares, cached beside the latent
    nope_dim: int  # qk_nope_head_dim: each head's query and key width without RoPE
    v_dim: int  # v_head_dim
    q_rank: int = 0  # q_lora_rank: the query's compressed width (0: one q_proj)

    @property
    def cache_width(self) -> int:
        """Elements a token caches a layer: d_c + d_h^R."""
        return self.kv_rank + self.rope_dim

    @property
    def qk_dim(self) -> int:
        """A head's query width: its non-rotary and rotary parts (192 for DeepSeek-V2/V3)."""
        return self.nope_dim + self.rope_dim


def per_head(b: GraphBuilder, x: str, ctx: dict, heads: int, d_in: int, d_out: int, name: str) -> str:
    """x [batch, seq, heads, d_in] -> [batch, seq, heads, d_out] through each head's own [d_in, d_out] matrix: a
    batched GEMM over the heads ([heads, tokens, d_in] x [heads, d_in, d_out]), as the absorbed kernels run it."""
    tokens = b.op("Transpose", b.op("Reshape", x, b.const([-1, heads, d_in])), perm=[1, 0, 2])
    y = b.op("MatMul", tokens, b.weight(name, [heads, d_in, d_out]))
    y = b.op("Transpose", y, perm=[1, 0, 2])
    return b.op("Reshape", y, b.shape_of(ctx["batch"], ctx["seq_1d"], [heads, d_out]))


def _query(b: GraphBuilder, h: str, hidden: int, heads: int, m: MlaSpec, eps: float) -> str:
    if not m.q_rank:
        return blocks.linear(b, h, hidden, heads * m.qk_dim, "q_proj", bias=False)
    q = blocks.linear(b, h, hidden, m.q_rank, "q_a_proj", bias=False)
    q = blocks.rms_norm(b, q, m.q_rank, "q_a_layernorm", eps)
    return blocks.linear(b, q, m.q_rank, heads * m.qk_dim, "q_b_proj", bias=False)


def mla_attention(b: GraphBuilder, h: str, c: DecoderSpec, ctx: dict, i: int) -> str:
    """One layer's latent attention, absorbed: h [batch, seq, hidden] -> o_proj's output, same shape; the latent
    cache of layer i appended (`ctx`: dims, rotary tables, masks and caches, as hf_decoder.build_decoder makes)."""
    if c.mla is None:
        raise ValueError("latent attention needs the config's MLA widths")
    m, hidden, heads, eps = c.mla, c.hidden, c.heads, c.norm_eps
    batch, seq_1d = ctx["batch"], ctx["seq_1d"]
    cos, sin = ctx["cos"], ctx["sin"]  # [seq, rope_dim]
    with b.scope("self_attn"):
        q = b.op("Reshape", _query(b, h, hidden, heads, m, eps), b.shape_of(batch, seq_1d, [heads, m.qk_dim]))
        q_nope, q_pe = b.op("Split", q, b.const([m.nope_dim, m.rope_dim]), axis=-1, outputs=2)
        on_heads = [b.op("Unsqueeze", t, b.const([1])) for t in (cos, sin)]  # [seq, 1, rope_dim]
        q_pe = apply_rope(b, q_pe, on_heads[0], on_heads[1], m.rope_dim)
        kv = blocks.linear(b, h, hidden, m.cache_width, "kv_a_proj_with_mqa", bias=False)
        c_kv, k_pe = b.op("Split", kv, b.const([m.kv_rank, m.rope_dim]), axis=-1, outputs=2)
        c_kv = blocks.rms_norm(b, c_kv, m.kv_rank, "kv_a_layernorm", eps)
        k_pe = apply_rope(b, k_pe, cos, sin, m.rope_dim)
        latent = b.op("Unsqueeze", b.op("Concat", c_kv, k_pe, axis=-1), b.const([1]))  # [batch, 1, seq, 576]
        latent = blocks.append_cache(b, ctx["past_kv"][i][0], latent, f"present.{i}.latent")
        with b.scope("kv_b_proj"):  # W^UK absorbed into the query
            q_latent = per_head(b, q_nope, ctx, heads, m.nope_dim, m.kv_rank, "k_up_weight")
        query = b.op("Concat", q_latent, q_pe, axis=-1)  # [batch, seq, heads, 576]
        scores = b.op("MatMul", query, b.op("Transpose", latent, perm=[0, 1, 3, 2]))  # [batch, seq, heads, total]
        scores = b.op("Div", scores, b.scalar(m.qk_dim**0.5))
        keep = b.op("Unsqueeze", ctx["keep"][i], b.const([1]))  # [seq, 1, total]
        scores = b.op("Where", keep, scores, b.scalar(blocks.FLOAT32_MIN))
        context = b.op("MatMul", b.op("Softmax", scores, axis=-1), latent)  # [batch, seq, heads, 576]
        context = b.op("Slice", context, b.const([0]), b.const([m.kv_rank]), b.const([-1]))
        with b.scope("kv_b_proj"):  # W^UV absorbed into the output
            out = per_head(b, context, ctx, heads, m.kv_rank, m.v_dim, "v_up_weight")
        merged = b.op("Reshape", out, b.shape_of(batch, seq_1d, [heads * m.v_dim]))
        return blocks.linear(b, merged, heads * m.v_dim, hidden, "o_proj", bias=False)


def mla_parameters(hidden: int, heads: int, m: MlaSpec) -> int:
    """One layer's latent attention: the query path (q_proj, or q_a_proj, its norm and q_b_proj), kv_a_proj_with_mqa
    and its norm, kv_b_proj (the W^UK and W^UV halves) and o_proj."""
    query = hidden * m.q_rank + m.q_rank + m.q_rank * heads * m.qk_dim if m.q_rank else hidden * heads * m.qk_dim
    kv = hidden * m.cache_width + m.kv_rank + m.kv_rank * heads * (m.nope_dim + m.v_dim)
    return query + kv + heads * m.v_dim * hidden


def mla_weight_flops(hidden: int, heads: int, m: MlaSpec) -> int:
    """Multiply-adds of one token through the layer's weights, absorbed: the query path, kv_a, W^UK and W^UV on
    every head, o_proj (kv_b_proj's parameters once each)."""
    return mla_parameters(hidden, heads, m) - (m.q_rank + m.kv_rank)  # the two norms' weights are no GEMM
