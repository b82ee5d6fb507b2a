"""A GEMM row is mapped as the collector ran it (mapper/evidence/gemm_rows.py): its module's slices, and the clock
its timed passes saw, from the run's length and the profile's power controller (`power.cap_response_s`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mapper.evidence import aiconfigurator as aic
from mapper.evidence.candidates import candidate_profile
from mapper.evidence.gemm_rows import UNCAPPED, capped_share, module_s, pass_ops
from mapper.evidence.validate import predict
from mapper.hardware.load import load_hardware

TRT = "h200_sxm/gemm/trtllm/1.3.0rc20/gemm_perf"
VLLM = "h200_sxm/gemm/vllm/0.24.0/gemm_perf"


def test_the_timed_passes_meet_the_cap_only_past_the_controllers_response():
    """12 passes back to back, the last 6 timed: a run that ends before the response time is all at the full clock,
    one whose timed half starts after it all at the cap, and between them the timed passes after it."""
    assert capped_share(1e-3, 1, 0.07) == 0.0  # a 12 ms run
    assert capped_share(20e-3, 1, 0.07) == 1.0  # timed from 120 ms on
    assert capped_share(10e-3, 1, 0.09) == pytest.approx(0.5)  # timed 60-120 ms, the cap from 90 ms
    assert capped_share(2e-3, 5, 0.07) == pytest.approx((120e-3 - 70e-3) / 60e-3)


def test_the_collectors_calls_a_pass():
    """TensorRT-LLM's weight copies span the L2 (up to 5); vLLM and SGLang call six modules, vLLM one fp8-block."""
    l2 = 50 * 2**20
    assert pass_ops("trtllm", "bf16", 8192, 8192, l2) == 1  # 128 MiB of weights
    assert pass_ops("trtllm", "bf16", 1024, 1024, l2) == 5
    assert pass_ops("trtllm", "fp8", 4096, 4096, l2) == 4  # 16 MiB of fp8 weights: 50 / 16 -> 4 copies
    assert pass_ops("vllm", "bf16", 8192, 8192, l2) == 6 and pass_ops("vllm", "fp8-block", 8192, 8192, l2) == 1
    assert pass_ops("sglang", "bf16", 8192, 8192, l2) == 6


def test_a_short_run_of_a_big_gemm_never_meets_the_cap_and_a_long_one_does():
    """Measured rows (H200, TensorRT-LLM 1.3.0rc20 bf16 Linear, random weights): 8192 x 8192 x 8192 at 1.364 ms a
    call (806 TFLOP/s; the collector's run about 16 ms) and 4353 x 65536 x 51200 at 41.10 ms (711 TFLOP/s over a
    run of about half a second). The profile's FLOP energy (this project's H200 held 3 s at 659 TFLOP/s) slows the
    first 20% when every row is capped; with the controller's response time the first runs at the full clock and
    the second at the cap, each within 5%."""
    h200 = load_hardware("h200-sxm")
    for shape, measured_s, capped in (((8192, 8192, 8192), 1.3638e-3, False), ((4353, 65536, 51200), 41.10e-3, True)):
        row = aic.Row(TRT, "h200_sxm", "gemm", "bf16", shape, measured_s, "", "graph")
        expected = module_s("bf16", shape, "h200-sxm", None if capped else UNCAPPED)
        assert predict(row, "h200-sxm") == pytest.approx(expected, rel=1e-12)
        assert predict(row, "h200-sxm") == pytest.approx(measured_s, rel=0.05)
        with candidate_profile(replace(h200, cap_response_s=None, sha256="no-response")):
            every_row_capped = predict(row, "h200-sxm")
        assert every_row_capped == pytest.approx(module_s("bf16", shape, "h200-sxm"), rel=1e-12)
    short = aic.Row(TRT, "h200_sxm", "gemm", "bf16", (8192, 8192, 8192), 1.3638e-3, "", "graph")
    with candidate_profile(replace(h200, cap_response_s=None, sha256="no-response")):
        assert predict(short, "h200-sxm") / 1.3638e-3 - 1 > 0.15


def test_vllms_weights_as_allocated_never_meet_the_cap():
    """vLLM's bf16 module keeps its weights as `torch.empty` left them: its H200 rows run 828-833 TFLOP/s over runs
    of a second and more (32768 x 51200 x 51200: 206.3 ms a call), where random weights settle near 700; the row is
    mapped at the full clock whatever its run."""
    shape = (32768, 51200, 51200)
    row = aic.Row(VLLM, "h200_sxm", "gemm", "bf16", shape, 206.29e-3, "", "graph")
    assert predict(row, "h200-sxm") == pytest.approx(module_s("bf16", shape, "h200-sxm", UNCAPPED), rel=1e-12)
    assert module_s("bf16", shape, "h200-sxm") > 1.1 * module_s("bf16", shape, "h200-sxm", UNCAPPED)


def test_a_partial_last_wave_spreads_over_every_sm_on_hopper():
    """Measured rows (H200, TensorRT-LLM 1.3.0rc20 bf16 Linear, short runs): 1536 x 1536 x 7168 at 45.9 us (737
    TFLOP/s; 144 output tiles of 128 x 128 on 132 SMs) and 1025 x 1024 x 6144 at 21.9 us against 19.8 at 1024 rows.
    Data-parallel waves leave most of a second wave idle (+34% and +45%); the profile's stream-K schedule spreads the
    tail over every SM (within 15%). A100's profile keeps data-parallel waves (its fit rows do not improve)."""
    from mapper.core.vocab import MatrixSchedule
    from mapper.evidence.candidates import profile_named, with_value

    h200 = profile_named("h200-sxm")
    assert h200.matrix_schedule == MatrixSchedule.STREAM_K and load_hardware("a100-sxm-80gb").matrix_schedule is None
    data_parallel = with_value(h200, "compute.matrix_schedule", None)
    for shape, measured_s in (((1536, 1536, 7168), 45.9e-6), ((1025, 1024, 6144), 21.9e-6)):
        row = aic.Row(TRT, "h200_sxm", "gemm", "bf16", shape, measured_s, "", "graph")
        assert predict(row, "h200-sxm") == pytest.approx(measured_s, rel=0.15)
        with candidate_profile(data_parallel):
            assert predict(row, "h200-sxm") / measured_s - 1 > 0.3


def test_stream_k_is_taken_only_where_it_beats_data_parallel_waves():
    """Three 256 x 128 candidates on H100's 132 SMs: 133 compute-bound tiles (data-parallel: a second wave of one
    tile, half the time idle) take stream-K; 133 tiles whose L2 traffic already sets the time would only add the
    fix-up's partial tiles (2 x 132 fp32 tiles through L2) and stay data-parallel; 264 tiles (two whole waves) have
    no tail. Under stream-K no ResNet-50 kernel is slower than under data-parallel waves."""
    import numpy as np

    from mapper.core.options import PlanOptions
    from mapper.evidence.candidates import with_value
    from mapper.pipeline import load_workload, map_workload
    from mapper.plan.tiling import _stream_k, smooth_max

    h100 = load_hardware("h100-sxm")
    units = h100.compute_units
    tiles = np.array([133.0, 133.0, 264.0])
    work = np.array([50e-6, 5e-6, 50e-6])  # compute time with every unit busy
    l2 = np.array([1e6, 2e8, 1e6])
    dram_s = np.array([1e-6, 1e-6, 1e-6])
    wave_eff = tiles / (np.ceil(tiles / units) * units)
    compute = work / wave_eff
    memory = np.maximum(dram_s, l2 / h100.l2_bandwidth_bytes_per_s)
    time = smooth_max(compute, memory, h100.overlap_exponent)
    eff, _, l2_out, _, time_out = _stream_k(
        tiles, 256 * 128, (work, dram_s, l2, np.ones(3)), (wave_eff, compute, memory, time), h100
    )
    assert eff.tolist() == [1.0, wave_eff[1], 1.0]
    assert time_out[0] < 0.6 * time[0] and time_out[1] == time[1] and l2_out[1] == l2[1] and time_out[2] == time[2]

    workload = load_workload("resnet50", batch=16)
    streamed = map_workload(workload, h100, PlanOptions())
    waves = map_workload(workload, with_value(h100, "compute.matrix_schedule", None), PlanOptions())
    times = {e.kernel.name: e.time_s for e in waves.kernels}
    assert all(e.time_s <= times[e.kernel.name] * (1 + 1e-12) for e in streamed.kernels)
    assert streamed.totals.latency_s < waves.totals.latency_s
