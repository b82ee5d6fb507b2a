"""Every input a mapping reads is in the keys of the memos it passes through.

A model handle keeps each stage's answers (`core.caches.ModelCaches`): a key that misses an input gives a later
slice an earlier slice's answer. Here every plan option (the list is `PlanOptions`' own fields: a new option
fails this test until it is given a changed value), every kind of binding and one number of each profile section
are changed, one at a time, on a handle that has mapped the base slice; the answer must be the changed slice
mapped on a fresh handle, and (where the change reaches the figures of that model) differ from the base.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import mapper
from mapper.core.options import PlanOptions

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
BASE = {"dtype": "bf16", "launch": "eager", "runtime": "onnxruntime"}

# field -> (model, a changed value, whether the change moves that model's figures)
OPTION_CHANGES = {
    "dtype": ("llama2-7b", "fp16", True),
    "weight_dtype": ("llama2-7b", "int4", True),
    "fusion": ("llama2-7b", "none", True),
    "attention_fusion": ("llama2-7b", True, True),
    "layout": ("resnet50", "nchw", True),
    "power_cap_w": ("llama2-7b", 150.0, True),
    "tp": ("llama2-7b", 2, True),
    "pp": ("llama2-7b", 2, True),
    "dp": ("llama2-7b", 2, True),
    "overlap_collectives": ("llama2-7b-tp2", True, True),
    "runtime": ("llama2-7b", "vllm", True),
    "kv_cache": ("llama2-7b-decode", "in-place", True),
    "launch": ("llama2-7b", "graph", True),
    "sparsity": ("llama2-7b", "2:4", True),
    "ep": ("mixtral-8x7b", 2, True),
    "expert_imbalance": ("mixtral-8x7b", 1.5, True),
    "kv_dtype": ("llama2-7b", "fp8", True),
    "gqa_decode": ("llama3-8b-decode", "per-head", True),
    "attention_dp": ("mixtral-8x7b-ep2", True, True),
    "expert_tp": ("mixtral-8x7b-ep4-dp", True, True),
}

MODELS = {
    "llama2-7b": ("llama2-7b", {"batch": 2, "seq": 64, "past": 0}, {}),
    "llama2-7b-tp2": ("llama2-7b", {"batch": 2, "seq": 64, "past": 0}, {"tp": 2}),
    "llama2-7b-decode": ("llama2-7b", {"batch": 4, "seq": 1, "past": 512}, {}),
    "llama3-8b-decode": (str(CONFIGS / "llama-3-8b.json"), {"batch": 16, "seq": 1, "past": 4096}, {"runtime": "vllm"}),
    "resnet50": ("resnet50", {"batch": 2}, {}),
    "mixtral-8x7b": ("mixtral-8x7b", {"batch": 2, "seq": 1, "past": 128}, {"tp": 2}),
    "mixtral-8x7b-ep2": ("mixtral-8x7b", {"batch": 2, "seq": 1, "past": 128}, {"ep": 2}),
    "mixtral-8x7b-ep4-dp": ("mixtral-8x7b", {"batch": 2, "seq": 1, "past": 128}, {"ep": 4, "attention_dp": True}),
}

PROFILE_CHANGES = {
    "compute": {"compute.clock_hz": 1.5e9},
    "memory": {"memory.dram_bandwidth_bytes_per_s": 2.0e12},
    "overhead": {"overhead.kernel_launch_s": 9e-6},
    "power": {"power.idle_w": 40.0},
    "interconnect": {"interconnect.link_bandwidth_bytes_per_s": 1.0e11},
    "efficiency": {"efficiency.overlap_exponent": 3.0},
}


def _document(result) -> dict:
    doc = json.loads(json.dumps(mapper.mapping_document(result)))
    doc.pop("created_utc")
    return doc


def _figures(doc: dict) -> dict:
    return {k: v for k, v in doc["totals"].items() if k != "dtype"}


def _answers(model: str, dims: dict, hw_base, base: dict, hw, changed: dict, dims_changed: dict | None = None):
    """(base on a handle, the changed slice on that warm handle, the changed slice on a fresh handle)."""
    warm = mapper.open_model(model)
    first = _document(mapper.map_workload(warm.bind(dims), hw_base, PlanOptions(**base)))
    again_dims = dims_changed or dims
    again = _document(mapper.map_workload(warm.bind(again_dims), hw, PlanOptions(**changed)))
    cold = _document(mapper.map_workload(mapper.open_model(model).bind(again_dims), hw, PlanOptions(**changed)))
    return first, again, cold


def test_every_option_has_a_change():
    assert set(OPTION_CHANGES) == {f.name for f in dataclasses.fields(PlanOptions)}


@pytest.mark.slow
@pytest.mark.parametrize("field", sorted(OPTION_CHANGES))
def test_a_changed_option_on_a_warm_handle_maps_as_a_fresh_one(field):
    case, value, moves = OPTION_CHANGES[field]
    model, dims, extra = MODELS[case]
    hw = mapper.load_hardware("h100-sxm")
    base = BASE | extra
    changed = base | {field: value}
    if field == "runtime":
        changed.pop("launch")  # the preset's own launch
    first, again, cold = _answers(model, dims, hw, base, hw, changed)
    assert again == cold, field
    assert (_figures(again) != _figures(first)) == moves, field


BINDING_CHANGES = [
    ("llama2-7b", {"batch": 3}),
    ("llama2-7b", {"seq": 48}),
    ("llama2-7b", {"past": 256}),
    ("mixtral-8x7b-ep2", {"batch": 3}),  # the experts' routing figures (`experts.ExpertSites`) follow the tokens
    ("mixtral-8x7b-ep4-dp", {"past": 256}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "dims"), BINDING_CHANGES, ids=lambda d: d if isinstance(d, str) else next(iter(d)))
def test_a_changed_binding_on_a_warm_handle_maps_as_a_fresh_one(case, dims):
    model, base_dims, extra = MODELS[case]
    hw = mapper.load_hardware("h100-sxm")
    first, again, cold = _answers(model, base_dims, hw, BASE | extra, hw, BASE | extra, base_dims | dims)
    assert again == cold and _figures(again) != _figures(first)


@pytest.mark.slow
@pytest.mark.parametrize("section", sorted(PROFILE_CHANGES))
def test_a_changed_profile_on_a_warm_handle_maps_as_a_fresh_one(section):
    model, dims, extra = MODELS["llama2-7b-tp2"]
    hw = mapper.load_hardware("h100-sxm")
    edited = mapper.edit_profile(hw, PROFILE_CHANGES[section])
    first, again, cold = _answers(model, dims, hw, BASE | extra, edited, BASE | extra)
    assert again == cold, section
    assert _figures(again) != _figures(first), section
