"""The mapping plan and cost model: rules by hand, properties over random shapes, published figures."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import mapper
from mapper import PlanOptions
from mapper.core.graph import OpClass
from mapper.cost.roofline import kernel_time
from mapper.plan.tiling import ACCUMULATOR_BYTES
from tests.conftest import attention_model, gemm_model, make_model, tensor, weight


def _map(data, hw, **opts):
    return mapper.map_workload(mapper.load_workload(data), hw, PlanOptions(**opts))


# --- fusion rules ---------------------------------------------------------------------------------
def _mlp(with_outside_consumer=False):
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["y"]),
    ]
    outputs = [tensor("y", [64, 256])]
    if with_outside_consumer:
        nodes.append(helper.make_node("Sigmoid", ["hb"], ["side"]))
        outputs.append(tensor("side", [64, 256]))
    return make_model(nodes, [tensor("x", [64, 128])], outputs, [weight("w", (128, 256)), weight("b", (256,))])


def test_epilogue_fuses_bias_and_activation(h100):
    r = _map(_mlp(), h100, dtype="fp32")
    (k,) = r.kernels
    assert k.kernel.rule == "gemm-epilogue" and k.kernel.op_types == ("MatMul", "Add", "Relu")
    # boundary traffic only: x, w, b read once, y written once (fp32)
    assert k.kernel.dram_bytes == 4 * (64 * 128 + 128 * 256 + 256 + 64 * 256)


def test_fusion_stops_where_an_intermediate_has_an_outside_consumer(h100):
    r = _map(_mlp(with_outside_consumer=True), h100, dtype="fp32")
    ops = [k.kernel.op_types for k in r.kernels]
    assert ("MatMul", "Add", "Relu") not in ops  # hb is read outside: Relu cannot join MatMul+Add
    assert ("MatMul", "Add") in ops


def test_policy_none_makes_one_kernel_per_op(h100):
    r = _map(_mlp(), h100, dtype="fp32", fusion="none")
    assert [k.kernel.rule for k in r.kernels] == ["single"] * 3


def test_flash_attention_keeps_scores_on_chip(h100):
    b, h, s, d = 2, 8, 1024, 64
    unfused = _map(attention_model(b, h, s, d), h100, dtype="fp16", fusion="default")
    fused = _map(attention_model(b, h, s, d), h100, dtype="fp16", fusion="aggressive")
    (k,) = fused.kernels
    assert k.kernel.rule == "flash-attention"
    assert k.kernel.dram_bytes == 2 * 4 * b * h * s * d + 2  # Q, K, V read and O written once (fp16), + the scale
    scores = 2 * b * h * s * s
    assert sum(e.kernel.dram_bytes for e in unfused.kernels) > 2 * scores  # scores written and read back


def test_flash_attention_rejected_when_tiles_do_not_fit(h100):
    tiny_sram = dataclasses.replace(h100, sram_per_unit_bytes=16 * 1024)
    r = _map(attention_model(1, 2, 256, 128), tiny_sram, dtype="fp16", fusion="aggressive")
    assert all(k.kernel.rule != "flash-attention" for k in r.kernels)
    assert any("rejected" in k.kernel.note for k in r.kernels)


@pytest.mark.parametrize(("batch", "heads", "past", "splits"), [(1, 32, 8192, True), (64, 32, 2048, False)])
def test_decode_attention_splits_the_cache_when_sequences_are_few(h100, batch, heads, past, splits):
    """One query a sequence: batch x heads work items; under the units, the keys split across them
    (flash-decoding) and the partial outputs are combined, a grid sync."""
    r = _map(attention_model(batch, heads, past, 128, q_len=1), h100, dtype="bf16", fusion="aggressive")
    (k,) = r.kernels
    assert k.kernel.rule == "flash-attention"
    chosen = k.tiling.chosen
    assert (chosen.split_k > 1) == splits
    assert chosen.wave_efficiency > 0.9 if splits else chosen.split_k == 1  # the split fills the units
    assert (k.sync_s > 0) == splits


@pytest.mark.parametrize(("heads", "head_dim", "dtype"), [(4, 32, "fp32"), (32, 128, "bf16"), (8, 128, "fp16")])
def test_decode_attention_never_gets_faster_as_the_cache_grows(h100, heads, head_dim, dtype):
    """Splits take whole key blocks and any count: one more cached key never makes a step faster (a split count
    of powers of two, each split padded to its own blocks, made 513 keys slower than 2049)."""
    times = [
        _map(attention_model(1, heads, past, head_dim, q_len=1), h100, dtype=dtype, fusion="aggressive").kernels[0]
        for past in [*range(1, 600, 37), 1023, 1024, 1025, 2047, 2048, 2049, 4096, 8192]
    ]
    assert all(k.kernel.rule == "flash-attention" for k in times)
    seconds = [k.time_s for k in times]
    # within a millionth: on a plateau the DRAM curve's log-linear steps between decade points let a slightly
    # larger small stream take a hair less time (1e-8 here)
    assert all(later >= earlier * (1 - 1e-6) for earlier, later in itertools.pairwise(seconds))


@pytest.mark.parametrize("name", ["resnet50", "bert-base", "llama2-7b", "mobilenetv2"])
def test_fusion_never_adds_dram_bytes(name, h100):
    w = mapper.load_workload(name)
    totals = {
        p: sum(
            k.kernel.dram_bytes
            for k in mapper.map_workload(
                w,
                h100,
                PlanOptions(fusion=p, dtype="bf16", layout="nchw" if name in ("resnet50", "mobilenetv2") else "auto"),
            ).kernels
        )
        for p in ("none", "default", "aggressive")
    }
    assert totals["aggressive"] <= totals["default"] <= totals["none"]


def _producing_kernel(result, nodes):
    """tensor -> index of the kernel that makes it; a free view's output is made where its input is."""
    where = {
        o: i for i, k in enumerate(result.kernels) for n in k.kernel.nodes if n in nodes for o in nodes[n].outputs if o
    }
    in_kernels = {n for k in result.kernels for n in k.kernel.nodes}
    for node in nodes.values():  # views run in no kernel (graph order: a view's input is placed first)
        if node.name not in in_kernels and node.inputs and node.inputs[0] in where:
            where.update((o, where[node.inputs[0]]) for o in node.outputs if o)
    return where


@pytest.mark.parametrize(
    "source,dims",
    [
        ("resnet50", {"batch": 2}),
        ("bert-base", {}),
        ("llama2-7b", {}),
        ("vit-b16", {}),
        ("hf_llama_tiny.onnx", {"batch": 2, "seq": 8}),
        ("bert_base_int8_dynamic.onnx", {"batch": 1, "seq": 64}),
        ("hf_bert_tiny_ts.onnx", {"batch": 2, "seq": 8}),
    ],
)
def test_kernels_run_after_the_kernels_they_read(source, dims, h100):
    """Every node that does work runs in exactly one kernel, and every kernel reads only tensors made by
    earlier kernels (or weights and graph inputs). A greedy chain
    that absorbs a node whose other operand a later kernel makes breaks this; so would a plan whose
    fused group needs its own output back (ResNet's residual Add, SwiGLU's gate x up, RoPE, GELU's
    x * 0.5 beside erf, dynamic quantization's scale product)."""
    from tests.conftest import MODELS_DIR

    w = mapper.load_workload(str(MODELS_DIR / source) if source.endswith(".onnx") else source, dims or None)
    for policy in ("none", "default", "aggressive"):
        result = mapper.map_workload(w, h100, PlanOptions(fusion=policy))
        nodes = {n.name: n for n in w.graph.nodes}
        placed = [n for k in result.kernels for n in k.kernel.nodes if n in nodes]
        free = {x.name for x in w.nodes if x.op_class in (OpClass.VIEW, OpClass.SHAPE_ONLY)}
        assert sorted(placed) == sorted(set(nodes) - free), f"{policy}: a node is in no kernel or in two"
        where = _producing_kernel(result, nodes)
        for i, k in enumerate(result.kernels):
            for n in k.kernel.nodes:
                if n not in nodes:  # an inserted layout transpose
                    continue
                late = [t for t in nodes[n].inputs if where.get(t, -1) > i]
                assert not late, f"{policy}: kernel {i} {k.kernel.name!r} reads {late} made by a later kernel"


# --- engines, layout, precision ---------------------------------------------------------------------
def test_depthwise_convs_run_on_vector_units_and_are_memory_bound(h100):
    r = mapper.map_workload(mapper.load_workload("mobilenetv2", {"batch": 128}), h100, PlanOptions(dtype="bf16"))
    depthwise = [e for e in r.kernels if e.kernel.layer_type is mapper.LayerType.CONV and e.kernel.engine != "matrix"]
    assert len(depthwise) == 17  # MobileNetV2 has 17 depthwise 3x3 convs
    assert all(e.bottleneck == "memory-bound" for e in depthwise)


def test_layout_transposes_are_inserted_and_costed(h100):
    w = mapper.load_workload("resnet50", {"batch": 8})
    auto = mapper.map_workload(w, h100, PlanOptions(dtype="bf16"))
    forced = mapper.map_workload(w, h100, PlanOptions(dtype="bf16", layout="nchw"))
    assert h100.preferred_conv_layout == "nhwc"
    inserted = [e for e in auto.kernels if e.kernel.rule == "layout-transform"]
    assert len(inserted) == 1  # the image enters NHWC once; GAP's 1x1 output needs no transpose
    per_conv = [e for e in forced.kernels if e.kernel.rule == "layout-transform"]
    assert len(per_conv) == 53  # NCHW forced on an NHWC device: every conv converts its input
    assert forced.totals.latency_s > auto.totals.latency_s


def test_lower_precision_is_marked_with_its_caveat(h100):
    w = mapper.load_workload("bert-base")
    assert mapper.map_workload(w, h100, PlanOptions()).caveats == ()
    fp8 = mapper.map_workload(w, h100, PlanOptions(dtype="fp8"))
    assert any("below the model's released fp32" in c for c in fp8.caveats)
    bf16 = mapper.map_workload(w, h100, PlanOptions(dtype="bf16"))
    assert fp8.totals.latency_s < bf16.totals.latency_s


def test_weight_only_int4_cuts_decode_traffic(h100):
    w = mapper.load_workload("llama2-7b", {"batch": 1, "seq": 1, "past": 512})
    bf16 = mapper.map_workload(w, h100, PlanOptions(dtype="bf16"))
    int4 = mapper.map_workload(w, h100, PlanOptions(dtype="bf16", weight_dtype="int4"))
    assert int4.totals.weight_bytes == pytest.approx(bf16.totals.weight_bytes / 4, rel=0.01)
    linear = {
        r.totals.dtype + str(id(r)): sum(l.time_s for l in r.layers if l.layer_type == "Linear/GEMM")
        for r in (bf16, int4)
    }
    t_bf16, t_int4 = linear.values()
    assert t_int4 < 0.5 * t_bf16  # the weight-streaming GEMMs speed up; launch overheads stay
    assert int4.totals.latency_s < bf16.totals.latency_s
    assert any("int4" in c for c in int4.caveats)


def test_unsupported_dtype_names_what_the_device_has():
    with pytest.raises(mapper.MapperError, match="fp8"):
        mapper.map_workload(
            mapper.load_workload("resnet50"), mapper.load_hardware("a100-sxm-80gb"), PlanOptions(dtype="fp8")
        )


# --- tiling and cost: hand-checked rules and properties -----------------------------------------------
def test_wave_quantization_formula_on_one_gemm(h100):
    """Data-parallel waves (a profile without a stream-K library): the last wave's share of busy units; under
    H100's stream-K schedule the same GEMM's partial last wave is spread over every SM."""
    waves = dataclasses.replace(h100, matrix_schedule=None, sha256="data-parallel waves")
    for hw in (waves, h100):
        (e,) = _map(gemm_model(1408, 3073, 4096), hw, dtype="bf16").kernels
        c = e.tiling.chosen
        tiles = math.ceil(1408 / c.tile_m) * math.ceil(3073 / c.tile_n) * c.split_k
        assert c.tiles == tiles and c.waves == math.ceil(tiles / 132)
        tail = tiles > 132 and tiles % 132 > 0
        assert c.wave_efficiency == pytest.approx(1.0 if hw is h100 and tail else tiles / (c.waves * 132))
        assert c.padding_efficiency == pytest.approx(
            1408 * 3073 / (math.ceil(1408 / c.tile_m) * c.tile_m * math.ceil(3073 / c.tile_n) * c.tile_n)
        )


@pytest.mark.parametrize(
    ("name", "measured"),
    [
        # cuBLAS bf16 8192^3 on H100 SXM: ~790 TFLOP/s (MAMF 792.1, stas00/ml-engineering compute/accelerator
        # README, "Maximum Achievable Matmul FLOPS"; mamf-finder times short runs)
        ("h100-sxm", 790e12),
        # the same GEMM held 3 s on one H200 settles at 659 TFLOP/s at its 700 W cap (data/evidence/h200)
        ("h200-sxm", 659e12),
    ],
)
def test_large_bf16_gemm_lands_near_measured(name, measured):
    (e,) = _map(gemm_model(8192, 8192, 8192), mapper.load_hardware(name), dtype="bf16").kernels
    assert e.achieved_flops_per_s == pytest.approx(measured, rel=0.08)
    assert e.bottleneck == "compute-bound (matrix)"


def test_one_tile_past_a_full_wave_shows_the_quantization_drop(h100):
    """1408 x 3072 = 11 x 12 = 132 tiles of 128x256: exactly one wave on 132 SMs; one more column of output adds a
    tile column and, under data-parallel waves, a second, nearly empty wave (NVIDIA "Matrix Multiplication
    Background User's Guide", wave quantization). H100's stream-K library spreads that tail over every SM: what is
    left is the new column's padding (AIConfigurator's Hopper tables: one row past a tile edge costs ~1%)."""
    waves = dataclasses.replace(h100, matrix_schedule=None, sha256="data-parallel waves")
    for hw, drop in ((waves, 0.8), (h100, 1.0)):
        (full,) = _map(gemm_model(1408, 3072, 4096), hw, dtype="bf16").kernels
        (plus,) = _map(gemm_model(1408, 3073, 4096), hw, dtype="bf16").kernels
        assert full.tiling.chosen.waves == 1 and full.tiling.chosen.wave_efficiency == 1.0
        assert plus.achieved_flops_per_s < drop * full.achieved_flops_per_s
    assert plus.achieved_flops_per_s > 0.85 * full.achieved_flops_per_s  # stream-K: the padding only


@pytest.mark.parametrize("seq", [512, 2048, 8192])
def test_attention_unfused_and_fused_land_in_measured_ranges(seq, h100):
    # FlashAttention-3 paper (Shah et al. 2024), H100 SXM5, fp16, head dim 128, 16k tokens per batch:
    # standard PyTorch attention 74-139 TFLOP/s; FlashAttention-2/3 about 300-650 TFLOP/s.
    batch, heads, d = 16384 // seq, 16, 128
    flops = 4 * batch * heads * seq * seq * d
    unfused = _map(attention_model(batch, heads, seq, d), h100, dtype="fp16", fusion="none")
    fused = _map(attention_model(batch, heads, seq, d), h100, dtype="fp16", fusion="aggressive")
    assert 74e12 * 0.9 <= flops / unfused.totals.latency_s <= 139e12 * 1.1
    assert 300e12 <= flops / fused.totals.latency_s <= 650e12


GEMM_DIMS = st.integers(min_value=1, max_value=6000)


@settings(max_examples=40, deadline=None)
@given(GEMM_DIMS, GEMM_DIMS, GEMM_DIMS)
def test_chosen_tile_fits_sram_and_more_resources_never_slow_a_kernel(m, n, k):
    hw = mapper.load_hardware("h100-sxm")
    w = mapper.load_workload(gemm_model(m, n, k))
    base = mapper.map_workload(w, hw, PlanOptions(dtype="bf16"))
    for e in base.kernels:
        c = e.tiling.chosen
        if c is not None:
            assert c.sram_bytes <= hw.sram_per_unit_bytes
            assert (
                c.sram_bytes
                == c.stages * (c.tile_m * c.tile_k + c.tile_k * c.tile_n) * 2 + c.tile_m * c.tile_n * ACCUMULATOR_BYTES
            )
    faster_mem = dataclasses.replace(
        hw,
        dram_bandwidth_bytes_per_s=2 * hw.dram_bandwidth_bytes_per_s,
        l2_bandwidth_bytes_per_s=2 * hw.l2_bandwidth_bytes_per_s,
    )
    faster_math = dataclasses.replace(
        hw,
        matrix_peak_flops_per_s={k: 2 * v for k, v in hw.matrix_peak_flops_per_s.items()},
        vector_peak_flops_per_s={k: 2 * v for k, v in hw.vector_peak_flops_per_s.items()},
    )
    for better in (faster_mem, faster_math):
        assert mapper.map_workload(w, better, PlanOptions(dtype="bf16")).totals.latency_s <= base.totals.latency_s * (
            1 + 1e-9
        )


@pytest.mark.parametrize("name", ["resnet50", "bert-base", "gpt2-small"])
def test_latency_is_the_sum_of_kernel_times_on_one_stream(name, h100):
    r = mapper.map_workload(mapper.load_workload(name), h100, PlanOptions(dtype="bf16"))
    assert r.totals.latency_s == pytest.approx(sum(e.time_s for e in r.kernels), rel=1e-12)
    ends = [e.start_s + e.time_s for e in r.kernels]
    assert ends[-1] == pytest.approx(r.totals.latency_s)
    for e in r.kernels:
        assert e.time_s >= kernel_time(
            e.compute_time_s, e.memory_time_s, e.overhead_s, e.sync_s, h100.overlap_exponent
        ) * (1 - 1e-9)


# --- the known stories ------------------------------------------------------------------------------
def _class_shares(result):
    shares = defaultdict(float)
    for e in result.kernels:
        shares[e.bottleneck] += e.time_s / result.totals.latency_s
    return shares


def test_resnet50_batch1_on_h100_is_mostly_launch_bound(h100):
    r = mapper.map_workload(mapper.load_workload("resnet50", {"batch": 1}), h100, PlanOptions(dtype="bf16"))
    assert _class_shares(r)["launch / latency-bound"] > 0.5
    assert {e.owner for e in r.kernels if e.bottleneck == "launch / latency-bound"} == {"runtime systems engineer"}


def test_resnet50_batch256_large_convs_are_compute_bound(h100):
    r = mapper.map_workload(mapper.load_workload("resnet50", {"batch": 256}), h100, PlanOptions(dtype="bf16"))
    convs = sorted(
        (e for e in r.kernels if e.kernel.layer_type is mapper.LayerType.CONV), key=lambda e: -e.kernel.flops
    )
    largest = [e for e in convs if e.kernel.flops >= convs[0].kernel.flops * 0.9]
    compute = sum(e.time_s for e in largest if e.bottleneck == "compute-bound (matrix)")
    assert len(largest) >= 10 and compute >= 0.75 * sum(e.time_s for e in largest)
    # the stem conv (3 input channels, K = 147) stays memory-bound: its 112x112x64 output dominates
    stem = next(e for e in convs if e.kernel.nodes[0].startswith("/conv1/"))
    assert stem.bottleneck == "memory-bound"


def test_llama2_7b_decode_step_is_memory_bound_with_low_mfu(h100):
    r = mapper.map_workload(
        mapper.load_workload("llama2-7b", {"batch": 1, "seq": 1, "past": 2048}), h100, PlanOptions(dtype="bf16")
    )
    shares = _class_shares(r)
    assert max(shares, key=shares.get) == "memory-bound"
    assert r.totals.mfu < 0.05


def test_every_kernel_has_one_class_evidence_and_owner(h100):
    r = mapper.map_workload(
        mapper.load_workload("gpt2-small", {"batch": 4, "seq": 64, "past": 0}), h100, PlanOptions(dtype="bf16")
    )
    for e in r.kernels:
        assert e.bottleneck and e.evidence and e.owner
        assert 0.0 <= e.stall_fraction <= 1.0
