"""`--dtype auto` maps a model at the precision it is published in: a built-in's table row (mapper/zoo), a
Hugging Face config's torch_dtype, an ONNX file's own tensors; caveats compare a plan against that precision."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import mapper
from mapper.core.errors import MapperError
from mapper.core.graph import FILE_TENSORS, ReleasedPrecision
from mapper.core.options import PlanOptions
from mapper.core.vocab import PlanDtype
from mapper.handle import open_model
from mapper.pipeline import choose_dtype, map_workload
from mapper.plan.precision import released_precision
from mapper.report.document import mapping_document
from mapper.zoo.hf_config import read_config
from mapper.zoo.hf_config import released_precision as config_precision
from tests.conftest import make_model, tensor, weight

CONFIGS = Path(__file__).parent.parent / "data" / "configs"
LLAMA3_8B = CONFIGS / "llama-3-8b.json"

# Each built-in's published precision: Meta released Llama-2 in fp16 (meta-llama/Llama-2-*-hf torch_dtype float16),
# Mistral AI Mixtral-8x7B in bf16 (its config's torch_dtype), torchvision and the HF BERT/GPT-2 checkpoints in fp32.
BUILTIN_RELEASED = {
    "resnet50": "fp32",
    "mobilenetv2": "fp32",
    "alexnet": "fp32",
    "bert-base": "fp32",
    "gpt2-small": "fp32",
    "vit-b16": "fp32",
    "llama2-7b": "fp16",
    "llama2-70b": "fp16",
    "mixtral-8x7b": "bf16",
}


@pytest.fixture(scope="module")
def a100():
    return mapper.load_hardware("a100-sxm-80gb")


def test_every_builtin_has_a_released_precision():
    assert set(BUILTIN_RELEASED) == set(mapper.ZOO_NAMES)


@pytest.mark.parametrize("name", sorted(BUILTIN_RELEASED))
def test_builtin_auto_maps_at_its_released_precision(name, a100):
    released = open_model(name).released
    assert released.dtype == BUILTIN_RELEASED[name]
    assert released.source.startswith("built-in table: ")
    assert choose_dtype(released, a100, PlanOptions()) == (BUILTIN_RELEASED[name], [])


def test_llama3_config_maps_at_bf16(a100):
    handle = open_model(LLAMA3_8B)
    assert handle.released == ReleasedPrecision(PlanDtype.BF16, "config torch_dtype bfloat16")
    assert pickle.loads(pickle.dumps(handle)).released == handle.released  # reopened from its bytes, it keeps it
    uploaded = open_model(LLAMA3_8B.read_bytes())
    assert uploaded.released == handle.released
    assert choose_dtype(handle.released, a100, PlanOptions())[0] == "bf16"


@pytest.mark.parametrize(
    "fields, dtype, source",
    [
        ({"torch_dtype": "float16"}, "fp16", "config torch_dtype float16"),
        ({"torch_dtype": "float32"}, "fp32", "config torch_dtype float32"),
        ({"dtype": "bfloat16"}, "bf16", "config dtype bfloat16"),  # transformers >= 4.56 writes "dtype"
        ({}, "fp32", "config has no torch_dtype: transformers loads it at float32"),
    ],
)
def test_config_torch_dtype(fields, dtype, source):
    config = {k: v for k, v in json.loads(LLAMA3_8B.read_text()).items() if k != "torch_dtype"} | fields
    _, released = read_config(json.dumps(config).encode(), "config.json")
    assert (released.dtype, released.source) == (dtype, source)


def test_an_unknown_torch_dtype_is_named():
    with pytest.raises(MapperError, match="'torch_dtype' is 'int3'"):
        config_precision({"torch_dtype": "int3"})


def test_an_exported_file_keeps_its_tensors_dtype(tmp_path):
    """A built-in written out is a file: its fp32 tensors say its precision, not the built-in's table."""
    path = tmp_path / "llama2-7b.onnx"
    path.write_bytes(mapper.zoo_model_bytes("llama2-7b"))
    handle = open_model(path)
    assert handle.released is None
    graph = handle.bind({"past": 0}, batch=1, seq=1).graph
    assert released_precision(graph) == ReleasedPrecision(PlanDtype.FP32, FILE_TENSORS)


def test_an_fp16_file_maps_at_fp16(tmp_path, a100):
    data = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [tensor("x", [64, 256], TensorProto.FLOAT16)],
        [tensor("y", [64, 256], TensorProto.FLOAT16)],
        [weight("w", (256, 256), np.float16)],
    )
    result = map_workload(open_model(data).bind(), a100)
    assert mapping_document(result)["precision"] == {"dtype": "fp16", "released": "fp16", "source": FILE_TENSORS}


def test_llama2_7b_fits_an_a100_at_auto(a100):
    """Batch 32, 2048 tokens cached, one new: 6.74B fp16 weights (13.48 GB) and a KV cache of 32 layers x K and V
    x 32 sequences x 2049 positions x 4096 x 2 bytes (34.38 GB) fit 80 GB; at fp32 it was short by 17.9 GB."""
    workload = open_model("llama2-7b").bind({"past": 2048}, batch=32, seq=1)
    result = map_workload(workload, a100)
    memory = result.memory
    assert memory.fits
    assert memory.weight_bytes == pytest.approx(6_738_415_616 * 2, rel=1e-4)  # HF count; the graph adds constants
    assert memory.kv_cache_bytes == pytest.approx(32 * 2 * 32 * 2049 * 4096 * 2)
    assert memory.per_device_bytes == pytest.approx(48.9e9, rel=0.01)
    assert mapping_document(result)["precision"] == {
        "dtype": "fp16",
        "released": "fp16",
        "source": "built-in table: Meta's Llama-2 release is fp16 (meta-llama/Llama-2-*-hf torch_dtype float16)",
    }


@pytest.mark.parametrize(
    "dtype, words",
    [
        ("int8", "Runs at int8, below the model's released bf16 (config torch_dtype bfloat16)"),
        ("fp32", "Runs at fp32, above the model's released bf16 (config torch_dtype bfloat16)"),
    ],
)
def test_caveats_name_the_released_precision(dtype, words, a100):
    released = open_model(LLAMA3_8B).released
    _, caveats = choose_dtype(released, a100, PlanOptions(dtype=dtype))
    assert len(caveats) == 1 and caveats[0].startswith(words)
    assert "model's own" not in caveats[0]  # never against the generated graph's fp32 tensors


def test_a_device_without_the_released_peak_takes_the_nearest_wider():
    tpu = mapper.load_hardware("tpu-v5e")
    assert not tpu.has_matrix_peak("fp16")
    dtype, caveats = choose_dtype(open_model("llama2-7b").released, tpu, PlanOptions())
    assert dtype == "bf16"
    assert "has no fp16 matrix peak: the model, released at fp16" in caveats[0]


def test_deepseek_v3_is_released_in_fp8():
    """DeepSeek-V3's config says torch_dtype bfloat16 but ships FP8 weights (quantization_config quant_method fp8,
    e4m3 with 128 x 128 block scales): --dtype auto maps it at fp8 and no caveat calls fp8 a step below."""
    deepseek = CONFIGS / "deepseek-v3.json"
    assert open_model(deepseek).released == ReleasedPrecision(
        PlanDtype.FP8, "config quantization_config quant_method fp8"
    )
    config = json.loads(deepseek.read_text())
    gptq = config | {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    assert config_precision(gptq).dtype == PlanDtype.BF16  # weight-only int4: its torch_dtype stands
