"""The built-in zoo: every model builds, checks, names its dims, stays small, carries only dims,
and has the published parameter count; tiny configs of the same builders run in onnxruntime."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
import pytest

import mapper
from mapper.core.errors import MapperError
from mapper.zoo import ZOO_NAMES, build_zoo_model, list_zoo, zoo_model_bytes
from mapper.zoo.llama import LlamaConfig, build_llama
from mapper.zoo.transformers import EncoderConfig, build_bert, build_gpt2

# Published parameter counts (parameters only: BatchNorm running stats and RoPE inv_freq are buffers).
PUBLISHED_PARAMS = {
    "resnet50": 25_557_032,  # torchvision docs, ResNet50_Weights.IMAGENET1K_V1 "num_params"
    "mobilenetv2": 3_504_872,  # torchvision docs, MobileNet_V2_Weights.IMAGENET1K_V1 "num_params"
    "alexnet": 61_100_840,  # torchvision docs, AlexNet_Weights.IMAGENET1K_V1 "num_params"
    "bert-base": 109_482_240,  # HF bert-base-uncased BertModel with pooler (model card: 110M)
    "gpt2-small": 124_439_808,  # HF gpt2 model card "124M"; wte tied with the LM head, counted once
    "vit-b16": 86_567_656,  # torchvision docs, ViT_B_16_Weights.IMAGENET1K_V1 "num_params"
    "llama2-7b": 6_738_415_616,  # Llama 2 paper / HF Llama-2-7b-hf model card "7B" (6.74B)
    "llama2-70b": 68_976_648_192,  # Llama 2 paper / HF Llama-2-70b-hf model card "70B" (68.98B)
    "mixtral-8x7b": 46_702_792_704,  # HF mistralai/Mixtral-8x7B-v0.1 (46.7B)
}
EXPECTED_DIMS = {
    "resnet50": {"batch"},
    "mobilenetv2": {"batch"},
    "alexnet": {"batch"},
    "vit-b16": {"batch"},
    "bert-base": {"batch", "seq"},
    "gpt2-small": {"batch", "seq", "past"},
    "llama2-7b": {"batch", "seq", "past"},
    "llama2-70b": {"batch", "seq", "past"},
    "mixtral-8x7b": {"batch", "seq", "past"},
}
MAX_SERIALIZED_BYTES = 5_000_000
BUFFER_SUFFIXES = ("running_mean", "running_var")


@pytest.fixture(scope="module", params=ZOO_NAMES)
def zoo(request) -> tuple[str, onnx.ModelProto]:
    return request.param, build_zoo_model(request.param)


def external(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def test_zoo_model_passes_checker_with_placeholder_weights(zoo, tmp_path):
    # The checker insists every external-data location is a regular file next to the model;
    # an empty placeholder satisfies it without giving the graph any weight values.
    name, model = zoo
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    (tmp_path / f"{name}.weights.bin").touch()
    onnx.checker.check_model(str(path))


def test_zoo_model_infers_shapes_strictly(zoo):
    name, model = zoo
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    first = inferred.graph.output[0].type.tensor_type.shape
    assert first.dim[0].dim_param == "batch", name


def test_zoo_model_names_its_dims(zoo):
    name, model = zoo
    dims = {d.dim_param for v in model.graph.input for d in v.type.tensor_type.shape.dim if d.dim_param}
    assert dims == EXPECTED_DIMS[name]
    assert set(next(e for e in list_zoo() if e["name"] == name)["dims"]) == EXPECTED_DIMS[name]


def test_zoo_model_is_small_and_carries_only_dims(zoo):
    name, model = zoo
    assert len(zoo_model_bytes(name)) < MAX_SERIALIZED_BYTES
    weights = external(model)
    assert {e.value for t in weights for e in t.external_data if e.key == "location"} == {f"{name}.weights.bin"}
    assert not os.path.exists(f"{name}.weights.bin")
    inline = [t for t in model.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    assert all(np.prod(t.dims) <= 1024 for t in inline), "only small constants may be inline"
    # offsets tile the (absent) file back to back, lengths are float32 element counts
    offset = 0
    for t in weights:
        entry = {e.key: int(e.value) for e in t.external_data if e.key != "location"}
        assert entry == {"offset": offset, "length": 4 * int(np.prod(t.dims))}
        offset += entry["length"]


def test_zoo_parameter_count_matches_published(zoo):
    name, model = zoo
    params = sum(int(np.prod(t.dims)) for t in external(model) if not t.name.endswith(BUFFER_SUFFIXES))
    assert params == pytest.approx(PUBLISHED_PARAMS[name], rel=0.01)


def test_zoo_bytes_round_trip_without_external_data():
    data = zoo_model_bytes("gpt2-small")
    assert zoo_model_bytes("gpt2-small") == data  # deterministic: a handle reopened from the name is the same model
    model = onnx.load_from_string(data)
    assert [i.name for i in model.graph.input[:3]] == ["input_ids", "past_key_values.0.key", "past_key_values.0.value"]


@pytest.mark.parametrize("name", [n for n in ZOO_NAMES if n != "llama2-70b"])
def test_handle_keeps_the_built_model_equal_to_its_bytes_parsed(name):
    """A built-in's handle skips parsing its own bytes back: the message it keeps must be the one they hold."""
    handle = mapper.open_model(name)
    assert handle.proto == onnx.load_from_string(handle.data)
    assert handle.sha256 == hashlib.sha256(zoo_model_bytes(name)).hexdigest()


def test_llama2_70b_has_80_layers_with_8_kv_heads():
    """Build speed is a benchmark's business (bench/bench_mapping.py), not a test's: here, its shape."""
    model = build_zoo_model("llama2-70b")
    k_proj = [list(t.dims) for t in model.graph.initializer if t.name.endswith("self_attn.k_proj.weight")]
    assert len(k_proj) == 80 and all(dims == [8192, 8 * 128] for dims in k_proj)


def test_unknown_name_lists_choices():
    with pytest.raises(MapperError, match="unknown built-in model 'x'; choose one of: resnet50, mobilenetv2"):
        build_zoo_model("x")


def test_list_zoo_entries():
    entries = list_zoo()
    assert [e["name"] for e in entries] == list(ZOO_NAMES)
    assert all(e["source"] == "architecture reference" and e["description"] for e in entries)


# -- semantics: tiny configs of the same builders, inline random weights, run in onnxruntime ---------
ort = pytest.importorskip("onnxruntime")
TINY_GPT2 = EncoderConfig(layers=2, hidden=32, heads=4, ffn=64, vocab=97, max_positions=64, norm_eps=1e-5)
TINY_LLAMA = LlamaConfig(layers=2, hidden=32, heads=4, kv_heads=2, ffn=48, vocab=97)  # GQA, n_rep 2


def session(model: onnx.ModelProto):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run_decoder(sess, ids: np.ndarray, past: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {"input_ids": ids, **past})))


@pytest.mark.parametrize(
    "model, kv_heads, layers",
    [
        (build_gpt2(TINY_GPT2, "tiny-gpt2", inline_weights=True), TINY_GPT2.heads, TINY_GPT2.layers),
        (build_llama(TINY_LLAMA, "tiny-llama", inline_weights=True), TINY_LLAMA.kv_heads, TINY_LLAMA.layers),
    ],
    ids=["gpt2", "llama"],
)
def test_decoder_cache_step_equals_full_prefill(model, kv_heads, layers):
    # Prefill 5 tokens at past 0, versus prefill 4 then decode 1 from the cache: the last logits
    # must agree, which exercises the causal mask with an offset, RoPE/position offsets and the cache.
    sess = session(model)
    head_dim = sess.get_inputs()[1].shape[3]
    ids = np.random.default_rng(1).integers(0, 97, size=(2, 5), dtype=np.int64)
    empty = {
        f"past_key_values.{i}.{t}": np.zeros((2, kv_heads, 0, head_dim), np.float32)
        for i in range(layers)
        for t in ("key", "value")
    }
    full = run_decoder(sess, ids, empty)
    prefix = run_decoder(sess, ids[:, :4], empty)
    step = run_decoder(
        sess,
        ids[:, 4:],
        {f"past_key_values.{k[len('present.') :]}": v for k, v in prefix.items() if k.startswith("present.")},
    )
    assert full["logits"].shape == (2, 5, 97) and step["present.1.value"].shape == (2, kv_heads, 5, head_dim)
    np.testing.assert_allclose(step["logits"][:, 0], full["logits"][:, 4], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(prefix["logits"], full["logits"][:, :4], rtol=1e-4, atol=1e-5)


def test_bert_padding_mask_hides_padded_tokens():
    tiny = EncoderConfig(layers=2, hidden=32, heads=4, ffn=64, vocab=97, max_positions=16, type_vocab=2)
    sess = session(build_bert(tiny, "tiny-bert", inline_weights=True))
    ids = np.array([[5, 6, 7, 8]], np.int64)
    mask = np.array([[1, 1, 1, 0]], np.int64)
    hidden, pooled = sess.run(None, {"input_ids": ids, "attention_mask": mask})
    other, _ = sess.run(None, {"input_ids": np.array([[5, 6, 7, 90]], np.int64), "attention_mask": mask})
    assert hidden.shape == (1, 4, 32) and pooled.shape == (1, 32)
    np.testing.assert_allclose(hidden[:, :3], other[:, :3], rtol=1e-5, atol=1e-6)
