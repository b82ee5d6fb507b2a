"""Built-in Mixtral-8x7B-shaped decoder: the Hugging Face config path's decoder (zoo/hf_decoder.py) at
Mixtral's numbers, so the built-in and `data/configs/mixtral-8x7b.json` are one graph: GQA attention and,
in each layer, the sparse mixture of experts of zoo/moe_block.py (top-2 of 8 SwiGLU experts).
"""

from __future__ import annotations

import onnx

from mapper.zoo.hf_decoder import DecoderSpec, build_decoder

# HF mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 key/value heads,
# intermediate 14336, vocab 32000, num_local_experts 8, num_experts_per_tok 2, rope_theta 1e6,
# rms_norm_eps 1e-5, sliding_window null, untied embeddings. 46,702,792,704 params.
MIXTRAL_8X7B = DecoderSpec(
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    ffn=14336,
    vocab=32000,
    rope_theta=1e6,
    experts=8,
    top_k=2,
)


def build_mixtral_8x7b() -> onnx.ModelProto:
    """Mixtral (Jiang et al. 2024, "Mixtral of Experts"; transformers/models/mixtral/modeling_mixtral.py)."""
    return build_decoder(MIXTRAL_8X7B, "mixtral-8x7b")
