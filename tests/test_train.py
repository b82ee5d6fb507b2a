"""The train stage (mapper/train): hand-computed memory, bubble, gradient traffic and backward kernels; a 70B step
on 64 H100s; a 7B step that does not fit and the review's fix; `mapper train`'s bad input and JSON."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

import mapper
from mapper.cli.main import main
from mapper.core.graph import LayerType
from mapper.core.result import Kernel, MatrixShape
from mapper.core.vocab import Collective, Engine, KernelRule, MatrixKind, PipelineSchedule, Recompute, Shard
from mapper.hardware.load import load_hardware
from mapper.ops.backward import Grad
from mapper.train.backward import backward_of
from mapper.train.memory import ActivationCase, LayerDims, StateCase, layer_activation_bytes, state_bytes
from mapper.train.options import TrainOptions
from mapper.train.parallel import bubble_share, gradient_sync, pipeline_time

# GPT-3 175B's layer (Korthikanti et al. 2022, Table 3: h 12288, a 96, s 2048) at micro-batch 1
GPT = LayerDims(hidden=12288, heads=96, kv_width=12288, ffn=4 * 12288, gated=False, layers=96, vocab=51200)
S, B, H, A = 2048, 1, 12288, 96


def _case(tp=1, sp=False, recompute=Recompute.NONE, fused=False, dropout=True):
    return ActivationCase(S, B, tp, sp, recompute, fused, dropout)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        # Korthikanti eq. 1: sbh(34 + 5as/h), no parallelism
        (_case(), S * B * H * (34 + 5 * A * S / H)),
        # eq. 2: tensor parallel alone, sbh(10 + 24/t + 5as/(ht))
        (_case(tp=8), S * B * H * (10 + 24 / 8 + 5 * A * S / (H * 8))),
        # eq. 4: tensor and sequence parallel, sbh/t (34 + 5as/h)
        (_case(tp=8, sp=True), S * B * H / 8 * (34 + 5 * A * S / H)),
        # eq. 5: selective recompute with TP + SP, 34 sbh / t
        (_case(tp=8, sp=True, recompute=Recompute.SELECTIVE), S * B * H / 8 * 34),
        # full recompute: the layer's input, 2sbh (over t with SP)
        (_case(recompute=Recompute.FULL), 2 * S * B * H),
        (_case(tp=8, sp=True, recompute=Recompute.FULL), 2 * S * B * H / 8),
        # fused (FlashAttention): no score matrix, the fp32 log-sum-exp a query row (4 bytes x a x s x b)
        (_case(fused=True), S * B * H * 34 + 4 * A * S * B),
        # no dropout: its two masks (2 sbh) and the softmax's dropout (3as^2b) are not kept
        (_case(dropout=False), S * B * H * 32 + 2 * A * S * S * B),
    ],
)
def test_layer_activations_follow_korthikanti(case, expected):
    assert layer_activation_bytes(GPT, case) == pytest.approx(expected, rel=1e-12)


def test_gated_gqa_layer_activations_by_hand():
    # Llama-3-8B's layer: h 4096, 8 K/V heads of 128 (kv 1024), SwiGLU f 14336; fused, no dropout, selective
    d = LayerDims(hidden=4096, heads=32, kv_width=1024, ffn=14336, gated=True, layers=32, vocab=128256)
    s, b, e = 8192, 1, 2
    norms_and_inputs = e * s * b * 4096 * 4  # two norms' inputs, the QKV and gate/up GEMMs' input
    attention = e * s * b * (4096 + 1024) + e * s * b * 1024 + e * s * b * 4096  # Q, K; V; the projection's input
    mlp = 3 * e * s * b * 14336  # gate and up outputs, their product
    expected = norms_and_inputs + attention + mlp
    got = layer_activation_bytes(d, ActivationCase(s, b, 1, False, Recompute.SELECTIVE, True, False))
    assert got == expected


@pytest.mark.parametrize(
    ("zero", "offload", "expected"),
    [
        (0, False, (2e9, 4e9, 12e9)),  # 16-bit weights, fp32 main gradients, fp32 master + two moments
        (1, False, (2e9, 4e9, 12e9 / 8)),  # ZeRO-1: optimizer state over the 8 ranks
        (2, False, (2e9, 4e9 / 8, 12e9 / 8)),  # ZeRO-2: and the gradients
        (3, False, (2e9 / 8 + 2 * 2 * 1e7, 4e9 / 8, 12e9 / 8)),  # ZeRO-3/FSDP: and the weights; two layers whole
        (1, True, (2e9, 4e9, 0.0)),  # optimizer state on the host
    ],
)
def test_states_under_each_zero_stage(zero, offload, expected):
    got = state_bytes(StateCase(1e9, 1e7, 2.0, zero, 8, offload))
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("gemm_bytes", "held"), [(2.0, 2.0), (4.0, 4.0), (1.0, 3.0), (1.03125, 3.03125)])
def test_weights_kept_under_each_precision(gemm_bytes, held):
    """bf16 and fp32 steps keep their weights as the GEMMs read them; fp8 (and MXFP8, its scales included) keep the
    16-bit weights and the cast copy (Transformer Engine)."""
    weights, _, _ = state_bytes(StateCase(1e9, 0.0, gemm_bytes, 0, 1, False))
    assert weights == held * 1e9


def test_one_f_one_b_bubble():
    assert bubble_share(PipelineSchedule.ONE_F_ONE_B, 4, 32) == pytest.approx(3 / 35)
    assert bubble_share(PipelineSchedule.GPIPE, 8, 8) == pytest.approx(7 / 15)
    assert bubble_share(PipelineSchedule.INTERLEAVED, 4, 32, vp=3) == pytest.approx(1 / 33)
    assert bubble_share(PipelineSchedule.ONE_F_ONE_B, 1, 32) == 0.0
    # (m + p - 1) micro-batch times
    assert pipeline_time(PipelineSchedule.ONE_F_ONE_B, 4, 32, 1, 0.1) == pytest.approx(35 * 0.1)


def test_data_parallel_gradient_traffic_by_hand():
    hw = load_hardware("h100-sxm")  # NVLink: 450 GB/s a direction; a DGX H100 node's 8 x 400 Gb/s NDR
    alpha = hw.interconnect.latency_s  # fitted on AIConfigurator's all-reduce rows (docs/validation.md)
    params = 1e9
    grads = 4 * params  # fp32 main gradients
    inside = gradient_sync(hw, params, 2.0, 0, 8, 1, 1, False, 0.0, 0.0)
    share = hw.all_reduce_efficiency.at(grads)  # the link share an all-reduce of 4 GB reaches (the fitted curve)
    ring = 2 * 7 * alpha + 2 * 7 / 8 * grads / (4.5e11 * share)  # ring all-reduce over 8 (beats the tree at 4 GB)
    assert inside.gradient_bytes == grads
    assert inside.time_s == pytest.approx(ring) and inside.exposed_s == inside.time_s
    across = gradient_sync(hw, params, 2.0, 0, 2, 8, 1, False, 0.0, 0.0)  # two nodes: the scale-out network
    assert across.time_s == pytest.approx(2 * 1 * 5e-6 + 2 * 1 / 2 * grads / 50e9)
    overlapped = gradient_sync(hw, params, 2.0, 0, 2, 8, 1, True, 0.0, 10.0)
    assert overlapped.buckets == math.ceil(params / 40e6)
    assert overlapped.exposed_s == pytest.approx(across.time_s / overlapped.buckets)  # only the last bucket
    zero1 = gradient_sync(hw, params, 2.0, 1, 8, 1, 1, False, 0.0, 0.0)  # reduce-scatter + all-gather
    rs, ag = 7 * alpha + 7 / 8 * grads / 4.5e11, 7 * alpha + 7 / 8 * 2 * params / 4.5e11
    assert zero1.time_s == pytest.approx(rs + ag)
    zero2 = gradient_sync(hw, params, 2.0, 2, 8, 1, 4, False, 0.0, 0.0)  # sharded gradients: each micro-batch's
    assert zero2.gradient_bytes == 4 * grads and zero2.time_s == pytest.approx(4 * rs + ag)


def _kernel(**changes) -> Kernel:
    base = dict(
        name="k", nodes=("n",), op_types=("MatMul",), rule=KernelRule.SINGLE, engine=Engine.MATRIX,
        layer_type=LayerType.LINEAR, flops=2.0 * 64 * 32 * 16, matrix_flops=2.0 * 64 * 32 * 16, sfu_ops=0.0,
        dram_bytes=0.0, weight_bytes=2.0 * 16 * 32, matrix=MatrixShape(1, 64, 32, 16), shard=Shard.COLUMN,
    )  # fmt: skip
    base.update(changes)
    return Kernel(**base)


def test_backward_of_a_weight_gemm_attention_and_collective():
    g = Grad(2.0, 2.0)
    dgrad, wgrad = backward_of(_kernel(), g)  # Y[64, 32] = X[64, 16] W[16, 32]
    assert dgrad.matrix == MatrixShape(1, 64, 16, 32) and wgrad.matrix == MatrixShape(1, 16, 32, 64)
    assert dgrad.matrix_flops == wgrad.matrix_flops == 2.0 * 64 * 32 * 16
    assert dgrad.dram_bytes == 2 * (64 * 32 + 64 * 16) + 2 * 16 * 32  # dY and dX, W read
    assert wgrad.dram_bytes == 2 * (64 * 16 + 64 * 32) + 2 * 4 * 16 * 32  # X and dY, fp32 main gradient r+w
    scores = MatrixShape(4, 64, 64, 16, kind=MatrixKind.ATTENTION)
    attention = _kernel(rule=KernelRule.FLASH_ATTENTION, layer_type=LayerType.ATTENTION, weight_bytes=0.0,
                        dram_bytes=100.0, sfu_ops=7.0, matrix=scores)  # fmt: skip
    (back,) = backward_of(attention, g)
    assert back.matrix_flops == 2.5 * attention.matrix_flops and back.dram_bytes == 200.0 and back.sfu_ops == 7.0
    gather = _kernel(engine=Engine.INTERCONNECT, rule=KernelRule.COLLECTIVE, collective=Collective.ALL_GATHER,
                     matrix=None, layer_type=LayerType.COLLECTIVE, dram_bytes=1e6)  # fmt: skip
    (scatter,) = backward_of(gather, g)
    assert scatter.collective == Collective.REDUCE_SCATTER and scatter.dram_bytes == 1e6


@pytest.mark.slow
def test_llama2_70b_on_64_h100():
    hw = load_hardware("h100-sxm")
    o = TrainOptions(tp=8, pp=4, dp=2, micro_batch=1, global_batch=64, seq=4096, recompute="selective", dtype="bf16")
    r = mapper.train_step("llama2-70b", hw, o)
    assert r.parameters == pytest.approx(68.98e9, rel=2e-3)  # the built-in's published count
    # stage 0 on one device: 20 layers over TP 8 (norms whole) and the embedding table over TP 8 (Megatron's
    # VocabParallelEmbedding)
    layer_split = 8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672
    stage0 = 20 * layer_split / 8 + 20 * 2 * 8192 + 32000 * 8192 / 8
    # (each exported RMSNorm also reads its epsilon and exponent, two scalars the export folds into weights: 1e-7)
    assert r.memory.stage == 0 and r.memory.weight_bytes == pytest.approx(2 * stage0, rel=1e-7)
    assert r.memory.optimizer_bytes == pytest.approx(12 * stage0 / 2, rel=1e-7)  # ZeRO-1 over DP 2
    assert r.memory.fits and r.memory.per_device_bytes < 80e9
    assert 0.2 < r.totals.mfu < 0.7 and r.totals.hfu > r.totals.mfu
    assert 0 < r.totals.bubble_share <= 3 / 35  # 1F1B's (p-1)/(m+p-1), of the pipeline's share of the step


@pytest.mark.slow
def test_llama2_7b_without_recompute_does_not_fit_and_the_fix_does():
    hw = load_hardware("h100-sxm")
    o = TrainOptions(dp=8, micro_batch=4, global_batch=256, seq=4096, recompute="none")
    review = mapper.review_training("llama2-7b", hw, o)
    assert not review.result.memory.fits and review.first_failure.startswith("capacity")
    assert review.fix is not None and review.fix.fits and review.fix.per_device_bytes <= hw.dram_bytes
    assert review.fix.options.sequences == 256 and review.fix.options.devices <= 8


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--devices", "16", "--tp", "2", "--dp", "4"], "--devices 16 is not tp x pp x dp x cp"),
        (["--dp", "4", "--micro-batch", "3", "--global-batch", "16"], "global batch 16 is not a whole number"),
        (["--zero", "4"], "ZeRO stage"),
        (["--vp", "2"], "virtual stages need pipeline stages"),
        (["--pp", "2", "--schedule", "interleaved"], "set --vp above 1"),
    ],
)
def test_bad_train_plans_are_one_line(argv, words, capsys):
    assert main(["train", "gpt2-small", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_a_tied_head_is_held_once_on_one_stage():
    """Llama-3.2-1B ties its LM head to the embedding (1.24B parameters, data/configs/SOURCES.md): one copy where
    they share a stage; Megatron keeps a second on the last stage when they do not."""
    hw = load_hardware("h100-sxm")
    one = mapper.train_step("data/configs/llama-3.2-1b.json", hw, TrainOptions(global_batch=2, seq=32))
    two = mapper.train_step("data/configs/llama-3.2-1b.json", hw, TrainOptions(pp=2, global_batch=2, seq=32))
    assert one.parameters == two.parameters == pytest.approx(1.2358e9, rel=1e-3)
    assert one.memory.weight_bytes == pytest.approx(2 * one.parameters)  # bf16, the table once
    table = 128256 * 2048 * 2
    layer = (2 * one.parameters - table) / 16  # 16 layers (the last norm's 4 kB aside)
    # each stage: 8 layers and a table (the embedding on the first, the head's copy on the last)
    assert two.memory.weight_bytes == pytest.approx(8 * layer + table, rel=1e-5)


@pytest.mark.slow
def test_expert_parallelism_splits_the_experts_weights_and_adds_all_to_alls():
    """Mixtral-8x7B with EP 4 over the DP ranks (Megatron's layout): each device holds 2 of 8 experts a layer,
    its expert work unchanged (its micro-batch's tokens, top-2), and each MoE layer adds four all-to-alls."""
    hw = load_hardware("h100-sxm")
    base = TrainOptions(pp=4, dp=4, global_batch=8, seq=1024, recompute="full", dtype="bf16")
    one = mapper.train_step("mixtral-8x7b", hw, base)
    four = mapper.train_step("mixtral-8x7b", hw, replace(base, ep=4))
    expert = 3 * 4096 * 14336 * 2  # one expert's bytes (w1, w2, w3 at bf16)
    experts_held = 8 * 8 * expert  # stage 0: 8 layers of 8 experts
    assert one.memory.weight_bytes - four.memory.weight_bytes == pytest.approx(experts_held * 3 / 4, rel=1e-6)
    assert four.parameters == one.parameters == pytest.approx(46.70e9, rel=2e-3)
    # the same expert work a micro-batch, plus the all-to-alls; fewer gradients to reduce (the local experts')
    assert four.micro_batch_s == one.micro_batch_s and four.stage_times_s[0] > one.stage_times_s[0]
    assert four.sync.gradient_bytes < one.sync.gradient_bytes / 2  # experts are ~96% of Mixtral's parameters


def test_train_json_totals(capsys):
    assert main(["train", "gpt2-small", "--seq", "256", "--micro-batch", "2", "--hw", "a100-sxm-80gb", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("step_time_s", "tokens_per_s_per_device", "mfu", "hfu"):
        assert doc["totals"][key] > 0
    assert doc["memory"]["per_device_bytes"] == pytest.approx(
        sum(
            doc["memory"][k]
            for k in (
                "weight_bytes",
                "gradient_bytes",
                "optimizer_bytes",
                "activation_bytes",
                "recompute_working_bytes",
                "logits_bytes",
            )
        )
    )
    assert doc["totals"]["tokens_per_step"] == 2 * 256 and doc["layer"]["layers"] == 12


@pytest.mark.slow
def test_published_training_rows_median_within_ten_percent(capsys):
    """bench/published_training.py: Korthikanti et al. 2022 and Narayanan et al. 2021's GPT iterations on A100
    (14 rows, nothing fitted); the median |error| on iteration time is 5.2% today (every row faster than published:
    -0.4% to -14.5%)."""
    from bench.published_training import main

    assert main([]) <= 0.10
    assert "median |error| over 14 rows" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("hf_llama_tiny.onnx", "fp32"),  # an HF export: its released fp32
        ("optimum_gpt2_tiny_merged.onnx", "fp32"),  # a merged decoder: the branch without a cache
        ("bert_base_int8_dynamic.onnx", "bf16"),  # a quantized release: trained in bf16, and the step says so
    ],
)
def test_exported_models_train(name, dtype, capsys):
    assert main(["train", str(Path(__file__).parent / "models" / name), "--seq", "64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["dtype"] == dtype and doc["totals"]["step_time_s"] > 0
    assert ("not a training precision" in " ".join(doc["assumptions"])) == (dtype != "fp32")


def test_context_parallelism_and_virtual_stages_on_a_small_decoder():
    """Llama-3.2-1B (16 layers) on TP 2 x PP 2: CP 2 halves each layer's activations (the sequence split) and passes
    K/V around the ring; 2 virtual stages halve the bubble (Narayanan et al. 2021 sec. 2.2.2)."""
    hw, config = load_hardware("h100-sxm"), "data/configs/llama-3.2-1b.json"
    base = TrainOptions(tp=2, pp=2, dp=2, global_batch=16, seq=4096)
    plain = mapper.train_step(config, hw, base)
    ring = mapper.train_step(config, hw, replace(base, dp=1, cp=2))
    interleaved = mapper.train_step(config, hw, replace(base, vp=2))
    # dp 1 doubles the micro-batches (16 not 8): the first stage then holds 2 (p) of them as before
    assert ring.memory.activation_bytes == pytest.approx(plain.memory.activation_bytes / 2)
    # the bubble's share of the pipeline, (p - 1) / (m + p - 1) with m = 8, is 1/9; of the step (DP's exposed part and
    # the optimizer outside the pipeline) a little less; interleaved, (p - 1) / v over m + (p - 1) / v
    assert 0.95 / 9 < plain.totals.bubble_share <= 1 / 9
    ratio = interleaved.totals.bubble_share / plain.totals.bubble_share
    assert ratio == pytest.approx((0.5 / 8.5) / (1 / 9), rel=0.05)


@pytest.mark.parametrize(
    ("source", "ffn", "gated", "kv_width"),
    [
        ("data/configs/llama-3-8b.json", 14336, True, 1024),  # SwiGLU, 8 K/V heads of 128
        ("data/configs/gemma-2-9b-it.json", 14336, True, 2048),  # 16 query heads of 256 (4096) over a 3584 width
        ("gpt2-small", 3072, False, 768),  # GeLU MLP of 4h, multi-head
    ],
)
def test_layer_widths_read_off_the_forward(source, ffn, gated, kv_width):
    """What the activation count reads (train.forward.layer_dims), on one device (no TP roles assigned)."""
    r = mapper.train_step(source, load_hardware("h100-sxm"), TrainOptions(global_batch=1, seq=64))
    d = r.forward.dims
    assert (d.ffn, d.gated, d.kv_width) == (ffn, gated, kv_width)
    published = {"llama-3-8b": 8.03e9, "gemma-2-9b-it": 9.24e9, "gpt2-small": 124.44e6}  # data/configs/SOURCES.md
    # (GPT-2's 1024 x 768 position table is read by its embedding's add, not counted: 0.6%)
    assert r.parameters == pytest.approx(published[r.model_name], rel=0.007)
