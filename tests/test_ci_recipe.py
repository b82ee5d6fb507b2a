"""scripts/ci_recipe.sh, the manual's CI job (docs/manual.md), run twice against one store: a model repository at
revision r1, then with a model changed (a 4x larger GEMM) at r2. The second run fails on the p99
regression (exit 1) and both leave their sheets as artifacts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import helper

import mapper
from mapper.core.errors import MapperError
from mapper.model.dim_defaults import default_bindings, parse_bindings
from mapper.store.trend import load_trends
from tests.conftest import gemm_model, make_model, tensor

pytestmark = pytest.mark.slow  # the CI recipe's CLI runs in child processes: 4-40 s each

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
        "LOAD": "--rate=1000 --requests=200",  # a given load (its p99 is what FAIL_ON checks), 200 requests simulated
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


# Exports as users make them (tests/models/README.md: torch's dynamo exporter and Optimum, random weights), each
# exporter naming its dims its own way: dynamo's batch/seq, Optimum's batch_size/sequence_length/
# past_sequence_length with its merged decoder's use_cache_branch, a decode graph's past_seq and total_seq.
EXPORTS = ("hf_bert_tiny.onnx", "optimum_gpt2_tiny_merged.onnx", "hf_llama_tiny_decode.onnx")


def _recorded_dims(store: str, revision: str) -> dict[str, dict]:
    """Each model's dims as its `map` run recorded them at this revision."""
    return {
        t.model_name: t.dims
        for t in load_trends(store)
        if t.command == "map" and any(p.revision == revision for p in t.points)
    }


def test_ci_recipe_binds_every_exporters_symbolic_dims_by_default_and_by_dims(tmp_path):
    """A folder of real exports with symbolic dims maps and reviews with no DIMS (each dim at its role's default),
    DIMS by role rebinds every exporter's own name, and a packet of each model is kept."""
    models, store = tmp_path / "models", f"sqlite:///{tmp_path / 'team.sqlite'}"
    models.mkdir()
    for name in EXPORTS:
        (models / name).write_bytes((ROOT / "tests" / "models" / name).read_bytes())
    done = run_recipe(models, tmp_path / "a", store, "r1")
    assert done.returncode == 0, done.stderr
    assert "ci_recipe: optimum_gpt2_tiny_merged: --dim=use_cache_branch=0 --dim=batch_size=1" in done.stderr
    assert _recorded_dims(store, "r1") == {
        "hf_bert_tiny": {"batch": 1, "seq": 128},
        "optimum_gpt2_tiny_merged": {
            "use_cache_branch": 0,
            "batch_size": 1,
            "sequence_length": 128,
            "past_sequence_length": 0,
        },
        "hf_llama_tiny_decode": {"batch": 1, "seq": 128, "total_seq": 128, "past_seq": 0},
    }
    assert sorted(p.name for p in (tmp_path / "a").glob("*_review.zip")) == [
        f"{n.removesuffix('.onnx')}_h100-sxm_review.zip" for n in sorted(EXPORTS)
    ]
    done = run_recipe(models, tmp_path / "b", store, "r2", dims="batch=2 seq=1 past=32 no_such_dim=5")
    assert done.returncode == 0, done.stderr
    assert _recorded_dims(store, "r2") == {
        "hf_bert_tiny": {"batch": 2, "seq": 1},
        "optimum_gpt2_tiny_merged": {
            "use_cache_branch": 1,  # a cache is bound: the branch that reads it
            "batch_size": 2,
            "sequence_length": 1,
            "past_sequence_length": 32,
        },
        "hf_llama_tiny_decode": {"batch": 2, "seq": 1, "total_seq": 33, "past_seq": 32},
    }


def test_ci_recipe_stops_on_a_dim_without_a_default_naming_it(tmp_path):
    """A dim whose meaning no role or name gives is not guessed: exit 2 naming it, and DIMS binds it by name."""
    models, store = tmp_path / "models", f"sqlite:///{tmp_path / 'team.sqlite'}"
    models.mkdir()
    relu = helper.make_node("Relu", ["x"], ["y"])
    shape = [1, 4, "features"]  # not at the batch or sequence axis: no role reads it
    (models / "odd.onnx").write_bytes(make_model([relu], [tensor("x", shape)], [tensor("y", shape)]))
    stopped = run_recipe(models, tmp_path / "a", store, "r1")
    assert stopped.returncode == 2 and "no default for dim features (other)" in stopped.stderr
    done = run_recipe(models, tmp_path / "b", store, "r1", dims="features=64")
    assert done.returncode == 0, done.stderr
    assert _recorded_dims(store, "r1") == {"odd": {"features": 64}}


@pytest.mark.parametrize(
    ("export", "given", "bound"),
    [
        ("hf_bert_tiny.onnx", {}, {"batch": 1, "seq": 128}),
        ("hf_bert_tiny.onnx", {"seq": 512, "batch_size": 9}, {"batch": 1, "seq": 512}),  # a name it lacks: left out
        (
            "optimum_gpt2_tiny_with_past.onnx",
            {"batch": 4},
            {"batch_size": 4, "sequence_length": 128, "past_sequence_length": 0},
        ),
        (
            "optimum_gpt2_tiny_merged.onnx",
            {"past": 8, "seq": 1},
            {"use_cache_branch": 1, "batch_size": 1, "sequence_length": 1, "past_sequence_length": 8},
        ),
        ("hf_llama_tiny_decode.onnx", {"past_seq": 100}, {"batch": 1, "seq": 128, "total_seq": 228, "past_seq": 100}),
        ("hf_llama_tiny_decode.onnx", {"seq": 8, "total": 40}, {"batch": 1, "seq": 8, "total_seq": 40, "past_seq": 0}),
    ],
)
def test_default_bindings_read_each_exporters_dims_by_role_and_name(export, given, bound):
    model = mapper.open_model(str(ROOT / "tests" / "models" / export))
    assert default_bindings(model.roles, given) == bound
    assert dict(model.bind(bound).graph.dims) == bound  # the engine takes them as they are


def test_default_bindings_name_table_and_bad_words():
    vision = {"batch_size": "batch", "num_channels": "other", "height": "other", "width": "other"}
    assert default_bindings(vision) == {"batch_size": 1, "num_channels": 3, "height": 224, "width": 224}
    with pytest.raises(MapperError, match=r"no default for dim features \(other\)"):
        default_bindings({"batch": "batch", "features": "other"})
    assert parse_bindings(["seq=512", "past=0"]) == {"seq": 512, "past": 0}
    for bad in ("seq", "seq=-1", "=4", "seq=1.5", "seq=٣"):
        with pytest.raises(MapperError, match="NAME=INTEGER"):
            parse_bindings([bad])
