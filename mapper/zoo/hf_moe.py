"""The mixture-of-experts and latent-attention fields of a Hugging Face config: Qwen2-MoE, Qwen3-MoE,
DeepSeek-V2/V3 (zoo/moe_block.py builds the grouped block they read into, zoo/mla.py DeepSeek's attention).
"""

from __future__ import annotations

from collections.abc import Callable

from mapper.core.errors import MapperError
from mapper.zoo.hf_fields import Fields
from mapper.zoo.mla import MlaSpec
from mapper.zoo.moe_block import MoeSpec, Scoring

LATENT_ATTENTION = ("deepseek_v2", "deepseek_v3")  # families whose attention is MLA (zoo/mla.py)


def qwen_moe(f: Fields, family: str) -> MoeSpec:
    """Qwen2-MoE (num_experts, a gated shared expert of shared_expert_intermediate_size) and Qwen3-MoE (no
    shared expert); every layer sparse (decoder_sparse_step 1, no mlp_only_layers: the published checkpoints)."""
    if f.optional("decoder_sparse_step", int, 1) != 1 or f.optional("mlp_only_layers", list, []):
        raise MapperError(
            f"{f.where}: decoder_sparse_step and mlp_only_layers mix dense layers into the MoE ones; only configs"
            " with every layer sparse (decoder_sparse_step 1, mlp_only_layers []) are built"
        )
    experts = f.optional("num_experts", int) or f.get("num_local_experts")  # transformers 5 writes the latter
    shared = f.get("shared_expert_intermediate_size") if family == "qwen2_moe" else 0
    return MoeSpec(
        experts=experts,
        top_k=f.get("num_experts_per_tok"),
        ffn=f.get("moe_intermediate_size"),
        shared_ffn=shared,
        shared_gate=bool(shared),
        renormalize=f.optional("norm_topk_prob", bool, False),
    )


DEEPSEEK_SCORING = {"softmax": Scoring.SOFTMAX, "sigmoid": Scoring.SIGMOID}  # scoring_func
# topk_method: V2-Lite's plain top-k, V2's top-k within the best n_group groups, V3's bias-steered choice within
# groups; the groups say which experts a token may pick, not how many (left out: moe_block.py)
DEEPSEEK_TOPK = ("greedy", "group_limited_greedy", "noaux_tc")


def deepseek_moe(f: Fields) -> MoeSpec:
    """DeepSeek-V2/V3's MoE (modeling_deepseek): n_routed_experts of moe_intermediate_size, n_shared_experts of the
    same width run together as one, the first first_k_dense_replace layers dense; every layer after (moe_layer_freq
    1: the published checkpoints)."""
    if f.optional("moe_layer_freq", int, 1) != 1:
        raise MapperError(f"{f.where}: moe_layer_freq is not 1; only configs with every layer after the dense ones MoE")
    scoring, method = f.optional("scoring_func", str, "softmax"), f.optional("topk_method", str, "greedy")
    if scoring not in DEEPSEEK_SCORING or method not in DEEPSEEK_TOPK:
        raise MapperError(
            f"{f.where}: scoring_func {scoring[:40]!r} / topk_method {method[:40]!r} is not one of"
            f" {', '.join(DEEPSEEK_SCORING)} / {', '.join(DEEPSEEK_TOPK)}"
        )
    ffn = f.get("moe_intermediate_size")
    return MoeSpec(
        experts=f.get("n_routed_experts"),
        top_k=f.get("num_experts_per_tok"),
        ffn=ffn,
        shared_ffn=f.count("n_shared_experts") * ffn,
        scoring=DEEPSEEK_SCORING[scoring],
        renormalize=f.optional("norm_topk_prob", bool, False),
        routed_scale=f.optional("routed_scaling_factor", float, 1.0),
        dense_layers=f.count("first_k_dense_replace"),
    )


def latent_attention(f: Fields) -> MlaSpec:
    """DeepSeek's MLA widths: kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim, q_lora_rank (null:
    one q_proj)."""
    return MlaSpec(
        kv_rank=f.get("kv_lora_rank"),
        rope_dim=f.get("qk_rope_head_dim"),
        nope_dim=f.get("qk_nope_head_dim"),
        v_dim=f.get("v_head_dim"),
        q_rank=f.count("q_lora_rank"),
    )


# model_type -> how its grouped mixture of experts is read (the other decoders' MLP is dense, or Mixtral's)
MOE_READERS: dict[str, Callable[[Fields], MoeSpec]] = {
    "qwen2_moe": lambda f: qwen_moe(f, "qwen2_moe"),
    "qwen3_moe": lambda f: qwen_moe(f, "qwen3_moe"),
    "deepseek_v2": deepseek_moe,
    "deepseek_v3": deepseek_moe,
}


def check_moe(f: Fields, m: MoeSpec, layers: int) -> MoeSpec:
    if m.top_k > m.experts:
        raise MapperError(f"{f.where}: num_experts_per_tok {m.top_k} is over the {m.experts} routed experts")
    if m.dense_layers > layers:
        raise MapperError(f"{f.where}: first_k_dense_replace {m.dense_layers} is over num_hidden_layers {layers}")
    return m
