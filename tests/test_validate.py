"""`mapper validate`: AIConfigurator's measured tables read, split and mapped (mapper/evidence/aiconfigurator.py,
validate.py). The fast tests parse inline records (no package needed); the slow ones read a small deterministic
subsample of every covered table from the installed aiconfigurator-core (the `validate` extra)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from onnx import TensorProto

from mapper.cli.main import main
from mapper.core.options import PlanOptions
from mapper.cost.collectives import collective_time
from mapper.evidence import aiconfigurator as aic
from mapper.evidence.candidates import candidate_profile, with_value
from mapper.evidence.microbench import kernel_model
from mapper.evidence.moe_rows import busiest_rank_share, moe_layer, moe_time_s
from mapper.evidence.validate import (
    aiconfigurator_rows,
    decode_companions,
    error_stats,
    predict,
    score_aiconfigurator,
    summarize,
)
from mapper.hardware.load import load_hardware
from mapper.pipeline import load_workload, map_workload

GEMM = aic.Table("h200_sxm", "gemm", "trtllm", "1.3.0rc20", "gemm_perf", None)
DECODE = aic.Table("h200_sxm", "attention", "vllm", "0.24.0", "generation_attention_perf", None)
PREFILL = aic.Table("h100_sxm", "attention", "trtllm", "1.3.0rc20", "context_attention_perf", None)
NCCL = aic.Table("h200_sxm", "comm", "nccl", "2.29.2", "nccl_perf", None)
CUSTOM_VLLM = aic.Table("h100_sxm", "comm", "vllm", "0.24.0", "custom_allreduce_perf", None)
DECODE_TRT = "h200_sxm/attention/trtllm/1.3.0rc20/generation_attention_perf"
DECODE_TRT_H100 = "h100_sxm/attention/trtllm/1.3.0rc20/generation_attention_perf"
DECODE_SGLANG = "h200_sxm/attention/sglang/0.5.14/generation_attention_perf"
ALL_REDUCE_TRT = "h100_sxm/comm/trtllm/1.3.0rc20/custom_allreduce_perf"
GEMM_TRT = "h200_sxm/gemm/trtllm/1.3.0rc20/gemm_perf"


def _gemm(m, n, k, dtype="bfloat16", latency=0.05):
    return {"gemm_dtype": dtype, "m": m, "n": n, "k": k, "latency": latency, "kernel_source": "torch_flow"}


def _attention(step, isl=1, heads=32, kv=8, window=0, kv_dtype="bfloat16", attn="bfloat16"):
    return {
        "batch_size": 8, "isl": isl, "num_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
        "window_size": window, "beam_width": 1, "attn_dtype": attn, "kv_cache_dtype": kv_dtype, "step": step,
        "latency": 0.02, "kernel_source": "fa3",
    }  # fmt: skip


def test_a_gemm_record_is_typed_in_seconds():
    row = aic.parse_record(GEMM, _gemm(64, 4096, 1024, "fp8", 0.0125))
    assert (row.kind, row.dtype, row.shape, row.timing) == ("gemm", "fp8", (64, 4096, 1024), "graph")
    assert row.measured_s == pytest.approx(12.5e-6)  # the tables' latency is milliseconds
    assert aic.parse_record(GEMM, _gemm(64, 4096, 1024, "int8_wo")) is None  # no slice for weight-only GEMMs


def test_attention_records_read_lengths_and_kv_dtype():
    decode = aic.parse_record(DECODE, _attention(step=127, kv_dtype="fp8"))
    assert decode.kind == "attention-decode" and decode.dtype == "bf16/kv-fp8"
    assert decode.shape == (8, 32, 8, 128, 128)  # 127 cached tokens and the step's own
    prefill = aic.parse_record(PREFILL, _attention(step=0, isl=2048, attn="fp8", kv_dtype="fp8"))
    assert prefill.kind == "attention-prefill" and prefill.dtype == "fp8" and prefill.shape[3] == 2048
    assert aic.parse_record(DECODE, _attention(step=127, window=128)) is None  # sliding window: not covered


def test_only_all_reduce_rows_of_nccl_tables_are_read():
    record = {"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": 8, "message_size": 4096, "latency": 0.02}
    row = aic.parse_record(NCCL, record)
    assert row.kind == "all-reduce" and row.shape == (8, 4096) and row.timing == "eager"
    assert aic.parse_record(NCCL, {**record, "op_name": "all_gather"}) is None


def test_a_malformed_record_is_one_line():
    with pytest.raises(aic.MapperError, match="gemm_perf"):
        aic.parse_record(GEMM, _gemm(0, 4096, 1024))
    with pytest.raises(aic.MapperError, match="unreadable"):
        aic.parse_record(GEMM, {"gemm_dtype": "bfloat16", "m": "x"})


def test_the_split_holds_whole_weight_shapes_back():
    rows = [aic.parse_record(GEMM, _gemm(m, n, k)) for m in (1, 64, 4096) for n in (512, 4096) for k in (256, 8192)]
    by_shape: dict[tuple, set[bool]] = {}
    for row in rows:
        by_shape.setdefault(row.shape[1:], set()).add(aic.held_back(row))
    assert all(len(splits) == 1 for splits in by_shape.values())  # every m of an (n, k) on one side


def test_the_sample_is_deterministic_and_bounded():
    rows = [aic.parse_record(GEMM, _gemm(m, 1024, 1024)) for m in range(1, 200)]
    first = aic.sample(iter(rows), 10)
    assert first == aic.sample(reversed(rows), 10) and len(first) == 10  # order-free: a hash, not a position
    assert aic.sample(iter(rows), 10, seed="other") != first


def test_a_tables_sample_from_its_columns_is_the_rows_sample(tmp_path, monkeypatch):
    """`sample_table` hashes the columns and builds only the rows it keeps: the same rows, in the same order, as
    `sample` over every parsed record, across record batches, with rows it skips and rows that tie."""
    parquet = pytest.importorskip("pyarrow.parquet")
    records = [
        _gemm(m, n, 1024, dtype) for m in range(1, 40) for n in (512, 4096) for dtype in ("bfloat16", "fp8", "int8_wo")
    ]
    records += [_gemm(7, 512, 1024)] * 3  # equal rows: equal hashes, kept in the order read
    path = tmp_path / "gemm_perf.parquet"
    parquet.write_table(pa_table(records), path)
    table = aic.Table("h200_sxm", "gemm", "trtllm", "1.3.0rc20", "gemm_perf", path)
    monkeypatch.setattr(aic, "BATCH_ROWS", 7)  # many batches: each batch's smallest, then merged
    parsed = [row for r in records if (row := aic.parse_record(table, r)) is not None]
    assert list(aic.read_rows(table)) == parsed
    for n, seed in ((5, ""), (25, "x"), (1000, "y")):
        assert aic.sample_table(table, n, seed) == aic.sample(iter(parsed), n, seed)
    assert aic.sample_table(table, None) == parsed
    bf16 = aic.sample_table(table, 10, "x", dtype="bf16")
    assert bf16 == aic.sample((r for r in parsed if r.dtype == "bf16"), 10, "x")


def pa_table(records: list[dict]):
    return pytest.importorskip("pyarrow").Table.from_pylist(records)


def test_rows_are_mapped_and_summarized(h100):
    rows = [aic.parse_record(GEMM, _gemm(m, 4096, 4096, dtype)) for m in (16, 4096) for dtype in ("bfloat16", "fp8")]
    rows.append(aic.parse_record(DECODE, _attention(step=1023)))
    scored = score_aiconfigurator(rows)
    assert len(scored) == len(rows) and all(math.isfinite(s.error) and s.predicted_s > 0 for s in scored)
    by = {(s.dtype, s.shape[0]): s.predicted_s for s in scored if s.kind == "gemm"}
    assert by[("fp8", 4096)] < by[("bf16", 4096)]  # the fp8 module: quantize + a GEMM at twice the peak
    groups = summarize(scored, ("device", "kind", "dtype"))
    assert {g["kind"] for g in groups} == {"gemm", "attention-decode"}
    assert sum(g["fit"]["n"] + g["held-back"]["n"] for g in groups) == len(rows)


MOE_VLLM = aic.Table("h200_sxm", "moe", "vllm", "0.24.0", "moe_perf", None)


def _moe(tokens, tp=1, ep=1, distribution="balanced", dtype="bfloat16", latency=4.221829):
    return {
        "moe_dtype": dtype, "num_tokens": tokens, "hidden_size": 4096, "inter_size": 14336, "topk": 2,
        "num_experts": 8, "moe_tp_size": tp, "moe_ep_size": ep, "distribution": distribution, "latency": latency,
        "kernel_source": "vllm_unquantizedfusedmoe_triton_tritonexperts",
    }  # fmt: skip


def test_moe_records_read_the_distribution_and_the_ranks_split():
    row = aic.parse_record(MOE_VLLM, _moe(4096, ep=2, distribution="power_law_1.2"))
    assert (row.kind, row.dtype, row.shape) == ("moe", "bf16/power_law_1.2", (4096, 4096, 14336, 2, 8, 1, 2))
    assert row.split_key == "moe|4096|14336|2|8"  # a layer with every token count, split and distribution
    assert aic.parse_record(MOE_VLLM, _moe(64, dtype="w4a16_mxfp4")) is None  # no slice for weight-only experts
    assert aic.parse_record(MOE_VLLM, _moe(64, ep=3)) is None  # 8 experts do not split over 3 ranks
    assert aic.parse_record(MOE_VLLM, _moe(64, distribution="zipf")) is None  # a draw this harness does not know


A2A_TRT = aic.Table("h200_sxm", "comm", "trtllm", "1.3.0rc11", "moe_a2a_perf", None)


def test_moe_all_to_all_records_are_microseconds_of_one_nodes_deepep():
    """DeepEP's dispatch of 128 tokens a rank, top 8 of 256 experts over 8 H200s: the table's latency is in
    microseconds (beside its transmit_us), its kernels (low-latency or high-throughput) and phase read into the
    dtype; a row over two nodes, or of a backend the harness does not know, is left out."""
    record = {
        "comm_backend": "trtllm_deepep_ll", "phase": "dispatch", "comm_dtype": "bfloat16", "ep_size": 8,
        "node_num": 1, "hidden_size": 7168, "topk": 8, "num_experts": 256, "num_tokens": 128, "latency": 94.3,
        "kernel_source": "deepep",
    }  # fmt: skip
    row = aic.parse_record(A2A_TRT, record)
    assert (row.kind, row.dtype, row.shape) == ("moe-all-to-all", "bf16/dispatch/ll", (8, 128, 7168, 8, 256))
    assert row.measured_s == pytest.approx(94.3e-6) and row.split_key == "moe-all-to-all|7168|8|256"
    assert aic.parse_record(A2A_TRT, {**record, "node_num": 2}) is None
    assert aic.parse_record(A2A_TRT, {**record, "comm_backend": "nixl_ep"}) is None
    # the engine's attention-DP dispatch: 128 x 8 x 7168 x 2 bytes, 7/8 of it off the GPU, launched eagerly
    hw = load_hardware("h200-sxm")
    wire = collective_time("all-to-all", 8, 128 * 8 * 7168 * 2, hw.interconnect).time_s
    assert predict(row, "h200-sxm") == pytest.approx(wire + hw.kernel_launch_s)


def test_a_power_law_rows_measuring_rank_holds_the_busiest_share():
    assert busiest_rank_share(4096, 128, 8, 1, 1.2) == 1.0  # one rank holds every routed row
    assert busiest_rank_share(4096, 128, 8, 8, None) == 1.0  # balanced
    shares = [busiest_rank_share(t, 128, 8, 8, 1.2) for t in (64, 512, 4096)]
    assert all(1.0 < s <= 8 for s in shares)
    assert shares == [busiest_rank_share(t, 128, 8, 8, 1.2) for t in (64, 512, 4096)]  # seeded: every run alike


def test_a_moe_row_is_one_ranks_layer_without_its_router_or_collective():
    """vLLM 0.24's fused MoE on H200, Mixtral's layer (4096 -> 14336, top 2 of 8), 4096 tokens balanced: measured
    4.222 ms (AIConfigurator's h200_sxm/moe/vllm/0.24.0 table). The row times the module given the router's logits,
    on one GPU: the harness maps the layer and leaves out the router GEMM and, at ep 2, the experts' all-reduce."""
    row = aic.parse_record(MOE_VLLM, _moe(4096))
    predicted = predict(row, "h200-sxm")
    assert abs(predicted / row.measured_s - 1) < 0.2
    layer = moe_layer(4096, 14336, 8, 2).bind({"tokens": 4096})
    hw = load_hardware("h200-sxm")
    for ep in (1, 2):
        options = PlanOptions(dtype="bf16", launch="graph", runtime="vllm", ep=ep)
        mapped = map_workload(layer, hw, options)
        untimed = [e for e in mapped.kernels if e.kernel.collective or "mlp.gate" in e.kernel.name]
        assert len(untimed) == 1 + (ep > 1)  # the router GEMM; the sum of the ranks' outputs
        shape = (4096, 4096, 14336, 2, 8, 1, ep)
        left = mapped.totals.latency_s - sum(e.assessment.time_s for e in untimed)
        assert moe_time_s(shape, "bf16", None, "h200-sxm", "vllm") == pytest.approx(left)
    # a rank of ep 4 holding the busiest experts of a power law runs more rows than a balanced one's
    skewed, even = (moe_time_s((4096, 4096, 14336, 2, 8, 1, 4), "bf16", a, "h200-sxm", "vllm") for a in (1.2, None))
    assert skewed > even


def test_a_paged_decode_step_is_the_ops_kernels_and_their_latency():
    """A measured row (H200, TensorRT-LLM 1.3.0rc20 generation attention: one sequence, 32 query and 8 K/V heads, one
    cached token: 8.443 us) is the QKV preprocessing kernel and XQA, whose paged latency the profile gives; the
    attention kernel alone over a contiguous cache (`--kv-cache static`) is under half of it."""
    row = aic.Row(DECODE_TRT, "h200_sxm", "attention-decode", "bf16", (1, 32, 8, 2, 128), 8.443e-6, "", "graph")
    assert predict(row, "h200-sxm") == pytest.approx(row.measured_s, rel=0.2)  # 2.2 us before either mechanism
    assert decode_companions("trtllm", row.shape, row.dtype) == (("add", (1, 48 * 128)),)
    assert len(decode_companions("vllm", row.shape, "bf16/kv-fp8")) == 2  # the cache write and the query's quantize
    graph = kernel_model("attention-decode-gqa", (1, 32, 8, 2, 128), TensorProto.BFLOAT16)
    options = PlanOptions(dtype="bf16", fusion="aggressive", launch="graph", runtime="tensorrt-llm")
    h200 = load_hardware("h200-sxm")
    paged = map_workload(load_workload(graph), h200, options).totals.latency_s
    static = map_workload(load_workload(graph), h200, replace(options, kv_cache="static")).totals.latency_s
    assert paged - static == pytest.approx(h200.paged_decode_s + h200.paged_decode_item_s * 8 / 132, rel=0.05)
    assert static < row.measured_s / 2


def test_sglang_writes_a_decode_steps_k_and_v_in_one_kernel():
    """Measured rows (H200, SGLang 0.5.14 generation attention, FlashAttention-3, bf16 cache: 32 query and 8 K/V
    heads of 128, one cached token): 8.904 us at one sequence, 9.573 us at 8, 18.582 us at 64. SGLang 0.5.14 writes
    the new K and V rows in one kernel (`store_cache`): +4%, +11%, +21%; two copies, as 0.5.10 ran them: +18%, +25%,
    +29%."""
    measured = {1: 8.904e-6, 8: 9.573e-6, 64: 18.582e-6}
    for batch, seconds in measured.items():
        shape = (batch, 32, 8, 2, 128)
        row = aic.Row(DECODE_SGLANG, "h200_sxm", "attention-decode", "bf16", shape, seconds, "fa3", "graph")
        two_copies = replace(row, table=DECODE_SGLANG.replace("0.5.14", "0.5.10"))
        assert abs(predict(row, "h200-sxm") / seconds - 1) < abs(predict(two_copies, "h200-sxm") / seconds - 1) - 0.05
        if batch <= 8:
            assert predict(row, "h200-sxm") == pytest.approx(seconds, rel=0.12)
    shape = (8, 32, 8, 2, 128)
    assert decode_companions("sglang", shape, "bf16", "0.5.14") == (("add", (8, 2 * 8 * 128)),)
    assert decode_companions("sglang", shape, "bf16", "0.5.10") == (("add", (8, 8 * 128)),) * 2
    assert len(decode_companions("sglang", shape, "bf16/kv-fp8", "0.5.14")) == 4  # K, V and the query cast first


def test_tensorrt_llm_decode_of_multi_head_attention_and_wide_groups_is_masked_mha():
    """Measured rows held back from every fit (H100, TensorRT-LLM 1.3.0rc20 generation attention, bf16): 128 sequences
    of 64 heads over 1 cached token, 79.83 us (multi-head attention); 256 sequences of 128 query heads on 2 K/V heads
    over 1 cached token, 300.6 us (groups of 64, past XQA's). Masked MHA runs a thread block a query head on the
    CUDA cores; the fused kernel's 64-row tile a query head made the first 3x slow and packing the groups of 64 made
    the second 10x fast."""
    wide = aic.Row(DECODE_TRT_H100, "h100_sxm", "attention-decode", "bf16", (256, 128, 2, 2, 64), 300.6e-6, "", "graph")
    mha = aic.Row(DECODE_TRT_H100, "h100_sxm", "attention-decode", "bf16", (128, 64, 64, 2, 128), 79.83e-6, "", "graph")
    for row in (wide, mha):
        assert predict(row, "h100-sxm") == pytest.approx(row.measured_s, rel=0.25)
    fused = with_value(load_hardware("h100-sxm"), "overhead.masked_mha_item_s", None)
    with candidate_profile(fused):
        assert predict(wide, "h100-sxm") < 0.2 * wide.measured_s
        assert predict(mha, "h100-sxm") > 2 * mha.measured_s


def test_tensorrt_llm_xqa_splits_a_sequence_as_its_multi_block_count_says():
    """XQA's multi-block count (decoderXQAImplCommon.cpp `computeMultiBlockCount`): a block per 128 history tokens,
    at most round(sqrt(8 x that)), cut to 8 waves of the SMs. Measured rows (H200, TensorRT-LLM 1.3.0rc20, bf16, 64
    query heads on 8 K/V heads): 16 sequences over 1,024 cached tokens 47.6 us, 1 sequence over 32,768 tokens 54.5
    us. XQA splits the first 8 ways into 1,024 blocks, 8 waves of one a unit each paying its fixed work, where the
    fastest split FlashAttention's rule finds leaves 16 sequences unsplit (27 us); it splits the second 45 ways, not
    the 128 that would fill the SMs (46 us)."""
    from mapper.plan.attention_tiling import xqa_blocks

    assert [xqa_blocks(8, 8192, 132), xqa_blocks(8, 32768, 132), xqa_blocks(128, 1024, 132)] == [23, 45, 8]
    assert [xqa_blocks(128, 8192, 132), xqa_blocks(1024, 1024, 132), xqa_blocks(1, 64, 132)] == [8, 1, 1]
    for batch, length, measured_s in ((16, 1024, 47.64e-6), (1, 32768, 54.50e-6)):
        row = aic.Row(
            DECODE_TRT, "h200_sxm", "attention-decode", "bf16", (batch, 64, 8, length, 128), measured_s, "", "graph"
        )
        assert predict(row, "h200-sxm") == pytest.approx(measured_s, rel=0.12), (batch, length)
    # on compute capability 10.0 TensorRT-LLM runs trtllm-gen, not XQA: B200 splits as FlashAttention's rule finds
    from mapper.core.vocab import DecodeSplit
    from mapper.plan.runtime import TRTLLM_DECODE

    assert TRTLLM_DECODE.on(load_hardware("h200-sxm")).split_rule == DecodeSplit.XQA
    assert TRTLLM_DECODE.on(load_hardware("b200")).split_rule == DecodeSplit.FLASH


def test_an_all_reduce_row_runs_its_own_algorithm_and_launch():
    """Measured rows (H100, 8 GPUs, 1024 bf16 elements): TensorRT-LLM's custom all-reduce from a graph 3.409 us, vLLM's
    custom all-reduce called eagerly 23.755 us. The one-shot kernel pays one link latency where NCCL's tree pays
    2 log2(8); the eager call waits on the host's dispatch (overhead.host_op_s)."""
    custom = aic.Row(ALL_REDUCE_TRT, "h100_sxm", "all-reduce", "bf16", (8, 1024), 3.409e-6, "TRTLLM", "graph")
    assert predict(custom, "h100-sxm") == pytest.approx(custom.measured_s, rel=0.15)  # 13 us as a ring or tree
    as_nccl = replace(custom, table=custom.table.replace("custom_allreduce_perf", "nccl_perf"))
    assert predict(as_nccl, "h100-sxm") > 3 * custom.measured_s
    record = {"op_name": "all_reduce", "allreduce_dtype": "bfloat16", "num_gpus": 8, "message_size": 1024}
    eager = aic.parse_record(CUSTOM_VLLM, {**record, "latency": 0.023755, "kernel_source": "vLLM_custom_eager"})
    assert eager.timing == "eager" and aic.parse_record(CUSTOM_VLLM, {**record, "latency": 0.0046}).timing == "graph"
    assert predict(eager, "h100-sxm") == pytest.approx(eager.measured_s, rel=0.2)
    link = load_hardware("h100-sxm").interconnect
    assert collective_time("all-reduce", 8, 2048, link, custom=True).algorithm == "one-shot"
    assert collective_time("all-reduce", 8, 2**28, link, custom=True).algorithm == "two-shot"


def test_a_small_gemm_waits_on_its_serial_k_loop():
    """Measured rows (H200, TensorRT-LLM 1.3.0rc20 bf16 Linear, one row, n = 32): 2.544 us at K = 32, 4.973 us at
    2048, 5.671 us at 8192 (split-K past ~3072 stops the growth). The weights stream in well under 1 us: what is
    left is the profile's GEMM floor, a fixed part and one tile's loop over K up to `gemm_serial_k`."""
    h200 = load_hardware("h200-sxm")
    for k, measured_s in ((32, 2.544e-6), (2048, 4.973e-6), (8192, 5.671e-6)):
        row = aic.Row(GEMM_TRT, "h200_sxm", "gemm", "bf16", (1, 32, k), measured_s, "", "graph")
        assert predict(row, "h200-sxm") == pytest.approx(measured_s, rel=0.15), k
    graph = kernel_model("gemm", (1, 32, 2048), TensorProto.BFLOAT16)
    options = PlanOptions(dtype="bf16", launch="graph")
    floored = map_workload(load_workload(graph), h200, options).totals.latency_s
    bare = map_workload(load_workload(graph), replace(h200, gemm_floor_s=None), options).totals.latency_s
    assert bare < 0.6 * 4.973e-6 < floored


def test_a_skinny_gemm_streams_its_weights_below_a_copys_rate():
    """Measured rows (B200, TensorRT-LLM 1.3.0rc20 bf16 Linear, one row, fit split): 9.91 us at n = k = 4096 (33.6 MB
    of weights), 14.29 us at n = 8192, k = 4096 (67 MB). A GEMV streams its weights through few output tiles and
    reaches less of the DRAM peak than a copy of the same bytes: the profile's matrix DRAM curve (fitted on the fit
    split) gives it; the copy curve (`dram_by_bytes`) alone under-predicts both by 22-31%."""
    b200 = load_hardware("b200")
    options = PlanOptions(dtype="bf16", launch="graph")
    for n, measured_s in ((4096, 9.91e-6), (8192, 14.29e-6)):
        table = GEMM_TRT.replace("h200_sxm", "b200_sxm")
        row = aic.Row(table, "b200_sxm", "gemm", "bf16", (1, n, 4096), measured_s, "", "graph")
        assert not aic.held_back(row)
        assert predict(row, "b200") == pytest.approx(measured_s, rel=0.15), n
        graph = kernel_model("gemm", row.shape, TensorProto.BFLOAT16)
        copy_curve = replace(b200, matrix_dram_efficiency=None)
        assert map_workload(load_workload(graph), copy_curve, options).totals.latency_s < 0.8 * measured_s


# Measured rows (TensorRT-LLM bf16 Linear, one row, k = 4096, fit split): n = 4096 (33.6 MB of weights) and 8192
# (67 MB). H100 (1.3.0rc20): 16.56 and 26.82 us; A100 (1.0.0): 26.21 and 51.06 us.
GEMV_ROWS = {
    "h100-sxm": ("h100_sxm/gemm/trtllm/1.3.0rc20/gemm_perf", "h100_sxm", ((4096, 16.56e-6), (8192, 26.82e-6))),
    "a100-sxm-80gb": ("a100_sxm/gemm/trtllm/1.0.0/gemm_perf", "a100_sxm", ((4096, 26.21e-6), (8192, 51.06e-6))),
}


@pytest.mark.parametrize("profile", sorted(GEMV_ROWS))
def test_an_h100_or_a100_gemv_streams_its_weights_below_a_copys_rate(profile):
    """The matrix DRAM curve (fitted on the fit split, as B200's, by bench/fit_matrix_dram.py) puts both measured
    rows within 7%; the copy curve alone under-predicts them: H100 by 21% and 10%, A100 by 10% and 12%."""
    table, system, rows = GEMV_ROWS[profile]
    hw = load_hardware(profile)
    options = PlanOptions(dtype="bf16", launch="graph")
    for n, measured_s in rows:
        row = aic.Row(table, system, "gemm", "bf16", (1, n, 4096), measured_s, "", "graph")
        assert not aic.held_back(row)
        assert predict(row, profile) == pytest.approx(measured_s, rel=0.1), n
        graph = kernel_model("gemm", row.shape, TensorProto.BFLOAT16)
        copy_curve = replace(hw, matrix_dram_efficiency=None)
        assert map_workload(load_workload(graph), copy_curve, options).totals.latency_s < 0.92 * measured_s


def test_error_statistics():
    stats = error_stats([0.1, -0.3, 0.2, -0.05])
    assert stats["n"] == 4 and stats["worst"] == -0.3
    assert stats["median_abs"] == pytest.approx(0.15) and stats["bias"] == pytest.approx(0.025)


@pytest.mark.slow
def test_every_covered_table_parses_maps_and_holds_its_held_back_medians():
    """Every covered table's 100-row sample, read and scored once (each table is streamed whole to sample it: one
    test, so two test workers never both build it)."""
    pytest.importorskip("aiconfigurator_core")
    rows, notes = aiconfigurator_rows(None, None, 100)
    scored = score_aiconfigurator(rows)
    tables = [t for t in aic.tables() if t.profile]
    assert {aic.TABLES[t.name] for t in tables} == set(aic.TABLES.values())
    assert {n["table"] for n in notes} == {t.label for t in tables}
    by_label = {t.label: t for t in tables}
    for note in notes:  # a table samples none only where it holds no row the harness maps (B200's w4a8 MoE table)
        assert note["sampled"] or next(aic.read_rows(by_label[note["table"]]), None) is None, note["table"]
    # only all-reduces and MoE groups over more GPUs than a profile's node drop out
    node = {p: load_hardware(p).interconnect.max_devices for p in aic.SYSTEM_PROFILES.values()}
    group = {"all-reduce": lambda r: r.shape[0], "moe": lambda r: r.shape[6]}
    over = [r for r in rows if r.kind in group and group[r.kind](r) > node[aic.SYSTEM_PROFILES[r.system]]]
    assert len(scored) == len(rows) - len(over)
    assert all(math.isfinite(s.predicted_s) and s.predicted_s > 0 for s in scored)
    assert len({s.device for s in scored}) == len(aic.SYSTEM_PROFILES)
    _held_back_medians_hold(scored)


@pytest.mark.slow
def test_no_weight_shape_straddles_the_split():
    pytest.importorskip("aiconfigurator_core")
    table = next(t for t in aic.tables() if t.label == "h200_sxm/gemm/trtllm/1.3.0rc20/gemm_perf")
    sides: dict[tuple, set[bool]] = {}
    for row in aic.read_rows(table):
        sides.setdefault(row.shape[1:], set()).add(aic.held_back(row))
    assert all(len(s) == 1 for s in sides.values())
    held = sum(True in s for s in sides.values()) / len(sides)
    assert 0.1 < held < 0.3  # about one (n, k) in HELD_BACK_ONE_IN


@pytest.mark.slow
def test_the_command_prints_both_splits(capsys):
    pytest.importorskip("aiconfigurator_core")
    assert main(["validate", "--device", "h100-sxm", "--kind", "gemm", "--sample", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] and {r["split"] for r in doc["rows"]} <= {"fit", "held-back"}
    assert all(r["device"] == "h100-sxm" and r["kind"] == "gemm" for r in doc["rows"])
    assert main(["validate", "--device", "h100-sxm", "--kind", "gemm", "--sample", "5", "--no-bands"]) == 0
    assert "held back" in capsys.readouterr().out


# The held-back median |error| per device of three tables (AIConfigurator 0.12, 100 rows a table, the declared
# split); a change that makes one worse by more than HELD_BACK_SLACK fails here. Recorded 2026-12-06 with nothing
# fitted: GEMM 8.9-25.2%, decode attention 62-73%, all-reduce 34-54%. Re-recorded 2026-12-06 after the paged
# decode latency, the all-reduce's algorithms, link share and latency, and the GEMM floor (a fixed part and a serial
# loop over K), each FITTED per device to the fit split only (the profiles' sources say which rows). Re-recorded
# 2026-12-06 after B200's matrix DRAM curve (a skinny GEMM's weight stream, fitted to the fit split; it used the
# copy curve): B200 GEMM 7.6 -> 8.5% here (100 rows a table, few held-back bf16 rows; on 3000 a table 11.8 ->
# 7.8%). Re-recorded 2026-12-06 after H100's matrix DRAM curve (bench/fit_matrix_dram.py, the fit split only):
# H100 GEMM 14.0 -> 8.8% here (32 held-back bf16 rows; on 3000 a table 10.5 -> 6.9%); and after A100's: A100 GEMM
# 12.6 -> 8.1% here (68 rows; on 3000 a table 12.7 -> 8.9%). 2026-12-07, the H200 power controller's response time
# (runs shorter than it at the full clock) and the stream-K schedule of H100, H200 and B200: GEMM here B200 8.5 ->
# 9.0%, H100 8.8 -> 8.3%, H200 9.6 -> 10.1% (18, 32 and 12 held-back bf16 rows; on 3000 a table 7.4 -> 7.2%,
# 6.9 -> 6.2%, 10.0 -> 7.1%). 2026-12-08, TensorRT-LLM's XQA split and the paged latency refitted: decode attention
# here A100 13.2%, B200 12.7% (B200's code unchanged since the SGLang store kernel), H100 11.8%, H200 9.8% (on 3000 a
# table 12.4, 15.9, 10.6, 9.6%). Goals (issue 35): GEMM 7%, generation attention 10%, all-reduce 15%.
HELD_BACK_MEDIANS = {
    ("a100-sxm-80gb", "gemm", "bf16"): 0.081,
    ("b200", "gemm", "bf16"): 0.090,
    ("h100-sxm", "gemm", "bf16"): 0.083,
    ("h200-sxm", "gemm", "bf16"): 0.101,
    ("a100-sxm-80gb", "attention-decode", "bf16"): 0.132,
    ("b200", "attention-decode", "bf16"): 0.127,
    ("h100-sxm", "attention-decode", "bf16"): 0.118,
    ("h200-sxm", "attention-decode", "bf16"): 0.098,
    ("a100-sxm-80gb", "all-reduce", "bf16"): 0.107,
    ("b200", "all-reduce", "bf16"): 0.101,
    ("h100-sxm", "all-reduce", "bf16"): 0.115,
    ("h200-sxm", "all-reduce", "bf16"): 0.087,
    # MoE layers, recorded 2026-12-07 when the harness first read them, every distribution of a precision together
    ("a100-sxm-80gb", "moe", "bf16"): 0.247,
    ("h100-sxm", "moe", "bf16"): 0.142,
    ("h200-sxm", "moe", "bf16"): 0.253,
    # DeepEP's MoE all-to-alls, the same day, every phase and kernel of a precision together (the engine's alpha-beta
    # all-to-all is optimistic: docs/validation.md, "MoE all-to-all")
    ("b200", "moe-all-to-all", "bf16"): 0.663,
    ("h100-sxm", "moe-all-to-all", "bf16"): 0.644,
    ("h200-sxm", "moe-all-to-all", "bf16"): 0.396,
}
HELD_BACK_SLACK = 0.03


def _held_back_medians_hold(scored: list) -> None:
    scored = [replace(s, dtype=s.dtype.split("/")[0]) if s.kind.startswith("moe") else s for s in scored]
    found = {
        (r["device"], r["kind"], r["dtype"]): r["held-back"]["median_abs"]
        for r in summarize(scored, ("device", "kind", "dtype"))
        if r["held-back"]["n"]
    }
    worse = {k: (found[k], v) for k, v in HELD_BACK_MEDIANS.items() if found[k] > v + HELD_BACK_SLACK}
    assert not worse, worse
