"""scripts/ci_recipe.sh, the manual's CI job (docs/manual.md), run twice against one store: a model repository at
revision r1, then with a model changed (a 4x larger GEMM) at r2. The second run fails on the p99
regression (exit 1) and both leave their sheets as artifacts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mapper.store.trend import load_trends
from tests.conftest import gemm_model

ROOT = Path(__file__).resolve().parents[1]


def run_recipe(models: Path, out: Path, store: str, revision: str, dims: str = "") -> subprocess.CompletedProcess:
    env = {
        "DIMS": dims,
        **os.environ,
        "MAPPER_STORE": store,
        "MODEL_DIR": str(models),
        "OUT": str(out),
        "REVISION": revision,
        "FAIL_ON": "p99=0.05 mfu=0.05",
        "MAPPER": f"{sys.executable} -m mapper",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "ci_recipe.sh")],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_ci_recipe_twice_fails_on_the_changed_model(tmp_path):
    models, store = tmp_path / "models", f"sqlite:///{tmp_path / 'team.sqlite'}"
    models.mkdir()
    (models / "proj.onnx").write_bytes(gemm_model(1024, 1024, 1024))
    (models / "head.onnx").write_bytes(gemm_model(256, 256, 256))
    first = run_recipe(models, tmp_path / "a1", store, "r1")
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in (tmp_path / "a1").glob("*.xlsx")) == ["head_h100-sxm.xlsx", "proj_h100-sxm.xlsx"]
    (models / "proj.onnx").write_bytes(gemm_model(2048, 2048, 1024))  # the model's revision: 4x the work
    second = run_recipe(models, tmp_path / "a2", store, "r2")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "REGRESSION p99" in second.stdout and "(r1 -> r2" in second.stdout
    assert (tmp_path / "a2" / "trend.txt").read_text() == second.stdout
    assert len((tmp_path / "a2" / "proj_h100-sxm.xlsx").read_bytes()) > 0
    trends = {t.model_name: t for t in load_trends(store)}
    assert [p.revision for p in trends["proj"].points] == ["r1", "r2"]
    assert trends["proj"].points[0].model_sha256 != trends["proj"].points[1].model_sha256
    assert trends["head"].points[0].model_sha256 == trends["head"].points[1].model_sha256


def test_ci_recipe_binds_symbolic_dims_and_keeps_each_review_packet(tmp_path):
    """A repository of exported models (free batch and seq dims): DIMS binds them for map and review alike."""
    models, store = tmp_path / "models", f"sqlite:///{tmp_path / 'team.sqlite'}"
    models.mkdir()
    (models / "bert.onnx").write_bytes((ROOT / "tests" / "models" / "hf_bert_tiny.onnx").read_bytes())
    assert run_recipe(models, tmp_path / "none", store, "r0").returncode == 2  # unbound dims: one line, exit 2
    done = run_recipe(models, tmp_path / "a", store, "r1", dims="batch=2 seq=16")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a" / "bert_h100-sxm_review.zip").stat().st_size > 0
    assert [p.revision for p in load_trends(store)[0].points] == ["r1"]
