"""Repeated layers reuse one another's records, and the results are those built one by one.

The kernel builder makes one kernel per kind of group (members of equal work kinds, one boundary layout) and
renames it for the other layers (`plan.kernels._build_kernels`); a workload without work kinds builds every
kernel alone. Both must give the same document, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import mapper
from mapper.model.bindings import graph_inputs, resolve_bindings, symbolic_dims
from mapper.model.nodes import ordered_nodes
from mapper.model.repeats import Repeats, find_repeats
from mapper.model.walk import Walk, initializer_walk, value_info_shape
from mapper.work.workload import analyze_graph

MODELS_DIR = Path(__file__).parent / "models"
H100 = mapper.load_hardware("h100-sxm")
CASES = [
    ("bert-base", {"batch": 4, "seq": 96}),
    ("gpt2-small", {"batch": 2, "seq": 33}),
    ("vit-b16", {"batch": 3}),
    (str(MODELS_DIR / "hf_gpt2_tiny.onnx"), {"batch": 8, "seq": 64}),
]


def document(workload: mapper.Workload, fusion: str) -> str:
    doc = mapper.mapping_document(mapper.map_workload(workload, H100, mapper.PlanOptions(dtype="bf16", fusion=fusion)))
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


# ---- repeats: the import copies a repeated layer's outputs (mapper/model/repeats.py) ----------------------------
BINDINGS = {"batch": (8, 1), "seq": (64, 1), "past": (0, 16), "total": (64, 17)}  # as test_determinism's
REPEAT_SOURCES = [
    *(str(p) for p in sorted(MODELS_DIR.glob("*.onnx"))),
    *(n for n in mapper.ZOO_NAMES if n != "llama2-70b"),
]


def structure(model: mapper.ModelHandle):
    """(nodes in execution order, each initializer's interned facts): what `find_repeats` reads."""
    initialized = initializer_walk(model.proto)
    available = frozenset(initialized.specs) | {vi.name for vi in graph_inputs(model.proto)}
    return ordered_nodes(model.proto, available), initialized.kid


def walked(model: mapper.ModelHandle, dims: dict, repeats: Repeats) -> tuple[Walk, bool]:
    """The import walk of `model` at `dims` copying repeats as `repeats` says (an empty Repeats: none), and
    whether every copy was taken."""
    bound = resolve_bindings(model.proto, dims, None, None, symbolic_dims(model.proto))
    walk = Walk(model.proto, bound, model.sha256, model.caches)
    walk.seed(initializer_walk(model.proto))
    for vi in graph_inputs(model.proto):
        walk.set(vi.name, value_info_shape(vi, bound), None)
    return walk, walk.visit_all(structure(model)[0], repeats)


def assert_same_walk(fast: Walk, slow: Walk) -> None:
    assert fast.specs == slow.specs and list(fast.specs) == list(slow.specs)
    assert fast.values.keys() == slow.values.keys()
    assert all(np.array_equal(fast.values[k], slow.values[k]) for k in fast.values)
    assert (fast.folded, fast.const, fast.unresolved) == (slow.folded, slow.const, slow.unresolved)
    assert fast.classes.keys() == slow.classes.keys()
    paired: dict[int, int] = {}  # class numbers may differ between the walks; which nodes share one may not
    assert all(paired.setdefault(fast.classes[n], slow.classes[n]) == slow.classes[n] for n in slow.classes)


@pytest.mark.parametrize("source", REPEAT_SOURCES, ids=lambda s: Path(s).stem)
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_copying_repeated_layers_gives_the_walk_of_every_node(source):
    """Every tensor's spec and folded value, each node's class, what folded and what is unresolved: the same
    whether a repeated layer's nodes copy their twins' outputs or every node is inferred."""
    model = mapper.open_model(source)
    if model.branches:
        pytest.skip("a top-level If: the walk runs on the inlined branch (test_determinism maps it)")
    repeats = find_repeats(*structure(model))
    for which in (0, 1):
        dims = {n: BINDINGS[r][which] for n, r in model.roles.items() if r in BINDINGS}
        (fast, _), (slow, _) = walked(model, dims, repeats), walked(model, dims, Repeats())
        assert_same_walk(fast, slow)


@pytest.mark.parametrize(("name", "period", "copies"), [("bert-base", 39, 11 * 39), ("llama2-7b", 60, 31 * 60)])
def test_a_transformer_layer_is_found_as_one_repeat(name, period, copies):
    """BERT-base: 12 encoder layers of 39 nodes, each copied from the one before; Llama-2-7B's per-layer KV-cache
    inputs are boundary checks of its one stretch, not breaks in it."""
    repeats = find_repeats(*structure(mapper.open_model(name)))
    layers = max(repeats.stretches, key=lambda s: s.end - s.first)
    assert layers.period == period and layers.end - layers.first >= copies, repeats.stretches
    assert all(repeats.twin[j] == j - s.period for s in repeats.stretches for j in range(s.first, s.end))


def test_a_repeat_whose_boundary_disagrees_is_inferred_node_by_node():
    """A stretch is copied only where its boundary tensors agree at the binding: checked against a pair of
    another shape, nothing is copied and the walk is still every node's."""
    model = mapper.open_model("bert-base")
    repeats = find_repeats(*structure(model))
    (stretch,) = repeats.stretches
    wrong = dataclasses.replace(stretch, checks=(("input_ids", "/embeddings/LayerNorm/LayerNormalization_output_0"),))
    (fast, copied), (slow, _) = (
        walked(model, {"batch": 2, "seq": 16}, repeats),
        walked(model, {"batch": 2, "seq": 16}, Repeats()),
    )
    assert copied and not walked(model, {"batch": 2, "seq": 16}, dataclasses.replace(repeats, stretches=(wrong,)))[1]
    assert_same_walk(walked(model, {"batch": 2, "seq": 16}, dataclasses.replace(repeats, stretches=(wrong,)))[0], slow)
    assert_same_walk(fast, slow)


@pytest.mark.parametrize(("source", "dims"), CASES, ids=lambda c: Path(str(c)).stem if isinstance(c, str) else "")
def test_work_copied_from_twins_equals_work_estimated_node_by_node(source, dims):
    """The work model takes a copy's work and kind from its twin (`Graph.twins`): the same records and kinds as
    looking each node's class up."""
    model = mapper.open_model(source)
    first = model.bind({k: v + 1 for k, v in dims.items()})
    workload = model.bind(dims)  # the second binding: repeats are looked for from it on
    assert first.graph.twins == () and sum(t >= 0 for t in workload.graph.twins) > 0  # some nodes were copied
    alone = analyze_graph(
        dataclasses.replace(workload.graph, twins=()), mapper.open_model(source).caches, walk_classes(model, dims), True
    )
    assert alone.nodes == workload.nodes and alone.work_kinds == workload.work_kinds


def walk_classes(model: mapper.ModelHandle, dims: dict) -> dict[str, int]:
    """Each node's class from a walk that copies nothing (a built-in's free dims at their defaults)."""
    defaults = {k: mapper.BUILTIN_DEFAULT_DIMS[k] for k in model.roles if model.builtin and k not in dims}
    return walked(model, {**defaults, **dims}, Repeats())[0].classes


def test_a_stretch_whose_twins_were_found_is_copied_whole(monkeypatch):
    """BERT-base's one stretch (11 layers) is written at once (`Walk.copy_stretch`), not node by node, and gives
    the walk of every node."""
    model = mapper.open_model("bert-base")
    repeats = find_repeats(*structure(model))
    whole = []
    copy_stretch = Walk.copy_stretch

    def counted(walk, stretch, found):
        copied = copy_stretch(walk, stretch, found)
        if copied:
            whole.append(stretch)
        return copied

    monkeypatch.setattr(Walk, "copy_stretch", counted)
    (fast, copied), (slow, _) = (
        walked(model, {"batch": 3, "seq": 40}, repeats),
        walked(model, {"batch": 3, "seq": 40}, Repeats()),
    )
    assert copied and whole == list(repeats.stretches)
    assert_same_walk(fast, slow)
