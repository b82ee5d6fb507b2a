"""A Hugging Face config.json -> the model's ONNX graph (dims only), for the families people serve.

`config_model(config)` reads `model_type` and builds through a table: decoders (llama, mistral, qwen2, qwen3,
gemma, gemma2, phi3, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3) with hf_decoder (their experts and
latent attention read by hf_moe, every field through hf_fields), GPT-2 and BERT-style encoders with the built-in
builders (mapper/zoo/transformers.py). Symbolic dims are the built-ins': `batch`, `seq`, `past` (`batch`, `seq`
for an encoder). An unknown model_type, a missing or ill-typed field: one-line MapperError naming it.
Shipped configs (data/configs/*.json, sources in data/configs/SOURCES.md) map by path like a model file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import onnx

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.graph import ReleasedPrecision
from mapper.core.vocab import PlanDtype
from mapper.zoo.config_bounds import Implied, Probe, check_implied, encoder_parameters, implied_nodes, rope_table_bytes
from mapper.zoo.hf_decoder import DecoderSpec, build_decoder, parameters
from mapper.zoo.hf_fields import Fields
from mapper.zoo.hf_moe import LATENT_ATTENTION, MOE_READERS, check_moe, latent_attention
from mapper.zoo.mla import MlaSpec
from mapper.zoo.transformers import EncoderConfig, build_bert, build_gpt2

# The activations each family's MLP may name (config hidden_act / hidden_activation / activation_function).
SILU, GELU_TANH = ("silu", "swish"), ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")

ROPE_PAIR = 2  # RoPE rotates pairs of a head's channels: head_dim is even

# rope_scaling's type -> the fields its inverse frequencies read (transformers modeling_rope_utils). Another type
# (yarn, longrope) keeps the unscaled frequencies: scaling changes a constant's values, never the graph's work.
ROPE_SCALING_FIELDS = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def _rope_scaling(f: Fields) -> tuple[tuple[str, str | float], ...]:
    """The config's rope_scaling as (key, value) items: its type and the numbers that type reads, each checked."""
    scaling = f.optional("rope_scaling", dict, {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if not isinstance(kind, str):
        raise MapperError(f"{f.where}: rope_scaling's rope_type is {str(kind)[:40]!r}, not a name such as 'llama3'")
    needed = ROPE_SCALING_FIELDS.get(kind, ())
    sub = Fields(scaling, f"{f.where}: rope_scaling", f"rope_scaling of type {kind[:40]!r}")
    values = {key: sub.get(key, float) for key in needed}
    if kind == "llama3" and values["high_freq_factor"] <= values["low_freq_factor"]:
        raise MapperError(f"{f.where}: rope_scaling's high_freq_factor must be above its low_freq_factor")
    return (("rope_type", kind), *sorted(values.items())) if needed else ()  # another type: unscaled


@dataclass(frozen=True, slots=True)
class Traits:
    """What a decoder family fixes that its config does not say (each from the family's transformers modeling)."""

    qkv_bias: bool = False  # Qwen2: q/k/v projections carry biases (no config field says so)
    tied: bool = False  # tie_word_embeddings' default where the config leaves it out
    embed_scale: bool = False  # Gemma, Gemma-2: embeddings x sqrt(hidden)
    window_flag: bool = False  # Qwen2/3 ship sliding_window but use it only with use_sliding_window true
    fused_projections: bool = False  # Phi-3: qkv_proj and gate_up_proj
    qk_norm: bool = False  # Qwen3: q_norm and k_norm over each head
    gemma2: bool = False  # soft-capping, query_pre_attn_scalar, four norms a layer, windows on alternate layers


DECODER_TRAITS: dict[str, Traits] = {
    "llama": Traits(),
    "mistral": Traits(),
    "qwen2": Traits(qkv_bias=True, window_flag=True),
    "qwen3": Traits(window_flag=True, qk_norm=True),
    "gemma": Traits(tied=True, embed_scale=True),
    "gemma2": Traits(tied=True, embed_scale=True, gemma2=True),
    "phi3": Traits(fused_projections=True),
    "mixtral": Traits(),
    "qwen2_moe": Traits(qkv_bias=True, window_flag=True),
    "qwen3_moe": Traits(window_flag=True, qk_norm=True),
    "deepseek_v2": Traits(),
    "deepseek_v3": Traits(),
}
GEMMA2_SLIDING_PERIOD = 2  # Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2), layer 0 slides


def _gemma2(f: Fields, layers: int) -> dict:
    """Gemma-2's fields: the soft-caps, query_pre_attn_scalar, and its layer_types where the config has them
    (transformers >= 4.53 writes them; they must be the alternating pattern the model defines)."""
    types = f.optional("layer_types", list)
    expected = ["sliding_attention" if i % GEMMA2_SLIDING_PERIOD == 0 else "full_attention" for i in range(layers)]
    if types is not None and types != expected:
        raise MapperError(f"{f.where}: layer_types is not Gemma-2's sliding/full alternation; only that is built")
    return dict(
        sliding_period=GEMMA2_SLIDING_PERIOD,
        attn_softcap=f.optional("attn_logit_softcapping", float, 0.0),
        final_softcap=f.optional("final_logit_softcapping", float, 0.0),
        query_scale=f.optional("query_pre_attn_scalar", int, 0),
        sandwich_norms=True,
    )


def _decoder(f: Fields, family: str) -> DecoderSpec:
    traits = DECODER_TRAITS[family]
    hidden, heads, layers = f.get("hidden_size"), f.get("num_attention_heads"), f.get("num_hidden_layers")
    act = f.optional("hidden_activation", str) or f.optional("hidden_act", str, "silu")
    if act not in SILU + GELU_TANH:
        raise MapperError(f"{f.where}: hidden_act {act[:40]!r} is not one of {', '.join(SILU + GELU_TANH)}")
    window = f.optional("sliding_window", int)
    if traits.window_flag and not f.optional("use_sliding_window", bool, False):
        window = None  # Qwen2/3 ship sliding_window with use_sliding_window false: full attention
    mla = latent_attention(f) if family in LATENT_ATTENTION else None
    spec = DecoderSpec(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=f.optional("num_key_value_heads", int, heads),
        head_dim=mla.rope_dim if mla is not None else f.optional("head_dim", int, hidden // heads),
        ffn=f.get("intermediate_size"),
        vocab=f.get("vocab_size"),
        rope_theta=f.optional("rope_theta", float, 10000.0),
        norm_eps=f.optional("rms_norm_eps", float, 1e-6),
        rope_scaling=_rope_scaling(f),
        tied=f.optional("tie_word_embeddings", bool, traits.tied),
        qkv_bias=traits.qkv_bias or f.optional("attention_bias", bool, False),
        sliding_window=window,
        activation="silu" if act in SILU else "gelu_tanh",
        embed_scale=traits.embed_scale,
        experts=f.get("num_local_experts") if family == "mixtral" else 0,
        top_k=f.get("num_experts_per_tok") if family == "mixtral" else 0,
        fused_projections=traits.fused_projections,
        qk_norm=traits.qk_norm,
        moe=check_moe(f, MOE_READERS[family](f), layers) if family in MOE_READERS else None,
        mla=mla,
        mtp_layers=f.count("num_nextn_predict_layers"),
        **(_gemma2(f, layers) if traits.gemma2 else {}),
    )
    if spec.heads % spec.kv_heads:
        raise MapperError(f"{f.where}: num_attention_heads {heads} is not a multiple of num_key_value_heads")
    if spec.head_dim < ROPE_PAIR or spec.head_dim % ROPE_PAIR:
        raise MapperError(
            f"{f.where}: head_dim is {spec.head_dim}; rotary attention needs an even head_dim of 2 or more"
        )
    if spec.experts and spec.top_k > spec.experts:
        raise MapperError(f"{f.where}: num_experts_per_tok {spec.top_k} is over num_local_experts {spec.experts}")
    return spec


def _decoder_implied(c: DecoderSpec) -> Implied:
    def build(layers: int, experts: int) -> onnx.ModelProto:
        tiny = replace(
            c, layers=layers, hidden=8, heads=2, kv_heads=1 if c.heads > c.kv_heads else 2, head_dim=4, ffn=8, vocab=8
        )
        if c.moe is None:
            return build_decoder(replace(tiny, experts=experts, top_k=min(experts, 1)), "probe")
        shared = 8 if c.moe.shared_ffn else 0
        moe = replace(c.moe, experts=experts, top_k=1, ffn=8, shared_ffn=shared, dense_layers=0) if experts else None
        mla = MlaSpec(kv_rank=4, rope_dim=4, nope_dim=2, v_dim=2, q_rank=4 if c.mla.q_rank else 0) if c.mla else None
        return build_decoder(replace(tiny, moe=moe, mla=mla), "probe")

    experts = c.moe.experts if c.moe is not None else c.experts
    nodes = implied_nodes(Probe(build, c.layers, experts, c.moe.dense_layers if c.moe is not None else 0))
    fields = "num_hidden_layers x num_local_experts" if c.experts else "num_hidden_layers"
    return Implied(nodes, parameters(c), rope_table_bytes(c.head_dim), fields)


def _encoder(f: Fields, gpt2: bool) -> EncoderConfig:
    hidden = f.get("n_embd" if gpt2 else "hidden_size")
    c = EncoderConfig(
        layers=f.get("n_layer" if gpt2 else "num_hidden_layers"),
        hidden=hidden,
        heads=f.get("n_head" if gpt2 else "num_attention_heads"),
        ffn=f.optional("n_inner", int, 4 * hidden) if gpt2 else f.get("intermediate_size"),
        vocab=f.get("vocab_size"),
        max_positions=f.get("n_positions" if gpt2 else "max_position_embeddings"),
        type_vocab=0 if gpt2 else f.optional("type_vocab_size", int, 2),
        norm_eps=f.optional("layer_norm_epsilon", float, 1e-5) if gpt2 else f.optional("layer_norm_eps", float, 1e-12),
    )
    if c.hidden % c.heads:
        raise MapperError(f"{f.where}: the hidden size {c.hidden} is not a multiple of the {c.heads} attention heads")
    return c


def _encoder_implied(c: EncoderConfig, build: Callable[[EncoderConfig, str], onnx.ModelProto]) -> Implied:
    def tiny(layers: int, _experts: int) -> onnx.ModelProto:
        shrunk = replace(c, layers=layers, hidden=8, heads=2, ffn=8, vocab=8, max_positions=8, type_vocab=2)
        return build(shrunk, "probe")

    embeddings = c.vocab + c.max_positions + c.type_vocab
    pooler = build is build_bert
    params = encoder_parameters(c.layers, c.hidden, c.ffn, embeddings, pooler)
    return Implied(implied_nodes(Probe(tiny, c.layers)), params, 0, "num_hidden_layers" if pooler else "n_layer")


@dataclass(frozen=True, slots=True)
class Family:
    """How one model_type's config becomes a graph: its numbers read and checked, what they would build, the build."""

    read: Callable[[Fields], DecoderSpec | EncoderConfig]
    implied: Callable  # the spec -> Implied (config_bounds)
    build: Callable  # (the spec, the graph's name) -> the graph


def _decoder_family(family: str) -> Family:
    return Family(lambda f: _decoder(f, family), _decoder_implied, build_decoder)


# model_type -> its family. Llama 1, 2 and 3.x share "llama"; RoBERTa and DistilBERT-style encoders differ in
# names, not in the layer's work, but are left out until a config of theirs is checked.
FAMILIES: dict[str, Family] = {
    **{family: _decoder_family(family) for family in DECODER_TRAITS},
    "gpt2": Family(lambda f: _encoder(f, gpt2=True), lambda c: _encoder_implied(c, build_gpt2), build_gpt2),
    "bert": Family(lambda f: _encoder(f, gpt2=False), lambda c: _encoder_implied(c, build_bert), build_bert),
}


def decoder_spec(config: dict, where: str = "config") -> DecoderSpec:
    """The decoder numbers of a decoder family's config (for closed forms and tests)."""
    return _decoder(Fields(config, where), str(config.get("model_type")))


def _family(config: object, where: str) -> Family:
    if not isinstance(config, dict):
        raise MapperError(f"{where} is not a Hugging Face config (a JSON object with model_type)")
    family = config.get("model_type")
    found = FAMILIES.get(family) if isinstance(family, str) else None
    if found is None:
        raise MapperError(
            f"{where}: model_type {str(family)[:40]!r} is not one this tool builds; known: {', '.join(FAMILIES)}"
        )
    return found


def implied_by(config: dict, where: str = "config") -> Implied:
    """What the config would build (nodes, parameters, table bytes), computed from its numbers alone."""
    family = _family(config, where)
    return family.implied(family.read(Fields(config, where)))


def config_model(config: dict, where: str = "config") -> onnx.ModelProto:
    """The graph of a Hugging Face config (a parsed config.json), named after its _name_or_path if any. What it
    would build is checked against the limits first (config_bounds): a hostile config is refused unbuilt."""
    family = _family(config, where)
    spec = family.read(Fields(config, where))
    check_implied(family.implied(spec), where)
    source = config.get("_name_or_path")
    name = re.sub(r"[^A-Za-z0-9._-]", "", source.rsplit("/", 1)[-1])[:64] if isinstance(source, str) else ""
    return family.build(spec, name)  # no name: the file's stem names it (handle.py)


# A config's torch_dtype -> the precision its weights are published in. transformers writes it as "dtype" since
# v4.56 (PR #39782) and as "torch_dtype" before. float64 maps at fp32, the widest plan precision.
TORCH_DTYPES = {
    "float32": PlanDtype.FP32,
    "float16": PlanDtype.FP16,
    "bfloat16": PlanDtype.BF16,
    "float64": PlanDtype.FP32,
}
# A config without one is an old checkpoint's (bert-base-uncased, gpt2): transformers loads it at torch's default
# float32 unless told otherwise, and those checkpoints hold fp32 weights.
NO_TORCH_DTYPE = ReleasedPrecision(PlanDtype.FP32, "config has no torch_dtype: transformers loads it at float32")


# A quantization_config's quant_method -> the precision its weights are published in. DeepSeek-V3 ships FP8 e4m3
# weights with 128 x 128 block scales ("quant_method": "fp8") under a torch_dtype of bfloat16 (the dtype its
# unquantized tensors and activations take). Weight-only int4 methods (gptq, awq) have no plan dtype of their own.
QUANT_METHODS = {"fp8": PlanDtype.FP8}


def released_precision(config: dict, where: str = "config") -> ReleasedPrecision:
    """The precision a config's weights are published in: its quantization_config's where that names one
    (QUANT_METHODS), else its torch_dtype (or dtype), fp32 where it has none."""
    quantized = config.get("quantization_config")
    method = quantized.get("quant_method") if isinstance(quantized, dict) else None
    if isinstance(method, str) and method in QUANT_METHODS:
        return ReleasedPrecision(QUANT_METHODS[method], f"config quantization_config quant_method {method}")
    key = next((k for k in ("torch_dtype", "dtype") if config.get(k) is not None), None)
    if key is None:
        return NO_TORCH_DTYPE
    value = config[key]
    name = value.removeprefix("torch.") if isinstance(value, str) else None
    if name not in TORCH_DTYPES:
        raise MapperError(f"{where}: field {key!r} is {str(value)[:40]!r}, not one of {', '.join(TORCH_DTYPES)}")
    return ReleasedPrecision(TORCH_DTYPES[name], f"config {key} {name}")


def read_config(text: bytes, where: str) -> tuple[bytes, ReleasedPrecision]:
    """A config.json's bytes (at most MAX_CONFIG_BYTES) -> the serialized graph of its model and the precision
    its weights are published in."""
    if len(text) > limits.MAX_CONFIG_BYTES:
        raise MapperError(f"{where} is over {limits.limit_text('MAX_CONFIG_BYTES')}; a config.json is a few kB")
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MapperError(f"{where} is not valid JSON ({str(exc)[:80]}); give a Hugging Face config.json") from None
    data = config_model(config, where).SerializeToString()  # checks it is an object of a known model_type
    return data, released_precision(config, where)
