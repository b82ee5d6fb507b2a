"""What a handle keeps per structure gives what computing it at each binding gives.

The weight tally is kept per structure for the weights whose specs are the model's, a binding adding those a
folded node derives (`Graph.derived_weights`); equal fusion plans made for two tiny sets are one plan; a repeated
layer's kernel is assessed as the first of its kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mapper
from mapper.core.caches import ModelCaches
from mapper.core.timeline import Kernels
from mapper.core.vocab import FusionPolicy
from mapper.cost.assess import estimate_kernels
from mapper.hardware.target import device_target
from mapper.model.onnx_import import import_graph
from mapper.plan.attention_tiling import attention_fits
from mapper.plan.fusion import Group, plan_fusion
from mapper.plan.kernels import build_kernels
from mapper.plan.precision import Sizer, weight_tally
from mapper.work.kinds import estimate_work_kinds, work_roles
from mapper.work.layers import layer_placer

MODELS = Path(__file__).parent / "models"


@pytest.mark.parametrize(
    "source, bindings",
    [
        ("bert-base", ({"batch": 1, "seq": 16}, {"batch": 7, "seq": 96})),  # two derived embedding Gathers
        ("resnet50", ({"batch": 1}, {"batch": 5})),
        (MODELS / "resnet50_int8_qdq.onnx", ({"batch": 1}, {"batch": 3})),  # folded DequantizeLinear weights
        (MODELS / "bert_base_int8_dynamic.onnx", ({"batch": 1, "seq": 8}, {"batch": 2, "seq": 40})),
        (
            MODELS / "hf_gpt2_tiny.onnx",
            ({"batch": 1, "seq": 4}, {"batch": 3, "seq": 9}),
        ),
    ],
)
def test_the_kept_weight_tally_is_the_bindings_own(source, bindings):
    handle = mapper.open_model(str(source) if isinstance(source, Path) else source)
    tallies = []
    for dims in bindings:
        graph = handle.bind(dims).graph
        assert graph.derived_weights is not None and set(graph.derived_weights) <= graph.weights
        kept = weight_tally(graph, handle.caches)
        assert kept == weight_tally(graph)  # every weight tallied afresh, no cache
        tallies.append(kept)
    assert handle.caches._tables["weight_tally"].__len__() == 1  # one structure: one kept tally


def test_a_derived_weight_changes_the_tally_with_the_binding():
    """BERT-base's position and token-type embeddings are Gathers of constant indices, folded to weights of
    the bound shape: the kept part is the same, the tally is not."""
    handle = mapper.open_model("bert-base")
    small, large = (handle.bind(batch=b, seq=s).graph for b, s in ((1, 16), (4, 64)))
    assert small.derived_weights == large.derived_weights and small.derived_weights
    assert weight_tally(small, handle.caches) != weight_tally(large, handle.caches)
    assert weight_tally(large, handle.caches) == weight_tally(large)


def test_equal_fusion_plans_are_one_plan():
    """Two tiny sets that move no group give one plan: its groups are the same objects, so the tables keyed
    by a plan's groups compare them by identity."""
    caches, structure = ModelCaches(), ("sha", frozenset())
    groups = [Group(("a", "b"), "gemm-epilogue"), Group(("c",), "single")]
    asked = frozenset({"a", "c"})
    first = caches.fusion_plan(structure, 1, frozenset({"a"}), "default", False, lambda: (list(groups), asked))
    equal = [Group(("a", "b"), "gemm-epilogue"), Group(("c",), "single")]  # equal groups, other objects
    again = caches.fusion_plan(structure, 1, frozenset(), "default", False, lambda: (list(equal), asked))
    assert again is first and all(x is y for x, y in zip(again, groups))
    other = caches.fusion_plan(
        structure, 1, frozenset({"c"}), "default", False, lambda: ([Group(("a",), "single")], asked)
    )
    assert other != first and list(other) == [Group(("a",), "single")]


def test_a_plan_answers_every_tiny_set_that_agrees_on_what_it_asked():
    """A plan is kept with the nodes whose tininess the planner asked about: another tiny set that agrees on them
    gets it without planning, one that differs on one of them plans afresh."""
    caches, structure = ModelCaches(), ("sha", frozenset())
    planned = []

    def make(groups):
        planned.append(groups)
        return [Group((g,), "single") for g in groups], frozenset({"a", "b"})

    first = caches.fusion_plan(structure, 1, frozenset({"a", "x"}), "default", False, lambda: make("ab"))
    same = caches.fusion_plan(structure, 1, frozenset({"a", "y"}), "default", False, lambda: make("zz"))
    other = caches.fusion_plan(structure, 1, frozenset({"b"}), "default", False, lambda: make("ba"))
    assert (
        same is first and planned == ["ab", "ba"] and list(other) == [Group(("b",), "single"), Group(("a",), "single")]
    )


@pytest.mark.parametrize(
    "dims",
    [{"batch": 1, "seq": 1, "past": 64}, {"batch": 64, "seq": 1, "past": 64}, {"batch": 2, "seq": 32, "past": 0}],
)
def test_a_kept_plan_is_the_plan_made_afresh(dims):
    """The plan a warm handle gives a binding (made at other bindings, found by the nodes asked about) is the one
    a planner makes for it alone."""
    from mapper.plan.fusion import _Planner, tiny_nodes

    handle = mapper.open_model("mixtral-8x7b")
    for warm in (
        {"batch": 1, "seq": 1, "past": 8},
        {"batch": 32, "seq": 1, "past": 8},
        {"batch": 4, "seq": 16, "past": 0},
    ):
        w = handle.bind(warm)
        plan_fusion(w.graph, w.nodes, w.plan_key, "default", False, w.caches)
    w = handle.bind(dims)
    kept = plan_fusion(w.graph, w.nodes, w.plan_key, "default", False, w.caches)
    fresh = _Planner(w.graph, w.nodes, tiny_nodes(w.graph)).plan(FusionPolicy.DEFAULT, False)
    assert list(kept) == fresh


@pytest.mark.parametrize("fusion", ["none", "aggressive"])
def test_a_repeated_kernel_is_assessed_as_its_first(fusion):
    """The builder says which positions repeat an earlier one's kernel (`Kernels.template_at`: one template); the
    cost stage answers them with that one's assessment and engine: the same estimates as from the kernels written
    out."""
    workload, hw = mapper.open_model("bert-base").bind(batch=2, seq=24), mapper.load_hardware("h100-sxm")
    groups = plan_fusion(
        workload.graph, workload.nodes, workload.plan_key, fusion, fusion == "aggressive", workload.caches
    )
    sizer = Sizer(workload.graph, "bf16", "same", workload.caches)
    kernels = build_kernels(workload, groups, sizer, hw, attention_fits)
    shared = kernels.shared_positions()
    repeats = [k for k, first in enumerate(shared.tolist()) if first != k]
    assert len(repeats) > 100 and all(kernels.sources[shared[k]] is kernels.sources[k] for k in repeats)
    target = device_target(hw, "bf16", sizer.key, None, False, hw.kernel_launch_s)
    templated = estimate_kernels(kernels, target, workload.caches)
    each_own = Kernels.of(list(kernels))
    written = estimate_kernels(each_own, target)
    assert len(each_own.templates) == len(each_own) and list(templated) == list(written)


@pytest.mark.parametrize(
    "source, dims",
    [
        ("bert-base", {"batch": 3, "seq": 20}),
        ("llama2-7b", {"batch": 2, "seq": 16, "past": 8}),
        ("gpt2-small", {"batch": 2, "seq": 9, "past": 4}),
        (MODELS / "hf_gpt2_tiny.onnx", {"batch": 2, "seq": 7}),  # 2 layers: one short run
    ],
)
def test_copy_runs_give_the_node_by_node_work(source, dims):
    """A repeated layer's nodes copied from their twins a period at a time (`kinds.copy_runs`) have the work,
    kinds and places the node-by-node loop gives them."""
    handle = mapper.open_model(str(source) if isinstance(source, Path) else source)
    handle.bind({k: v + 1 for k, v in dims.items()})  # the first binding finds the repeats
    workload = handle.bind(dims)
    graph, caches = workload.graph, handle.caches
    runs = caches._tables["copy_runs"][graph.structure]
    assert runs and all(0 < period <= start < end for start, end, period, _ in runs)
    classes = import_graph(handle.proto, handle.sha256, handle.name, caches, dims)[1]
    roles = work_roles(graph)
    place = layer_placer(graph, caches)
    node_by_node = estimate_work_kinds(graph, place, classes, roles)
    copied = estimate_work_kinds(graph, place, classes, roles, runs)
    assert list(copied[0]) == list(node_by_node[0]) == list(workload.nodes) and copied[1] == node_by_node[1]
    assert copied[0].places == node_by_node[0].places
