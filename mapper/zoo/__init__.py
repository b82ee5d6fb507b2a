"""The built-in model zoo: real-size ONNX graphs generated here with onnx.helper, never downloaded.

Weights are external data pointing at "<name>.weights.bin", a file that does not exist: the graphs
carry dims only (Llama-2-70B serializes to well under 5 MB) and the importer never opens it.
Graph input names: CNNs and ViT "pixel_values"; BERT "input_ids", "attention_mask"; decoders
"input_ids" plus "past_key_values.{i}.key"/".value" (outputs "logits", "present.{i}.key"/".value").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from mapper.core.errors import MapperError
from mapper.core.graph import ReleasedPrecision
from mapper.core.vocab import PlanDtype
from mapper.zoo import cnn, llama, mixtral, transformers

BATCH = "images per batch"
TOKENS_BATCH = "sequences per batch"
ENCODER_SEQ = "tokens per sequence"
DECODER_SEQ = "new tokens this step (prompt length at prefill, 1 per decode step)"
DECODER_PAST = "tokens already in the KV cache (0 at prefill, context length at decode)"

# The precision each built-in is published in (`--dtype auto` maps at it), each with where it is read. The graphs
# themselves carry fp32 tensors: they are dims only, and their element type says nothing of the release.
TORCHVISION = ReleasedPrecision(PlanDtype.FP32, "built-in table: torchvision's ImageNet weights are fp32")
META_LLAMA2 = ReleasedPrecision(
    PlanDtype.FP16, "built-in table: Meta's Llama-2 release is fp16 (meta-llama/Llama-2-*-hf torch_dtype float16)"
)


@dataclass(frozen=True, slots=True)
class ZooEntry:
    description: str
    build: Callable[[], onnx.ModelProto]
    released: ReleasedPrecision
    dims: dict[str, str] = field(default_factory=dict)


_ZOO: dict[str, ZooEntry] = {
    "resnet50": ZooEntry(
        "ResNet-50 v1.5 (torchvision), 224x224, Conv+BN+Relu, 25.6M params",
        cnn.build_resnet50,
        TORCHVISION,
        {"batch": BATCH},
    ),
    "mobilenetv2": ZooEntry(
        "MobileNetV2 1.0 (torchvision), 224x224, depthwise convs, ReLU6, 3.5M params",
        cnn.build_mobilenetv2,
        TORCHVISION,
        {"batch": BATCH},
    ),
    "alexnet": ZooEntry(
        "AlexNet (torchvision), 224x224, five Conv+Relu with biases, three Gemms, 61.1M params",
        cnn.build_alexnet,
        TORCHVISION,
        {"batch": BATCH},
    ),
    "bert-base": ZooEntry(
        "BERT-base uncased encoder with pooler (HF), 12 layers x 768, 109.5M params",
        transformers.build_bert,
        ReleasedPrecision(
            PlanDtype.FP32, "built-in table: bert-base-uncased's HF checkpoint is fp32 (440 MB for 110M parameters)"
        ),
        {"batch": TOKENS_BATCH, "seq": ENCODER_SEQ},
    ),
    "gpt2-small": ZooEntry(
        "GPT-2 small decoder with KV cache (HF), 12 layers x 768, tied LM head, 124.4M params",
        transformers.build_gpt2,
        ReleasedPrecision(PlanDtype.FP32, "built-in table: gpt2's HF checkpoint is fp32 (548 MB for 124M parameters)"),
        {"batch": TOKENS_BATCH, "seq": DECODER_SEQ, "past": DECODER_PAST + "; past + seq <= 1024"},
    ),
    "vit-b16": ZooEntry(
        "ViT-B/16 (torchvision), 224x224, 197 tokens, 12 layers x 768, 86.6M params",
        transformers.build_vit,
        TORCHVISION,
        {"batch": BATCH},
    ),
    "llama2-7b": ZooEntry(
        "Llama-2-7B decoder with KV cache (HF), 32 layers x 4096, 6.74B params",
        llama.build_llama2_7b,
        META_LLAMA2,
        {"batch": TOKENS_BATCH, "seq": DECODER_SEQ, "past": DECODER_PAST},
    ),
    "llama2-70b": ZooEntry(
        "Llama-2-70B decoder with KV cache and GQA (64 heads, 8 KV heads), 80 layers x 8192, 68.98B params",
        llama.build_llama2_70b,
        META_LLAMA2,
        {"batch": TOKENS_BATCH, "seq": DECODER_SEQ, "past": DECODER_PAST},
    ),
    "mixtral-8x7b": ZooEntry(
        "Mixtral-8x7B decoder (HF): top-2 of 8 SwiGLU experts per layer, GQA (8 KV heads), 32 layers x 4096,"
        " 46.70B params",
        mixtral.build_mixtral_8x7b,
        ReleasedPrecision(
            PlanDtype.BF16, "built-in table: mistralai/Mixtral-8x7B-v0.1's config torch_dtype is bfloat16"
        ),
        {"batch": TOKENS_BATCH, "seq": DECODER_SEQ, "past": DECODER_PAST},
    ),
}
ZOO_NAMES = tuple(_ZOO)
SOURCE = "architecture reference"


def list_zoo() -> list[dict]:
    """One dict per built-in model: name, description, symbolic dims with their meaning, source."""
    return [
        {"name": name, "description": entry.description, "dims": dict(entry.dims), "source": SOURCE}
        for name, entry in _ZOO.items()
    ]


def released_precision(name: str) -> ReleasedPrecision:
    """The precision the built-in model `name` is published in, with its source (the table above)."""
    return _entry(name).released


def _entry(name: str) -> ZooEntry:
    entry = _ZOO.get(name)
    if entry is None:
        raise MapperError(f"unknown built-in model {name!r}; choose one of: {', '.join(ZOO_NAMES)}")
    return entry


def build_zoo_model(name: str) -> onnx.ModelProto:
    """A fresh ModelProto of the built-in model `name` (external-data weights, dims only)."""
    return _entry(name).build()


def zoo_model_bytes(name: str) -> bytes:
    """The serialized model (0.01-0.2 s to build; a model handle keeps the bytes, so build once per handle)."""
    return build_zoo_model(name).SerializeToString()


def zoo_model(name: str) -> tuple[onnx.ModelProto, bytes]:
    """The built model and its bytes, serialized once: a handle keeps both and need not parse its own bytes
    back (12 ms on Llama-2-70B); parsing them gives an equal message."""
    model = build_zoo_model(name)
    return model, model.SerializeToString()


__all__ = ["ZOO_NAMES", "build_zoo_model", "list_zoo", "released_precision", "zoo_model", "zoo_model_bytes"]
