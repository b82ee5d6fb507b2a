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
    kinds = {
        "gemm",
        "attention-fused",
        "attention-unfused",
        "attention-decode-gqa",
        "attention-decode",
        "layernorm",
        "rmsnorm",
        "softmax",
        "add",
    }
    assert set(rows) == kinds
    assert rows["attention-fused"]["kernels"] == 1  # FlashAttention: one kernel
    assert rows["attention-decode"]["kernels"] == 1
    assert rows["attention-decode-gqa"]["kernels"] == 1  # the repeated K and V ride inside the fused kernel
    assert rows["attention-unfused"]["kernels"] >= 4  # QK^T, scale, softmax, PV apart
    gemm = rows["gemm"]
    assert gemm["predicted_tflops_per_s"] == pytest.approx(2 * 8192**3 / gemm["predicted_s"] / 1e12)
    assert gemm["error"] == pytest.approx((gemm["predicted_s"] - 0.00138) / 0.00138)  # graph_s, not median_s
    assert rows["layernorm"]["predicted_class"] == "memory-bound"
    assert rows["attention-decode"]["predicted_class"] == "memory-bound"  # one query a sequence reads the cache


def test_eager_timing_reads_the_eager_column_with_launch_costs(h100):
    graph = {r["kind"]: r for r in compare_kernel_csv(SAMPLE, h100)}
    eager = {r["kind"]: r for r in compare_kernel_csv(SAMPLE, h100, timing="eager")}
    assert eager["gemm"]["measured_s"] == 0.00139 and graph["gemm"]["measured_s"] == 0.00138
    gap = h100.kernel_launch_s - h100.graph_launch_s
    assert eager["add"]["predicted_s"] - graph["add"]["predicted_s"] == pytest.approx(gap, rel=1e-6)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("gemm,8x8,bfloat16,1,1,1", "not 3 positive sizes"),
        ("conv,8x8,bfloat16,1,1,1", "kind 'conv'"),
        ("add,0x8,bfloat16,1,1,1", "not 2 positive sizes"),
        ("add,8x8,int3,1,1,1", "int3"),
    ],
)
def test_a_malformed_row_is_one_line(tmp_path, h100, line, named):
    bad = tmp_path / "bad.csv"
    bad.write_text("kind,shape,dtype,median_s,best_s,graph_s\n" + line + "\n")
    with pytest.raises(mapper.MapperError, match=named):
        compare_kernel_csv(bad, h100)


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
    rows = compare_kernel_csv(out, mapper.load_hardware("cpu-x86"), timing="eager")
    assert {r["kind"] for r in rows} >= {"gemm", "attention-fused", "attention-decode", "layernorm", "add"} and torch
