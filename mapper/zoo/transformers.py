"""Built-in transformers: BERT-base (encoder), GPT-2 small (decoder with KV cache), ViT-B/16.

Each is a config (HF / torchvision values) plus a builder that composes `blocks`; the layer
loop emits per-layer nodes the way the PyTorch exporter traces HF's eager modules.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from mapper.zoo import blocks
from mapper.zoo.builder import FLOAT, INT64, Dim, GraphBuilder


@dataclass(frozen=True, slots=True)
class EncoderConfig:
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int = 0
    max_positions: int = 0
    type_vocab: int = 0
    norm_eps: float = 1e-12

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# HF bert-base-uncased config.json: 12 layers, hidden 768, 12 heads, intermediate 3072,
# vocab 30522, max_position_embeddings 512, type_vocab_size 2, layer_norm_eps 1e-12.
BERT_BASE = EncoderConfig(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, max_positions=512, type_vocab=2)
# HF gpt2 config.json: n_layer 12, n_embd 768, n_head 12, n_inner 4*768, vocab 50257, n_positions 1024, eps 1e-5.
GPT2_SMALL = EncoderConfig(layers=12, hidden=768, heads=12, ffn=3072, vocab=50257, max_positions=1024, norm_eps=1e-5)
# torchvision vit_b_16 (= HF google/vit-base-patch16-224): 12 layers, 768, 12 heads, MLP 3072, LN eps 1e-6.
VIT_B16 = EncoderConfig(layers=12, hidden=768, heads=12, ffn=3072, norm_eps=1e-6)
VIT_IMAGE, VIT_PATCH, VIT_CLASSES = 224, 16, 1000


def self_attention(
    b: GraphBuilder, qkv: tuple[str, str, str], batch: str, seq: str, c: EncoderConfig, additive_mask: str | None = None
) -> str:
    """Heads split, eager attention, heads merged: query, key and value [batch, seq, hidden] in, one out."""
    q, k, v = (blocks.split_heads(b, t, batch, seq, c.heads, c.head_dim) for t in qkv)
    context = blocks.scaled_dot_product(b, q, k, v, c.head_dim, additive_mask=additive_mask)
    return blocks.merge_heads(b, context, batch, seq, c.hidden)


# -- BERT ---------------------------------------------------------------------------------------
def build_bert(
    c: EncoderConfig = BERT_BASE, name: str = "bert-base", inline_weights: bool = False, pooler: bool = True
) -> onnx.ModelProto:
    """BERT-base uncased (HF BertModel, 109,482,240 params with the pooler).

    Reference: HF bert-base-uncased config.json and transformers/models/bert/modeling_bert.py;
    Devlin et al. 2019. Post-LN encoder, GELU via Erf, token_type_ids fixed at 0 (ConstantOfShape,
    as HF fills them when none are passed). Inputs input_ids, attention_mask [batch, seq] int64;
    outputs last_hidden_state [batch, seq, 768] and pooler_output [batch, 768].
    """
    b = GraphBuilder(name, inline_weights=inline_weights)
    ids = b.input("input_ids", ["batch", "seq"], INT64)
    mask = blocks.padding_mask(b, b.input("attention_mask", ["batch", "seq"], INT64))
    batch, seq = b.dims_1d(ids, [0, 1])
    with b.scope("embeddings"):
        position_ids = b.op("Unsqueeze", b.op("Range", b.const(0), b.dim(ids, 1), b.const(1)), b.const([0]))
        token_types = b.op(
            "ConstantOfShape", b.op("Shape", ids), value=onnx.helper.make_tensor("value", INT64, [1], [0])
        )
        x = b.op(
            "Add",
            b.op("Gather", b.weight("word_embeddings.weight", [c.vocab, c.hidden]), ids),
            b.op("Gather", b.weight("token_type_embeddings.weight", [c.type_vocab, c.hidden]), token_types),
        )
        x = b.op(
            "Add", x, b.op("Gather", b.weight("position_embeddings.weight", [c.max_positions, c.hidden]), position_ids)
        )
        x = blocks.layer_norm(b, x, c.hidden, "LayerNorm", c.norm_eps)
    for i in range(c.layers):
        with b.scope(f"encoder.layer.{i}"):
            with b.scope("attention"):
                q, k, v = (blocks.linear(b, x, c.hidden, c.hidden, f"self.{n}") for n in ("query", "key", "value"))
                attn = self_attention(b, (q, k, v), batch, seq, c, additive_mask=mask)
                attn = blocks.linear(b, attn, c.hidden, c.hidden, "output.dense")
                x = blocks.layer_norm(b, b.op("Add", attn, x), c.hidden, "output.LayerNorm", c.norm_eps)
            h = blocks.gelu_erf(b, blocks.linear(b, x, c.hidden, c.ffn, "intermediate.dense"))
            h = blocks.linear(b, h, c.ffn, c.hidden, "output.dense")
            x = blocks.layer_norm(b, b.op("Add", h, x), c.hidden, "output.LayerNorm", c.norm_eps)
    b.output(x, "last_hidden_state", ["batch", "seq", c.hidden])
    if pooler:
        first = b.op("Gather", x, b.const(0), axis=1)
        b.output(
            b.op("Tanh", blocks.gemm(b, first, c.hidden, c.hidden, "pooler.dense")),
            "pooler_output",
            ["batch", c.hidden],
        )
    return b.build(build_bert.__doc__)


# -- GPT-2 --------------------------------------------------------------------------------------
def build_gpt2(
    c: EncoderConfig = GPT2_SMALL, name: str = "gpt2-small", inline_weights: bool = False
) -> onnx.ModelProto:
    """GPT-2 small (HF GPT2LMHeadModel, 124,439,808 params, LM head tied to wte).

    Reference: HF gpt2 config.json and transformers/models/gpt2/modeling_gpt2.py; Radford et al.
    2019. Pre-LN decoder, fused c_attn split into q/k/v, gelu_new (Tanh form), causal mask via
    Trilu(k=past) + Where. Inputs input_ids [batch, seq] and past_key_values.{i}.key/.value
    [batch, 12, past, 64]; outputs logits [batch, seq, 50257] and present.{i}.key/.value.
    The tied head is a Gemm(transB=1) on wte itself, so the weight appears once.
    """
    b = GraphBuilder(name, inline_weights=inline_weights)
    ids = b.input("input_ids", ["batch", "seq"], INT64)
    cache_shape: list[Dim] = ["batch", c.heads, "past", c.head_dim]
    past_kv = [
        tuple(b.input(f"past_key_values.{i}.{t}", cache_shape) for t in ("key", "value")) for i in range(c.layers)
    ]
    batch, seq_1d = b.dims_1d(ids, [0, 1])
    seq, past, total = blocks.cache_lengths(b, ids, past_kv[0][0])
    keep = blocks.causal_keep_mask(b, seq, past, total)
    wte = b.weight("transformer.wte.weight", [c.vocab, c.hidden])
    position_ids = b.op("Unsqueeze", blocks.positions(b, past, total), b.const([0]))
    x = b.op(
        "Add",
        b.op("Gather", wte, ids),
        b.op("Gather", b.weight("transformer.wpe.weight", [c.max_positions, c.hidden]), position_ids),
    )
    for i in range(c.layers):
        with b.scope(f"transformer.h.{i}"):
            h = blocks.layer_norm(b, x, c.hidden, "ln_1", c.norm_eps)
            with b.scope("attn"):
                qkv = blocks.split_fused_qkv(b, blocks.linear(b, h, c.hidden, 3 * c.hidden, "c_attn"), c.hidden)
                q, k, v = (blocks.split_heads(b, t, batch, seq_1d, c.heads, c.head_dim) for t in qkv)
                k = blocks.append_cache(b, past_kv[i][0], k, f"present.{i}.key")
                v = blocks.append_cache(b, past_kv[i][1], v, f"present.{i}.value")
                context = blocks.scaled_dot_product(b, q, k, v, c.head_dim, keep_mask=keep)
                attn = blocks.linear(
                    b, blocks.merge_heads(b, context, batch, seq_1d, c.hidden), c.hidden, c.hidden, "c_proj"
                )
            x = b.op("Add", x, attn)
            h = blocks.layer_norm(b, x, c.hidden, "ln_2", c.norm_eps)
            with b.scope("mlp"):
                h = blocks.gelu_tanh(b, blocks.linear(b, h, c.hidden, c.ffn, "c_fc"))
                x = b.op("Add", x, blocks.linear(b, h, c.ffn, c.hidden, "c_proj"))
    x = blocks.layer_norm(b, x, c.hidden, "transformer.ln_f", c.norm_eps)
    with b.scope("lm_head"):
        flat = b.op("Reshape", x, b.const([-1, c.hidden]))
        logits = b.op("Gemm", flat, wte, transB=1)
        logits = b.op("Reshape", logits, b.shape_of(batch, seq_1d, [c.vocab]))
    b.output(logits, "logits", ["batch", "seq", c.vocab])
    for i in range(c.layers):
        for t in ("key", "value"):
            b.output(f"present.{i}.{t}", f"present.{i}.{t}", ["batch", c.heads, None, c.head_dim])
    return b.build(build_gpt2.__doc__)


# -- ViT ----------------------------------------------------------------------------------------
def build_vit(
    c: EncoderConfig = VIT_B16,
    name: str = "vit-b16",
    inline_weights: bool = False,
    image: int = VIT_IMAGE,
    patch: int = VIT_PATCH,
    classes: int = VIT_CLASSES,
) -> onnx.ModelProto:
    """ViT-B/16 at 224x224 (torchvision vit_b_16, 86,567,656 params; 197 tokens inside).

    Reference: torchvision/models/vision_transformer.py and HF google/vit-base-patch16-224 config;
    Dosovitskiy et al. 2021. Patch embed is a 16x16 stride-16 Conv, class token Concat, learned
    position embedding Add, pre-LN encoder (MultiheadAttention's fused in_proj split into q/k/v),
    head on the class token. Input pixel_values [batch, 3, 224, 224]; output logits [batch, 1000].
    """
    b = GraphBuilder(name, inline_weights=inline_weights)
    pixels = b.input("pixel_values", ["batch", 3, image, image], FLOAT)
    tokens = (image // patch) ** 2 + 1
    with b.scope("conv_proj"):
        x = b.op(
            "Conv",
            pixels,
            b.weight("weight", [c.hidden, 3, patch, patch]),
            b.weight("bias", [c.hidden]),
            kernel_shape=[patch, patch],
            strides=[patch, patch],
        )
    (batch,) = b.dims_1d(pixels, [0])
    x = b.op("Transpose", b.op("Reshape", x, b.shape_of(batch, [c.hidden, -1])), perm=[0, 2, 1])
    class_token = b.op("Expand", b.weight("class_token", [1, 1, c.hidden]), b.shape_of(batch, [1, 1]))
    x = b.op("Concat", class_token, x, axis=1)
    with b.scope("encoder"):
        x = b.op("Add", x, b.weight("pos_embedding", [1, tokens, c.hidden]))
        (seq,) = b.dims_1d(x, [1])
        for i in range(c.layers):
            with b.scope(f"layers.encoder_layer_{i}"):
                h = blocks.layer_norm(b, x, c.hidden, "ln_1", c.norm_eps)
                with b.scope("self_attention"):
                    qkv = b.op(
                        "Add",
                        b.op("MatMul", h, b.weight("in_proj_weight", [c.hidden, 3 * c.hidden])),
                        b.weight("in_proj_bias", [3 * c.hidden]),
                    )
                    attn = self_attention(b, blocks.split_fused_qkv(b, qkv, c.hidden), batch, seq, c)
                    attn = blocks.linear(b, attn, c.hidden, c.hidden, "out_proj")
                x = b.op("Add", x, attn)
                h = blocks.layer_norm(b, x, c.hidden, "ln_2", c.norm_eps)
                h = blocks.gelu_erf(b, blocks.linear(b, h, c.hidden, c.ffn, "mlp.0"))
                x = b.op("Add", x, blocks.linear(b, h, c.ffn, c.hidden, "mlp.3"))
        x = blocks.layer_norm(b, x, c.hidden, "ln", c.norm_eps)
    first = b.op("Gather", x, b.const(0), axis=1)
    b.output(blocks.gemm(b, first, c.hidden, classes, "heads.head"), "logits", ["batch", classes])
    return b.build(build_vit.__doc__)
