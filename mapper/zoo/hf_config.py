"""A Hugging Face config.json -> the model's ONNX graph (dims only), for the families people serve.

`config_model(config)` reads `model_type` and builds through a table: decoders (llama, mistral, qwen2,
gemma, mixtral) with hf_decoder, GPT-2 and BERT-style encoders with the built-in builders
(mapper/zoo/transformers.py). Symbolic dims are the built-ins': `batch`, `seq`, `past` (`batch`, `seq`
for an encoder). An unknown model_type, a missing or ill-typed field: one-line MapperError naming it.
Shipped configs (data/configs/*.json, sources in data/configs/SOURCES.md) map by path like a model file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import onnx

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.zoo.hf_decoder import DecoderSpec, build_decoder
from mapper.zoo.transformers import EncoderConfig, build_bert, build_gpt2

# The activations each family's MLP may name (config hidden_act / hidden_activation / activation_function).
SILU, GELU_TANH = ("silu", "swish"), ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")


class _Fields:
    """The config's fields, read with the one error a person can act on."""

    def __init__(self, config: dict, where: str):
        self.config, self.where = config, where

    def get(self, key: str, kind: type = int, default=None):
        value = self.config.get(key, default)
        if value is None and default is None:
            raise MapperError(f"{self.where}: field {key!r} is missing; a {self.kind_name()} config has it")
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok or (kind is int and not 0 < value <= limits.MAX_DIM):
            raise MapperError(f"{self.where}: field {key!r} is {str(value)[:40]!r}, not a valid {kind.__name__}")
        return value

    def optional(self, key: str, kind: type = int, default=None):
        return default if self.config.get(key) is None else self.get(key, kind)

    def kind_name(self) -> str:
        return str(self.config.get("model_type"))


def _decoder(f: _Fields, family: str) -> DecoderSpec:
    hidden, heads = f.get("hidden_size"), f.get("num_attention_heads")
    act = f.optional("hidden_activation", str) or f.optional("hidden_act", str, "silu")
    if act not in SILU + GELU_TANH:
        raise MapperError(f"{f.where}: hidden_act {act[:40]!r} is not one of {', '.join(SILU + GELU_TANH)}")
    scaling = f.optional("rope_scaling", dict, {})
    window = f.optional("sliding_window", int)
    if family == "qwen2" and not f.optional("use_sliding_window", bool, False):
        window = None  # Qwen2 ships sliding_window with use_sliding_window false: full attention
    spec = DecoderSpec(
        layers=f.get("num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=f.optional("num_key_value_heads", int, heads),
        head_dim=f.optional("head_dim", int, hidden // heads),
        ffn=f.get("intermediate_size"),
        vocab=f.get("vocab_size"),
        rope_theta=f.optional("rope_theta", float, 10000.0),
        norm_eps=f.optional("rms_norm_eps", float, 1e-6),
        rope_scaling=tuple(sorted((str(k), v) for k, v in scaling.items())),
        tied=f.optional("tie_word_embeddings", bool, family == "gemma"),
        qkv_bias=family == "qwen2" or f.optional("attention_bias", bool, False),
        sliding_window=window,
        activation="silu" if act in SILU else "gelu_tanh",
        embed_scale=family == "gemma",
        experts=f.get("num_local_experts") if family == "mixtral" else 0,
        top_k=f.get("num_experts_per_tok") if family == "mixtral" else 0,
    )
    if spec.heads % spec.kv_heads:
        raise MapperError(f"{f.where}: num_attention_heads {heads} is not a multiple of num_key_value_heads")
    if spec.experts and spec.top_k > spec.experts:
        raise MapperError(f"{f.where}: num_experts_per_tok {spec.top_k} is over num_local_experts {spec.experts}")
    return spec


def _gpt2(f: _Fields, name: str) -> onnx.ModelProto:
    hidden = f.get("n_embd")
    c = EncoderConfig(
        layers=f.get("n_layer"),
        hidden=hidden,
        heads=f.get("n_head"),
        ffn=f.optional("n_inner", int, 4 * hidden),
        vocab=f.get("vocab_size"),
        max_positions=f.get("n_positions"),
        norm_eps=f.optional("layer_norm_epsilon", float, 1e-5),
    )
    return build_gpt2(c, name)


def _bert(f: _Fields, name: str) -> onnx.ModelProto:
    c = EncoderConfig(
        layers=f.get("num_hidden_layers"),
        hidden=f.get("hidden_size"),
        heads=f.get("num_attention_heads"),
        ffn=f.get("intermediate_size"),
        vocab=f.get("vocab_size"),
        max_positions=f.get("max_position_embeddings"),
        type_vocab=f.optional("type_vocab_size", int, 2),
        norm_eps=f.optional("layer_norm_eps", float, 1e-12),
    )
    return build_bert(c, name)


def _decoder_builder(family: str) -> Callable[[_Fields, str], onnx.ModelProto]:
    return lambda f, name: build_decoder(_decoder(f, family), name)


# model_type -> builder. Llama 1, 2 and 3 share "llama"; RoBERTa and DistilBERT-style encoders differ in
# names, not in the layer's work, but are left out until a config of theirs is checked.
FAMILIES: dict[str, Callable[[_Fields, str], onnx.ModelProto]] = {
    **{family: _decoder_builder(family) for family in ("llama", "mistral", "qwen2", "gemma", "mixtral")},
    "gpt2": _gpt2,
    "bert": _bert,
}


def decoder_spec(config: dict, where: str = "config") -> DecoderSpec:
    """The decoder numbers of a llama/mistral/qwen2/gemma/mixtral config (for closed forms and tests)."""
    return _decoder(_Fields(config, where), str(config.get("model_type")))


def config_model(config: dict, where: str = "config") -> onnx.ModelProto:
    """The graph of a Hugging Face config (a parsed config.json), named after its _name_or_path if any."""
    if not isinstance(config, dict):
        raise MapperError(f"{where} is not a Hugging Face config (a JSON object with model_type)")
    family = config.get("model_type")
    builder = FAMILIES.get(family) if isinstance(family, str) else None
    if builder is None:
        raise MapperError(
            f"{where}: model_type {str(family)[:40]!r} is not one this tool builds; known: {', '.join(FAMILIES)}"
        )
    source = config.get("_name_or_path")
    name = re.sub(r"[^A-Za-z0-9._-]", "", source.rsplit("/", 1)[-1])[:64] if isinstance(source, str) else ""
    return builder(_Fields(config, where), name)  # no name: the file's stem names it (handle.py)


def config_model_bytes(text: bytes, where: str) -> bytes:
    """A config.json's bytes (at most MAX_CONFIG_BYTES) -> the serialized graph of its model."""
    if len(text) > limits.MAX_CONFIG_BYTES:
        raise MapperError(f"{where} is over {limits.limit_text('MAX_CONFIG_BYTES')}; a config.json is a few kB")
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MapperError(f"{where} is not valid JSON ({str(exc)[:80]}); give a Hugging Face config.json") from None
    return config_model(config, where).SerializeToString()
