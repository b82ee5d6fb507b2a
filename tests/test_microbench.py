"""The GPU micro-benchmark comparison: each measured row's one-op graph mapped with the plan it ran.

tests/data/kernel_csv_format_sample.csv has the columns bench/gpu_kernels.py writes; its times are
made up for the test (no GPU here): only the comparison's mechanics are checked, not accuracy."""

from __future__ import annotations

from pathlib import Path

import pytest

import mapper
from mapper.evidence.microbench import compare_kernel_csv

SAMPLE = Path(__file__).parent / "data" / "kernel_csv_format_sample.csv"


def test_every_row_is_mapped_with_the_plan_it_ran(h100):
    rows = {r["kind"]: r for r in compare_kernel_csv(SAMPLE, h100)}
    assert set(rows) == {"gemm", "attention-fused", "attention-unfused", "layernorm", "rmsnorm", "softmax"}
    assert rows["attention-fused"]["kernels"] == 1  # FlashAttention: one kernel
    assert rows["attention-unfused"]["kernels"] >= 4  # QK^T, scale, softmax, PV apart
    gemm = rows["gemm"]
    assert gemm["predicted_tflops_per_s"] == pytest.approx(2 * 8192**3 / gemm["predicted_s"] / 1e12)
    assert gemm["error"] == pytest.approx((gemm["predicted_s"] - 0.00139) / 0.00139)
    assert rows["layernorm"]["predicted_class"] == "memory-bound"


def test_a_bad_row_names_itself(tmp_path, h100):
    bad = tmp_path / "bad.csv"
    bad.write_text("kind,shape,dtype,median_s\ngemm,8x8,bfloat16,abc\n")
    with pytest.raises(mapper.MapperError, match="row 2"):
        compare_kernel_csv(bad, h100)


def test_the_gpu_script_runs_on_the_cpu(tmp_path):
    torch = pytest.importorskip("torch")  # not a project dependency: the script runs where torch is
    from bench.gpu_kernels import main

    out = tmp_path / "k.csv"
    assert main(["--device", "cpu", "--quick", "--out", str(out), "--repeats", "3"]) == 0
    rows = compare_kernel_csv(out, mapper.load_hardware("cpu-x86"))
    assert {r["kind"] for r in rows} >= {"gemm", "attention-fused", "layernorm"} and torch
