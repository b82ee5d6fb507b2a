"""Every benchmark stays runnable: each bench/ module imports (its argument parser and helpers with it), and the
hostile-input bench runs end to end on a tiny setting. A bench that needs what CI lacks (a GPU's torch) imports
it inside main, so importing the module still checks everything else."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__"))
def test_every_bench_module_imports(name):
    module = importlib.import_module(f"bench.{name}")
    assert module.__doc__, f"bench/{name}.py says what it measures in its docstring"


@pytest.mark.slow
def test_bench_hostile_runs_on_a_tiny_setting(capsys):
    from bench.bench_hostile import main

    figures = main(["--cases", "limits", "--scale", "0.001"])
    assert [f.exit_code for f in figures] == [0] * len(figures)
    assert all(f.peak_bytes > 0 and f.wall_s > 0 for f in figures)
    assert "MAX_EDGES" in capsys.readouterr().out


@pytest.mark.slow
def test_fit_matrix_dram_runs_on_a_tiny_sample(capsys):
    """The matrix DRAM curve's fit (bench/fit_matrix_dram.py) end to end on 3 bf16 rows a table: a non-decreasing
    curve over the fixed and searched knots, both splits reported, and the built-in profile mapped again after it
    (candidates.candidate_profile leaves no candidate behind)."""
    pytest.importorskip("aiconfigurator_core")
    from bench.fit_matrix_dram import FITTED, FIXED, main
    from mapper.evidence import aiconfigurator as aic
    from mapper.evidence.candidates import profile_named
    from mapper.evidence.validate import predict
    from mapper.hardware.load import load_hardware

    row = aic.Row("b200_sxm/gemm/trtllm/1.3.0rc20/gemm_perf", "b200_sxm", "gemm", "bf16", (1, 4096, 4096), 1e-5, "", "")
    before = predict(row, "b200")
    curve = main(["--device", "b200", "--sample", "3"])
    assert [x for x, _ in curve.points] == sorted((*FIXED, *FITTED))
    assert all(a <= b for (_, a), (_, b) in zip(curve.points, curve.points[1:], strict=False))
    out = capsys.readouterr().out
    assert "held-back" in out and "matrix_dram_by_bytes = { value = [[" in out
    assert profile_named("b200").sha256 == load_hardware("b200").sha256 and predict(row, "b200") == before


@pytest.mark.slow
def test_fit_cap_response_runs_on_a_tiny_sample(capsys):
    """The power controller's response time (bench/fit_cap_response.py) fitted on 20 bf16 rows a table: a value
    of the grid, both splits and the objective reported, the built-in profile left as it was."""
    pytest.importorskip("aiconfigurator_core")
    from bench.fit_cap_response import GRID_S, main
    from mapper.hardware.load import load_hardware

    before = load_hardware("h200-sxm").cap_response_s
    assert main(["--device", "h200-sxm", "--sample", "20"]) in GRID_S
    out = capsys.readouterr().out
    assert "held back" in out and "objective" in out and "cap_response_s = { value = " in out
    assert load_hardware("h200-sxm").cap_response_s == before
