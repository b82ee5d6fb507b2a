"""Decode attention as the runtime runs it (issue 34, item 3): grouped query heads packed into one work item's
rows or one item per head, the keys split or not, the cache paged; the kernel's class follows."""

from __future__ import annotations

import dataclasses
import json

import pytest

import mapper
from mapper.core.result import MatrixShape
from mapper.core.vocab import MatrixKind, Shard
from mapper.hardware.target import UNPACKED_DECODE, device_target
from mapper.plan.attention_tiling import plan_attention, runs_masked_mha, work_items
from mapper.plan.runtime import PRESETS
from mapper.plan.sharding import _split
from mapper.serve.scheduler import Requests

# Llama-2-70B: 64 query heads share 8 K/V heads (groups of 8); a decode step at batch 32 over 4,096 cached tokens
STEP = {"batch": 32, "seq": 1, "past": 4096}


@pytest.fixture(scope="module")
def h200():
    return mapper.load_hardware("h200-sxm")


@pytest.fixture(scope="module")
def llama70():
    return mapper.open_model("llama2-70b")


def _attention(result) -> mapper.KernelEstimate:
    return next(e for e in result.kernels if e.kernel.matrix is not None and e.kernel.matrix.kind == "attention")


def _map(model, hw, **options):
    return mapper.map_workload(model.bind(STEP), hw, mapper.PlanOptions(**options))


def test_the_attention_kernel_knows_its_query_and_kv_heads(llama70, h200):
    """Read off the graph (the query's heads axis, repeat_kv's Expand): 64 over 8 whole, 8 over 1 under TP 8, and
    4 over 1 under TP 16 (the 8 K/V heads replicated: each device keeps the one its 4 query heads read)."""
    whole = _attention(_map(llama70, h200, runtime="onnxruntime", attention_fusion=True)).kernel.matrix
    assert (whole.heads, whole.kv_heads, whole.group) == (64, 8, 8) and whole.batch == 32 * 64
    tp8 = _attention(_map(llama70, h200, tp=8)).kernel.matrix
    assert (tp8.heads, tp8.kv_heads, tp8.group, tp8.batch) == (8, 1, 8, 32 * 8)
    tp16 = _split(whole, Shard.SHARDED, 16)  # past the 8 devices one H200 node connects: the sharding rule alone
    assert tp16 is not None and (tp16.heads, tp16.kv_heads, tp16.group, tp16.batch) == (4, 1, 4, 32 * 4)


def test_multi_head_attention_has_no_group():
    result = mapper.map_workload(mapper.load_workload("llama2-7b", STEP), mapper.load_hardware("h100-sxm"))
    shape = _attention(result).kernel.matrix
    assert (shape.heads, shape.kv_heads, shape.group) == (32, 32, 1)


def test_work_items_pack_a_group_only_where_the_runtime_does_and_only_in_decode():
    decode = MatrixShape(256, 1, 4097, 128, MatrixKind.ATTENTION, heads=8, kv_heads=1)
    packed = dataclasses.replace(UNPACKED_DECODE, packs_query_group=True)
    assert work_items(decode, UNPACKED_DECODE) == (256, 1)  # a sequence's query head a work item, 1 row of 64
    assert work_items(decode, packed) == (32, 8)  # a sequence's K/V head a work item, its 8 query heads the rows
    prefill = dataclasses.replace(decode, m=512)
    assert work_items(prefill, packed) == (256, 512)  # many new tokens: the rows are the tokens already
    mha = dataclasses.replace(decode, kv_heads=8)
    assert work_items(mha, packed) == (256, 1)


def test_the_class_follows_from_the_runtimes_kernel(llama70, h200):
    """70B TP 8 on H200, batch 32 over 4,096 tokens: packed (vLLM, TensorRT-LLM), the 8 query heads fill 8 of 64
    rows and the step streams its 67 MB of K/V, memory-bound; per head (the exported graph under ONNX Runtime,
    TensorRT-LLM before XQA), each head's single query pads a 64-row block, 8x the matrix work, occupancy-bound."""
    packed = _attention(_map(llama70, h200, tp=8))
    per_head = _attention(_map(llama70, h200, tp=8, gqa_decode="per-head"))
    assert packed.dram_bytes == pytest.approx(per_head.dram_bytes)  # the same K/V read once from DRAM either way
    assert packed.bottleneck == "memory-bound" and per_head.bottleneck == "occupancy / wave quantization"
    assert per_head.compute_time_s > 5 * packed.compute_time_s
    assert per_head.time_s > 2.5 * packed.time_s
    kv_stream_s = packed.dram_bytes / h200.dram_bandwidth_bytes_per_s
    assert packed.memory_time_s == pytest.approx(kv_stream_s / h200.dram_efficiency.at(packed.dram_bytes), rel=0.02)


def test_presets_say_how_their_decode_attention_runs():
    assert not PRESETS["onnxruntime"].decode_attention.packs_query_group
    vllm, trt = PRESETS["vllm"].decode_attention, PRESETS["tensorrt-llm"].decode_attention
    assert vllm.packs_query_group and vllm.splits_kv and vllm.page_tokens == 16
    assert trt.packs_query_group and trt.splits_kv and trt.page_tokens == 32
    assert "XQA" in trt.kernel and "seqlenq_ngroups_swapped" not in trt.kernel
    assert (trt.packed_group_max, trt.masked_mha) == (32, True) and not vllm.masked_mha


def test_tensorrt_llm_runs_multi_head_attention_and_groups_past_xqa_on_masked_mha(h200):
    """TensorRT-LLM's XQA packs query-head groups of up to 32; multi-head attention, wider groups and a forced
    per-head plan run its masked MHA kernel (CUDA cores, no 64-row tile), on a profile that gives its item time.
    vLLM's FlashAttention runs every step."""
    trt, vllm = PRESETS["tensorrt-llm"].decode_attention, PRESETS["vllm"].decode_attention

    def shape(heads, kv_heads, m=1):
        return MatrixShape(8 * heads, m, 513, 128, MatrixKind.ATTENTION, heads=heads, kv_heads=kv_heads)

    masked = {g: runs_masked_mha(shape(g * 2, 2), trt, h200) for g in (1, 2, 8, 32, 48, 64)}
    assert masked == {1: True, 2: False, 8: False, 32: False, 48: True, 64: True}
    assert runs_masked_mha(shape(16, 2), dataclasses.replace(trt, packs_query_group=False), h200)
    assert not runs_masked_mha(shape(32, 32, m=64), trt, h200)  # a prompt: the fused kernel
    assert not any(runs_masked_mha(shape(g * 2, 2), vllm, h200) for g in (1, 8, 64))
    assert not runs_masked_mha(shape(32, 32), trt, dataclasses.replace(h200, masked_mha_item_s=None))
    mha = mapper.map_workload(mapper.load_workload("llama2-7b", STEP), h200, mapper.PlanOptions(runtime="tensorrt-llm"))
    chosen = _attention(mha).tiling.chosen
    assert chosen.tile_m == 1 and chosen.padding_efficiency > 0.5  # one query row, no tile of 64 padded


def test_the_option_overrides_the_preset_and_the_document_says_which(llama70, h200):
    def row(result):
        doc = mapper.mapping_document(result)
        return next(a for a in doc["assumptions"] if a["name"] == "runtime.decode_attention")

    assert row(_map(llama70, h200, tp=8))["value"] == "packed"
    forced = row(_map(llama70, h200, tp=8, gqa_decode="per-head"))
    assert forced["value"] == "per-head" and forced["source"].startswith("plan option --gqa-decode per-head")
    assert row(_map(llama70, h200, tp=8, runtime="onnxruntime", attention_fusion=True))["value"] == "per-head"
    packed_ort = _map(llama70, h200, tp=8, runtime="onnxruntime", attention_fusion=True, gqa_decode="packed")
    assert row(packed_ort)["value"] == "packed"
    kernel = mapper.mapping_document(packed_ort)["kernels"]
    assert {k["query_heads_per_kv"] for k in kernel if k["layer_type"] == "Attention"} == {8}


def test_a_runtime_that_does_not_split_keeps_every_key_in_one_work_item(h200):
    kernel = _attention(mapper.map_workload(mapper.load_workload("llama2-7b", {**STEP, "batch": 1}), h200)).kernel
    split = device_target(h200, "bf16", (2.0, 2.0, 2.0), None, False, 1e-6, UNPACKED_DECODE)
    whole = device_target(
        h200, "bf16", (2.0, 2.0, 2.0), None, False, 1e-6, dataclasses.replace(UNPACKED_DECODE, splits_kv=False)
    )
    assert plan_attention(kernel, split).chosen.split_k > 1  # 32 work items for 132 SMs: flash-decoding splits
    assert plan_attention(kernel, whole).chosen.split_k == 1
    assert split.key != whole.key


def test_a_warm_memo_answers_the_other_mode_as_a_cold_mapping(h200):
    warm = mapper.open_model("llama2-70b")
    first = mapper.map_workload(warm.bind(STEP), h200, mapper.PlanOptions(tp=8))
    again = mapper.map_workload(warm.bind(STEP), h200, mapper.PlanOptions(tp=8, gqa_decode="per-head"))
    cold = mapper.map_workload(
        mapper.open_model("llama2-70b").bind(STEP), h200, mapper.PlanOptions(tp=8, gqa_decode="per-head")
    )

    def doc(result):
        d = json.loads(json.dumps(mapper.mapping_document(result)))
        d.pop("created_utc")
        return d

    assert doc(again) == doc(cold) and doc(again)["totals"] != doc(first)["totals"]


@pytest.mark.slow  # a review or serving run of a 70B or at load: several seconds
def test_the_review_offers_packed_decode_attention_where_the_plan_runs_per_head(llama70, h200):
    options = mapper.PlanOptions(tp=8, gqa_decode="per-head")
    chosen = mapper.assess_slice(llama70, STEP, h200, options).document()["assessment"]["chosen"]
    assert chosen["changes"] == "gqa_decode=packed" and chosen["owner"] == "runtime systems engineer"
    packed = mapper.assess_slice(llama70, STEP, h200, mapper.PlanOptions(tp=8)).document()["assessment"]
    offered = [c.get("changes") for c in packed.get("candidates", [])]
    assert "gqa_decode=packed" not in offered


def test_a_paged_cache_reserves_whole_pages():
    import numpy as np

    reqs = Requests(np.zeros(3), np.array([100, 16, 1]), np.array([28, 16, 1]), page_tokens=16)
    assert reqs.need.tolist() == [128, 32, 16]
    assert Requests(np.zeros(1), np.array([100]), np.array([29])).need.tolist() == [129]


def test_a_prompts_causal_attention_skips_the_blocks_above_the_diagonal():
    """Serving runtimes run a decoder's prompt attention causal (FlashAttention's causal=True): of a 4,096-token
    prompt's key blocks, on average (4,096 + 128) / 2 + 64 keys of 4,096 a query block of 128 rows sees (128-key
    blocks: 0.53 of the square); the exported graph under ONNX Runtime computes the whole square."""
    import numpy as np

    from mapper.plan.attention_tiling import causal_share

    prompt = MatrixShape(32, 4096, 4096, 128, MatrixKind.ATTENTION, heads=32, kv_heads=32)
    assert causal_share(prompt, np.array([128.0]), np.array([128.0]))[0] == pytest.approx((2112 + 64) / 4096)
    chunk = dataclasses.replace(prompt, m=512, n=4096)  # a chunk of 512 after 3,584 cached keys
    assert causal_share(chunk, np.array([128.0]), np.array([64.0]))[0] == pytest.approx((3584 + 320 + 32) / 4096)
    assert causal_share(dataclasses.replace(prompt, m=1), np.array([64.0]), np.array([64.0]))[0] == 1.0
    h100, workload = mapper.load_hardware("h100-sxm"), mapper.load_workload("llama2-7b", {"batch": 1, "seq": 4096})
    served = _attention(mapper.map_workload(workload, h100))
    exported = _attention(
        mapper.map_workload(workload, h100, mapper.PlanOptions(runtime="onnxruntime", attention_fusion=True))
    )
    assert served.compute_time_s < 0.6 * exported.compute_time_s
