"""Built-in models through the engine: matrix MACs against published counts, layer recognition."""

from __future__ import annotations

import pytest

import mapper

# Published multiply-accumulate counts (hardware-facts.md part 3, sources named per row):
# torchvision docs "GFLOPS" (= GMACs): ResNet-50 4.089, ViT-B/16 17.564;
# MobileNetV2: torchvision docs "GFLOPS" 0.30 (weights meta "_ops" 0.301), i.e. ~300.8 MMAC;
# BERT-base at seq 128: 128 x 85.0M linear MACs + 12 x 2 x 128^2 x 768 attention MACs = 11.18 GMAC;
# decoders per token = non-embedding params (Kaplan et al. 2020: forward FLOPs/token ~ 2 N_nonembed):
# Llama-2-7B 6.74B - 131M embedding = 6.607 GMAC; Llama-2-70B 68.98B - 262M = 68.71 GMAC;
# GPT-2 small 124.4M - 38.6M wte - 0.8M wpe = 85.0M + tied LM head 38.6M = 123.6M MAC per token.
PUBLISHED = [
    ("resnet50", {"batch": 1}, 4.089e9, 0.01),
    ("vit-b16", {"batch": 1}, 17.564e9, 0.01),
    ("mobilenetv2", {"batch": 1}, 0.3008e9, 0.01),
    ("bert-base", {"batch": 1, "seq": 128}, 11.18e9, 0.01),
    ("llama2-7b", {"batch": 1, "seq": 1, "past": 0}, 6.607e9, 0.01),
    ("llama2-70b", {"batch": 1, "seq": 1, "past": 0}, 68.71e9, 0.01),
    ("gpt2-small", {"batch": 1, "seq": 1, "past": 0}, 123.6e6, 0.01),
]


@pytest.mark.parametrize("name,dims,macs,rel", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_zoo_matrix_macs_match_published(name, dims, macs, rel):
    w = mapper.load_workload(name, dims)
    assert w.matrix_flops / 2 == pytest.approx(macs, rel=rel)
    assert not w.unmodeled


def test_decode_step_attention_grows_with_past():
    """One decode step attends over past+1 keys: 4 * layers * (past+1) * d_model FLOPs of attention."""
    short = mapper.load_workload("llama2-7b", {"batch": 1, "seq": 1, "past": 0})
    long = mapper.load_workload("llama2-7b", {"batch": 1, "seq": 1, "past": 2048})
    assert long.matrix_flops - short.matrix_flops == 4 * 32 * 2048 * 4096


@pytest.mark.parametrize("name", ["bert-base", "gpt2-small", "vit-b16", "llama2-7b", "llama2-70b"])
def test_attention_is_recognized_as_one_layer_per_block(name):
    w = mapper.load_workload(name)
    groups = {n.layer_group for n in w.nodes if n.layer_type is mapper.LayerType.ATTENTION}
    layers = {"bert-base": 12, "gpt2-small": 12, "vit-b16": 12, "llama2-7b": 32, "llama2-70b": 80}[name]
    assert len(groups) == layers
    ops = {n.op_type for n in w.nodes if n.layer_type is mapper.LayerType.ATTENTION}
    assert {"MatMul", "Softmax"} <= ops
    if name == "llama2-70b":  # GQA's K/V repeat belongs to the attention layer
        assert "Expand" in ops


def test_rmsnorm_chain_rolls_up_as_normalization():
    w = mapper.load_workload("llama2-7b")
    norm_ops = {n.op_type for n in w.nodes if n.layer_type is mapper.LayerType.NORMALIZATION}
    assert {"Pow", "ReduceMean", "Sqrt"} <= norm_ops
