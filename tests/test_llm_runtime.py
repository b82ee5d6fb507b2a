"""The runtime model of decoders: KV-cache update, launch mode, presets, and weight GEMMs shaped as run.

Hand-computed figures: an in-place KV update saves exactly the cache copy's bytes; graph replay saves
exactly (kernel_launch_s - graph_launch_s) per kernel.
"""

from __future__ import annotations

import pytest

import mapper

A100 = mapper.load_hardware("a100-sxm-80gb")
LLAMA = mapper.open_model("llama2-7b")
LAYERS, KV_HEADS, HEAD_DIM, FP16 = 32, 32, 128, 2


def _map(batch, past, hw=A100, dtype="fp16", **options):
    return mapper.map_workload(
        LLAMA.bind({"batch": batch, "seq": 1, "past": past}), hw, mapper.PlanOptions(dtype=dtype, **options)
    )


def _assumed(result, key):
    return next(value for k, value, _ in result.assumptions if k == key)


def test_in_place_kv_cache_saves_exactly_the_copy():
    batch, past = 4, 256
    copy = _map(batch, past, runtime="vllm", kv_cache="copy", launch="eager")
    in_place = _map(batch, past, runtime="vllm", kv_cache="in-place", launch="eager")
    # each of the 64 appends (K and V of 32 layers) no longer reads the past cache nor rewrites it
    past_bytes = batch * KV_HEADS * past * HEAD_DIM * FP16
    saved = sum(e.kernel.dram_bytes for e in copy.kernels) - sum(e.kernel.dram_bytes for e in in_place.kernels)
    assert saved == pytest.approx(2 * LAYERS * 2 * past_bytes)
    appends = [e for e in in_place.kernels if e.kernel.note.startswith("kv-cache in place")]
    assert len(appends) == 2 * LAYERS
    new_bytes = batch * KV_HEADS * 1 * HEAD_DIM * FP16  # one token's K (or V): read once, written once
    assert all(e.kernel.dram_bytes == pytest.approx(2 * new_bytes) for e in appends)
    assert in_place.totals.latency_s < copy.totals.latency_s


def test_graph_launch_saves_the_launch_difference_per_kernel():
    eager = _map(1, 128, runtime="vllm", launch="eager")
    graph = _map(1, 128, runtime="vllm", launch="graph")
    kernels = len(eager.kernels)
    assert len(graph.kernels) == kernels
    per_kernel = A100.kernel_launch_s - A100.graph_launch_s  # 3 us - 1 us on the A100 profile
    assert per_kernel == pytest.approx(2e-6)
    saved = sum(e.assessment.time_s for e in eager.kernels) - sum(e.assessment.time_s for e in graph.kernels)
    assert saved == pytest.approx(kernels * per_kernel, rel=1e-6)


def test_batch_32_decode_is_memory_bound_with_weight_gemms_on_the_matrix_engine():
    result = _map(32, 2048)
    gemms = [e for e in result.kernels if e.kernel.matrix is not None and e.kernel.weight_bytes > 0]
    assert gemms and all(e.kernel.engine == "matrix" for e in gemms)
    memory_s = sum(e.assessment.time_s for e in result.kernels if e.assessment.bottleneck == "memory-bound")
    assert memory_s > 0.8 * sum(e.assessment.time_s for e in result.kernels)


def test_weight_gemm_flattens_batch_into_m_and_attention_keeps_its_batch():
    work = LLAMA.bind({"batch": 32, "seq": 1, "past": 64}).nodes
    q_proj = next(w for w in work if "layers.0/self_attn/q_proj" in w.name and w.op_type == "MatMul")
    assert (q_proj.matrix.batch, q_proj.matrix.m, q_proj.matrix.n, q_proj.matrix.k) == (1, 32, 4096, 4096)
    scores = [w for w in work if w.op_type == "MatMul" and w.matrix.batch > 1]
    assert scores and all(w.matrix.batch == 32 * 32 for w in scores)  # QK^T and PV: batch x heads


def test_auto_runtime_is_the_serving_preset_for_decoders_on_gpus_only():
    assert _assumed(_map(1, 16), "plan.runtime") == "vllm"
    assert _assumed(_map(1, 16), "plan.kv_cache") == "in-place"
    assert _assumed(_map(1, 16), "plan.launch") == "graph"
    cpu = mapper.load_hardware("cpu-x86")
    assert _assumed(_map(1, 16, hw=cpu, dtype="fp32"), "plan.runtime") == "onnxruntime"
    bert = mapper.map_workload(mapper.load_workload("bert-base", {"batch": 1, "seq": 16}), A100)
    assert (_assumed(bert, "plan.runtime"), _assumed(bert, "plan.launch")) == ("onnxruntime", "eager")
    prefill = mapper.map_workload(LLAMA.bind({"batch": 1, "seq": 64, "past": 0}), A100)
    assert _assumed(prefill, "plan.launch") == "eager"  # vLLM replays decode only
    assert any(k == "runtime.assumptions" and "PagedAttention" in why for k, _, why in _map(1, 16).assumptions)


def test_options_override_the_preset_and_graph_launch_needs_the_profile_value():
    assert _assumed(_map(1, 16, kv_cache="copy"), "plan.kv_cache") == "copy"
    assert _assumed(_map(1, 16, runtime="onnxruntime"), "plan.launch") == "eager"
    with pytest.raises(mapper.MapperError, match="graph_launch_s"):
        _map(1, 16, hw=mapper.load_hardware("cpu-x86"), dtype="fp32", launch="graph")


def _norm_kernel(tokens, hidden):
    from mapper.core.result import Kernel

    return Kernel("norm", ("n",), ("ReduceMean",), "norm", "vector", "norm", 0.0, 0.0, 0.0,
                  2.0 * tokens * hidden * FP16, 0.0, reduction_rows=tokens, reduction_length=hidden)  # fmt: skip


def test_row_kernel_waits_its_latency_chain_small_and_streams_at_the_issue_rate_large():
    from mapper.cost.row_kernels import row_kernel_memory_s

    latency = A100.dram_latency_s
    # one token over 4096: one block of 1024 threads, 4 dependent loads each
    assert row_kernel_memory_s(_norm_kernel(1, 4096), A100, FP16, 0.0) == pytest.approx(4 * latency)
    # 4096 tokens: in + out + the second read of the input, at 108 SMs * 2048 threads * 2 B per latency
    issued = 3 * 4096 * 4096 * FP16
    rate = 108 * 2048 * FP16 / latency
    assert row_kernel_memory_s(_norm_kernel(4096, 4096), A100, FP16, 0.0) == pytest.approx(issued / rate)
    assert mapper.load_hardware("h100-sxm").dram_latency_s is None  # no fitted latency: the plain roofline
    assert row_kernel_memory_s(_norm_kernel(1, 4096), mapper.load_hardware("h100-sxm"), FP16, 1e-6) is None


def test_tpu_v5e_batch_256_lm_head_runs_on_the_matrix_unit_at_its_matrix_time():
    # issue #18: this kernel was costed at 12 ms, ~6x its matrix-unit time (the batch was not flattened into M)
    tpu = mapper.load_hardware("tpu-v5e")
    result = _map(256, 128, hw=tpu, dtype="bf16")
    head = next(e for e in result.kernels if "lm_head" in e.kernel.name)
    shape = head.kernel.matrix
    assert (shape.batch, shape.m, shape.n, shape.k) == (1, 256, 32000, 4096)
    assert head.kernel.engine == "matrix" and head.assessment.bottleneck.startswith("compute-bound")
    # compute and memory overlap as the profile's smooth max says (at most 12% over the larger at equal times,
    # efficiency.overlap_exponent 6): with the MXU's operand feed at its array's 256 B/clk the stream is close
    a = head.assessment
    assert max(a.compute_time_s, a.memory_time_s) <= a.time_s <= 1.13 * max(a.compute_time_s, a.memory_time_s)
    # the matrix unit's time at the profile's efficiency, and the tile's SRAM feed limit (0.5 at 256x256)
    flops = 2 * 256 * 32000 * 4096
    unit_s = flops / (tpu.matrix_peak("bf16") * tpu.matrix_efficiency.at(flops))
    assert unit_s < head.assessment.compute_time_s <= 2.1 * unit_s < 1e-3


@pytest.mark.parametrize("update", ["Concat", "ScatterND"])
def test_the_cache_an_update_writes_is_the_memory_plans_kv_cache(update):
    """One definition of an exported KV-cache update (`plan.runtime.find_kv_appends`) serves the runtime and the
    memory plan: a dynamic cache's Concat(past, new) and a static cache's ScatterND(past, indices, new), each
    from a past graph input to a present graph output, hold the present cache. The memory plan counted only
    Concats of a graph input, so a static-cache export held no cache."""
    from onnx import TensorProto, helper

    from tests.conftest import make_model, tensor

    past, new = [1, 2, 16, 8], [1, 2, 1, 8]
    if update == "Concat":
        node = helper.make_node("Concat", ["past", "new"], ["present"], axis=2)
        inputs, present = [tensor("past", past), tensor("new", new)], [1, 2, 17, 8]
    else:
        node = helper.make_node("ScatterND", ["past", "at", "new"], ["present"])
        at = [tensor("at", [1, 2, 1, 3], TensorProto.INT64)]
        inputs, present = [tensor("past", past), *at, tensor("new", new)], past
    model = make_model([node], inputs, [tensor("present", present)])
    result = mapper.map_workload(mapper.load_workload(model), mapper.load_hardware("h100-sxm"))
    assert result.memory.kv_cache_bytes == 4 * 1 * 2 * present[2] * 8  # fp32 as exported
