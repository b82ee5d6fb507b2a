"""Repeated layers reuse one another's records, and the results are those built one by one.

The kernel builder makes one kernel per kind of group (members of equal work kinds, one boundary layout) and
renames it for the other layers (`plan.kernels._build_kernels`); a workload without work kinds builds every
kernel alone. Both must give the same document, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import mapper

MODELS_DIR = Path(__file__).parent / "models"
H100 = mapper.load_hardware("h100-sxm")
CASES = [
    ("bert-base", {"batch": 4, "seq": 96}),
    ("gpt2-small", {"batch": 2, "seq": 33}),
    ("vit-b16", {"batch": 3}),
    (str(MODELS_DIR / "hf_gpt2_tiny.onnx"), {"batch": 8, "seq": 64}),
]


def document(workload: mapper.Workload, fusion: str) -> str:
    doc = mapper.mapping_document(mapper.map_slice(workload, H100, mapper.PlanOptions(dtype="bf16", fusion=fusion)))
    doc.pop("created_utc", None)
    doc.get("provenance", {}).pop("created_utc", None)
    return json.dumps(doc, sort_keys=True)


@pytest.mark.parametrize(("source", "dims"), CASES, ids=lambda c: Path(str(c)).stem if isinstance(c, str) else "")
@pytest.mark.parametrize("fusion", ["none", "aggressive"])
def test_kernels_reused_across_layers_equal_kernels_built_alone(source, dims, fusion):
    reused = mapper.open_model(source).bind(dims)
    alone = dataclasses.replace(mapper.open_model(source).bind(dims), work_kinds=())  # a fresh handle: cold caches
    assert len(set(reused.work_kinds)) < len(reused.work_kinds)  # there are repeats to reuse
    assert document(reused, fusion) == document(alone, fusion)


def test_nodes_of_one_work_kind_do_the_same_work():
    workload = mapper.open_model("bert-base").bind({"batch": 2, "seq": 128})
    first: dict[int, object] = {}
    for work, kind in zip(workload.nodes, workload.work_kinds):
        if kind >= 0:
            other = first.setdefault(kind, work)
            assert dataclasses.replace(work, name="", layer_group=0) == dataclasses.replace(
                other, name="", layer_group=0, layer_type=work.layer_type
            )
