"""A slice's document never depends on what was mapped before it.

Every model in tests/models and every built-in (the 70B aside, for time) at two bindings, mapped on one
model handle in both orders: each `--json` document (less created_utc) must equal a cold mapping of
the same slice on a fresh handle, byte for byte. The fusion-plan cache once left the bindings out of
its key (the planner's tiny-operand rule reads sizes): GPT-2 at batch 8 x seq 64 gave 36 kernels cold
and 34 after batch 1 x seq 1.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import mapper

MODELS_DIR = Path(__file__).parent / "models"
SOURCES = [*(str(p) for p in sorted(MODELS_DIR.glob("*.onnx"))), *(n for n in mapper.ZOO_NAMES if n != "llama2-70b")]
# Two bindings by role: a large slice and a small one (whose small tensors fall under the planner's
# tiny-operand size), a prefill and a decode step where the model has a KV cache, both branches.
BINDINGS = {"batch": (8, 1), "seq": (64, 1), "past": (0, 16), "total": (64, 17), "branch": (0, 1)}
H100 = mapper.load_hardware("h100-sxm")


def document(workload: mapper.Workload) -> str:
    return result_document(mapper.map_workload(workload, H100, mapper.PlanOptions(dtype="bf16")))


def assessed_document(model: str, dims: dict) -> str:
    """The slice's assessment (served at a given rate, its fixes re-mapped) as the document every view reads."""
    question = mapper.Question(mapper.ServeRequest(mapper.ServingConfig(rate_per_s=2.0)), rate_given=True)
    handle = mapper.open_model(model)
    return result_document(mapper.assess_slice(handle, dims, H100, mapper.PlanOptions(dtype="bf16"), question).result)


def result_document(result: mapper.MappingResult) -> str:
    doc = mapper.mapping_document(result)
    doc.get("provenance", {}).pop("created_utc", None)
    doc.pop("created_utc", None)
    return json.dumps(doc, sort_keys=True, allow_nan=False)


def bindings(model: mapper.ModelHandle) -> tuple[dict, dict]:
    pairs = {name: BINDINGS[role] for name, role in model.roles.items() if role in BINDINGS}
    return {k: v[0] for k, v in pairs.items()}, {k: v[1] for k, v in pairs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda s: Path(s).stem)
def test_a_slice_maps_the_same_whatever_was_mapped_before(source):
    first, second = bindings(mapper.open_model(source))
    cold = {key: document(mapper.open_model(source).bind(dims)) for key, dims in (("a", first), ("b", second))}
    for order in (("a", "b"), ("b", "a")):
        model = mapper.open_model(source)
        for key in order:
            assert document(model.bind(first if key == "a" else second)) == cold[key], (source, order, key)


def test_the_gpt2_defect_slice_has_its_cold_kernel_count():
    """The slice the defect was found on: 36 kernels cold, and still 36 after the small slice."""
    model = mapper.open_model(str(MODELS_DIR / "hf_gpt2_tiny.onnx"))
    small = mapper.map_workload(model.bind({"batch": 1, "seq": 1}), H100, mapper.PlanOptions(dtype="bf16"))
    big = mapper.map_workload(model.bind({"batch": 8, "seq": 64}), H100, mapper.PlanOptions(dtype="bf16"))
    cold = mapper.map_workload(
        mapper.load_workload(str(MODELS_DIR / "hf_gpt2_tiny.onnx"), {"batch": 8, "seq": 64}),
        H100,
        mapper.PlanOptions(dtype="bf16"),
    )
    assert len(big.kernels) == len(cold.kernels) == 36
    assert len(small.kernels) != len(big.kernels)


def test_a_pickled_workload_maps_as_the_original():
    """Results and workloads pickle (st.cache_data holds them); the model's caches travel empty."""
    model = mapper.open_model("bert-base")
    workload = model.bind({"batch": 2, "seq": 32})
    mapper.map_workload(workload, H100)
    assert model.caches.size() > 0
    copy = pickle.loads(pickle.dumps(workload))
    assert copy.caches.size() == 0
    assert document(copy) == document(workload)
    reopened = pickle.loads(pickle.dumps(model))
    assert reopened.sha256 == model.sha256 and reopened.name == model.name


def test_a_rebinding_shares_the_workload_and_another_binding_does_not():
    """The handle keeps workloads by their bindings (ModelCaches.workload): the same dims, spelled as named
    dims or through the shortcuts, give the one workload; a dim that differs gives its own shapes."""
    model = mapper.open_model("bert-base")
    first = model.bind({"batch": 2, "seq": 32})
    assert model.bind({"seq": 32, "batch": 2}) is first
    assert model.bind(batch=2, seq=32).graph.dims == first.graph.dims
    other = model.bind({"batch": 3, "seq": 32})
    assert other is not first and dict(other.graph.dims)["batch"] == 3
    assert document(model.bind({"batch": 2, "seq": 32})) == document(
        mapper.load_workload("bert-base", {"batch": 2, "seq": 32})
    )


@pytest.mark.slow
def test_another_process_gives_the_same_document():
    """Same slice, another interpreter (another hash seed): the same bytes."""
    root = str(Path(__file__).parents[1])
    code = (
        f"import sys; sys.path.insert(0, {root!r}); from tests.test_determinism import document; import mapper;"
        "print(document(mapper.load_workload('gpt2-small', {'batch': 2, 'seq': 16, 'past': 8})));"
        "from tests.test_determinism import assessed_document;"
        "print(assessed_document('gpt2-small', {'batch': 2, 'seq': 1, 'past': 64}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout.strip()
    mapped = document(mapper.load_workload("gpt2-small", {"batch": 2, "seq": 16, "past": 8}))
    assert out == mapped + "\n" + assessed_document("gpt2-small", {"batch": 2, "seq": 1, "past": 64})


def test_no_engine_module_keeps_a_cache():
    """State lives on the model handle: no module-level cache (BoundedCache, lru_cache) in mapper/."""
    root = Path(mapper.__file__).parent
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if any(marker in p.read_text() for marker in ("BoundedCache(", "per_object(", "_CACHES"))
    ]
    assert offenders == []


def test_a_flash_attention_split_back_maps_the_same_on_a_rebound_handle():
    """On 4 KiB of SRAM a fused attention's tiles do not fit: its members become single kernels, each placed on
    first need beside the plan's groups (`boundary.GroupPlaces.of`); a handle that placed them at another binding
    (and found the layers' repeats) gives the cold mapping's document."""
    small = mapper.edit_profile(mapper.load_hardware("h100-sxm"), {"memory.sram_per_unit_bytes": 4096})
    options = mapper.PlanOptions(dtype="bf16", fusion="aggressive")
    handle = mapper.open_model("bert-base")
    for dims in ({"batch": 1, "seq": 32}, {"batch": 2, "seq": 128}, {"batch": 3, "seq": 64}):
        warm = mapper.map_workload(handle.bind(dims), small, options)
        cold = mapper.map_workload(mapper.open_model("bert-base").bind(dims), small, options)
        assert result_document(warm) == result_document(cold)
        split = [e.kernel for e in warm.kernels if e.kernel.note.startswith("flash-attention rejected")]
        assert len(split) > 12 and all(len(k.nodes) == 1 and k.rule == "single" for k in split)
        # each is the node's own kernel, as the one-kernel-per-op policy builds it, but for the note and the name
        # (its step in the attention it was split from: "encoder.layer.0.attention · attention step 5 of 9: matmul")
        unfused = mapper.map_workload(handle.bind(dims), small, dataclasses.replace(options, fusion="none"))
        alone = {e.kernel.nodes[0]: e.kernel for e in unfused.kernels if len(e.kernel.nodes) == 1}
        bare = {"note": "", "name": ""}
        assert all(dataclasses.replace(k, **bare) == dataclasses.replace(alone[k.nodes[0]], **bare) for k in split)
        assert all(" · attention step " in k.name for k in split)
