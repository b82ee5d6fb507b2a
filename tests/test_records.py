"""Records written when read, and copied by `core.records.replacer`, are the constructor's, field for field.

`work.works.NodeWorks`' node records and `core.timeline`'s kernels and estimates are written on first read;
`Kernel.replaced` copies a kernel with fields changed. Fusion groups keep their hash (a slice keys three
tables by them). All must stay what the plain dataclass would give.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import mapper
from mapper.core.graph import LayerType, OpClass, TensorSpec
from mapper.core.records import replacer
from mapper.core.result import Kernel, KernelEstimate, MatrixShape, NodeWork
from mapper.core.timeline import KernelEstimates, Kernels, unique_small
from mapper.explore.sweep import slice_row
from mapper.plan.fusion import Group
from mapper.work.works import NodeWorks


@pytest.mark.parametrize("model, dims", [("bert-base", {"batch": 2, "seq": 40}), ("resnet50", {"batch": 3})])
def test_node_works_records_are_the_constructors(model, dims):
    """Each node's record, written on first read from the estimate it shares and its place, is the one the
    constructor gives; a record already named and placed is itself."""
    workload = mapper.open_model(model).bind(dims)
    sources = list(workload.nodes)
    renamed = [TensorSpec(f"{w.name}/copy", (), "float32") for w in sources]  # anything with a name
    places = [(LayerType.ATTENTION if i % 2 else w.layer_type, i) for i, w in enumerate(sources)]
    works = NodeWorks(sources, renamed, places)
    assert len(works) == len(sources) and works[-1] == works[len(sources) - 1]
    for w, named, (layer, group), placed in zip(sources, renamed, places, works):
        fields = {f.name: getattr(w, f.name) for f in dataclasses.fields(NodeWork)}  # not asdict: it copies MatrixShape
        expected = NodeWork(**(fields | {"name": named.name, "layer_type": layer, "layer_group": group}))
        assert placed == expected
        assert [getattr(placed, f.name) for f in dataclasses.fields(NodeWork)] == [
            getattr(expected, f.name) for f in dataclasses.fields(NodeWork)
        ]
        assert pickle.loads(pickle.dumps(placed)) == expected
    assert works[0] is works[0]  # written once, then kept
    same = NodeWorks(sources, sources, [(w.layer_type, w.layer_group) for w in sources])
    assert all(a is b for a, b in zip(same, sources))  # already named and placed: the records themselves
    assert same == tuple(sources) and tuple(sources) == same and same != works and same[1:3] == tuple(sources[1:3])
    assert hash(same) == hash(tuple(sources))
    back = pickle.loads(pickle.dumps(works))
    assert isinstance(back, NodeWorks) and back == works and back.places == places


def test_node_works_keeps_every_field_apart():
    """A record whose fields all differ: a field written from another is seen (real ones share values)."""
    w = NodeWork("n", "MatMul", list(OpClass)[1], 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, MatrixShape(7, 8, 9, 10), "why")
    (placed,) = NodeWorks([w], [TensorSpec("m", (), "float32")], [(LayerType.LINEAR, 11)])
    assert placed == NodeWork("m", "MatMul", list(OpClass)[1], 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, w.matrix, "why",
                              LayerType.LINEAR, 11)  # fmt: skip
    with pytest.raises(IndexError):
        NodeWorks([w], [w], [(w.layer_type, w.layer_group)])[1]
    with pytest.raises(ValueError, match="one source, name and place"):
        NodeWorks([w], [], [])


def test_a_sweep_slice_writes_no_repeated_layer_record():
    """Mapping a rebound BERT-base reads its nodes' figures, not their records: the new kernels' members are
    written for their read and not kept (a search keeps 256 bindings), and reading them afterwards gives every
    record."""
    handle, hw = mapper.open_model("bert-base"), mapper.load_hardware("h100-sxm")
    mapper.map_workload(handle.bind(batch=1, seq=32), hw)
    workload = handle.bind(batch=3, seq=48)
    result = mapper.map_workload(workload, hw)
    written = sum(made is not None for made in workload.nodes._made)
    assert written == 0
    fresh = mapper.open_model("bert-base").bind(batch=3, seq=48).nodes
    assert list(result.nodes) == list(fresh)


def test_a_mapping_writes_its_estimates_when_read():
    """The cost stage, the placement, the roll-up and a sweep's row read the timeline's columns: a mapped
    slice holds no written estimate until one is read, and then each is the constructor's."""
    handle, hw = mapper.open_model("bert-base"), mapper.load_hardware("h100-sxm")
    result = mapper.map_workload(handle.bind(batch=2, seq=40), hw)
    slice_row(result)
    assert all(made is None for made in result.kernels._made)
    assert sum(made is not None for made in result.kernels.kernels._made) == 0  # nor a kernel
    for e, k, a, start in zip(
        result.kernels, result.kernels.kernels, result.kernels.assessments, result.kernels.starts
    ):
        assert e == KernelEstimate(k, a, start) and e.start_s == start
    assert pickle.loads(pickle.dumps(result)) == result


def test_group_hash_and_pickle():
    g = Group(("a", "b"), "single")
    assert hash(g) == hash((("a", "b"), "single"))
    assert g == Group(("a", "b"), "single") and g != Group(("a", "b"), "gemm-epilogue")
    back = pickle.loads(pickle.dumps(g))
    assert back == g and hash(back) == hash(g) and {g: 1}[back] == 1


def test_kernels_records_are_the_constructors():
    """A position's kernel, written on first read from the kernel it shares under its own name and nodes, is the
    constructor's; one already named is itself."""
    result = mapper.map_workload(
        mapper.open_model("bert-base").bind({"batch": 2, "seq": 40}), mapper.load_hardware("h100-sxm")
    )
    built = list(result.kernels.kernels)
    names, nodes = [f"{k.name}/copy" for k in built], [(f"n{i}",) for i in range(len(built))]
    renamed = Kernels(built, names, nodes)
    for k, name, members, written in zip(built, names, nodes, renamed):
        assert written == dataclasses.replace(k, name=name, nodes=members)
        assert _fields(written) == _fields(Kernel(name, members, *_fields(k)[2:]))
    same = Kernels(built, [k.name for k in built], [k.nodes for k in built])
    assert all(a is b for a, b in zip(same, built)) and Kernels.of(same) is same and Kernels.of(built) == same
    assert pickle.loads(pickle.dumps(renamed)) == renamed
    with pytest.raises(ValueError, match="one source, name and node list"):
        Kernels(built, names[:-1], nodes)


def _fields(record) -> list:
    return [getattr(record, f.name) for f in dataclasses.fields(record)]


def test_replaced_kernel_is_dataclasses_replace():
    result = mapper.map_workload(
        mapper.open_model("bert-base").bind({"batch": 2, "seq": 40}),
        mapper.load_hardware("h100-sxm"),
        mapper.PlanOptions(tp=2),
    )
    for i, e in enumerate(result.kernels):
        k = e.kernel
        changes = {"shard": "row", "flops": k.flops / 3, "stage": i, "note": f"n{i}"}
        replaced = k.replaced(**changes)
        assert replaced == dataclasses.replace(k, **changes) and _fields(replaced) == _fields(
            dataclasses.replace(k, **changes)
        )
        assert k.replaced() == k and k.replaced(engine=k.engine) == k
    with pytest.raises(TypeError):
        k.replaced(shards="row")  # a misspelt field: refused, as dataclasses.replace does


def test_a_replacer_refuses_a_class_whose_constructor_misses_a_field():
    @dataclasses.dataclass(frozen=True)
    class Derived:
        x: int
        y: int = dataclasses.field(init=False, default=0)

    with pytest.raises(TypeError, match="constructor does not take"):
        replacer(Derived)


def _repeated_kernels() -> Kernels:
    """Six positions over two sources (a layer of two kernels, three times), each position its own name."""
    base = mapper.map_workload(
        mapper.open_model("bert-base").bind({"batch": 2, "seq": 40}), mapper.load_hardware("h100-sxm")
    )
    a, b = list(base.kernels.kernels)[:2]
    return Kernels([a, b] * 3, [f"p{i}" for i in range(6)], [(f"n{i}",) for i in range(6)], [0, 1, 0, 1, 0, 1])


def test_remade_changes_a_source_once_per_code():
    """`Kernels.remade` calls the change once per (source, code), keeps -1's positions, and each position reads
    the change of its own source and code under its own name (the same records as `changed` per position)."""
    kernels = _repeated_kernels()
    calls = []

    def change(k, code):
        calls.append((k.name, code))
        return k.replaced(flops=k.flops * (code + 2))

    codes = np.array([0, -1, 0, 1, 0, -1])
    out = kernels.remade(codes, change)
    assert sorted(calls) == sorted([(kernels.sources[0].name, 0), (kernels.sources[1].name, 1)])
    for j, code in enumerate(codes.tolist()):
        k = kernels.sources[j]
        assert out[j] == k.replaced(
            name=f"p{j}", nodes=(f"n{j}",), flops=k.flops * (code + 2) if code >= 0 else k.flops
        )
        assert out.sources[out.shared_positions()[j]] is out.sources[j] and out.shared_positions()[j] <= j
    assert list(out.shared_positions()) == [0, 1, 0, 3, 0, 1]
    assert kernels.remade(np.full(6, -1), change) is kernels


def test_templates_stay_in_the_order_of_their_first_position():
    """A change at a template's first position but not its later ones makes the kept rest a template whose first
    position comes after the next template's: the table reorders them, so `templates` is the timeline order of
    first positions (what `source_codes` calls in, and a roll-up's layer codes follow) and each position's
    `template_at` still reads its own source."""
    kernels = _repeated_kernels()
    out = kernels.remade(np.array([1, -1, -1, -1, -1, -1]), lambda k, code: k.replaced(flops=k.flops * 3))
    assert out.first_positions().tolist() == [0, 1, 2] and list(out.shared_positions()) == [0, 1, 2, 1, 2, 1]
    assert [out.sources[j] for j in out.first_positions().tolist()] == out.templates
    assert out.sources[0].flops == 3 * kernels.sources[0].flops and out.sources[2] is kernels.sources[0]
    assert [out.source(j) for j in range(6)] == out.sources == [out.templates[t] for t in out.template_at.tolist()]
    inserted = out.inserted([(1, "x", "c", lambda: kernels.sources[1].replaced(nodes=()))])
    assert (
        inserted.first_positions().tolist() == [0, 1, 2, 3]
        and inserted.templates[1].nodes == () != inserted.templates[2].nodes
    )
    assert [inserted.sources[j] for j in inserted.first_positions().tolist()] == inserted.templates


def test_inserted_puts_kernels_in_position_order():
    """`Kernels.inserted` puts each kernel before its position, in the order given, one source per key; every
    position keeps its source, name and nodes, and shares a position holding the same source."""
    kernels = _repeated_kernels()
    extra = kernels.sources[1].replaced(nodes=())
    made = []

    def make():
        made.append(1)
        return extra

    out = kernels.inserted(
        [(0, "x", "first", make), (2, "x", "mid", make), (2, "y", "mid2", make), (6, "x", "end", make)]
    )
    assert [k.name for k in out] == ["first", "p0", "p1", "mid", "mid2", "p2", "p3", "p4", "p5", "end"]
    assert len(made) == 2  # keys x and y
    assert out.shared_positions()[3] == out.shared_positions()[9] == 0 and out.shared_positions()[4] == 4
    for j in range(len(out)):
        assert out.sources[out.shared_positions()[j]] is out.sources[j] and out.shared_positions()[j] <= j
    with pytest.raises(ValueError, match="position order"):
        kernels.inserted([(3, "x", "a", make), (1, "x", "b", make)])


def test_estimates_read_a_column_once_a_template():
    """The cost stage gives each kernel template's assessment: a column read through them is every position's
    assessment's figure (what the placement and the roll-up sum), and one assessment a template is required."""
    result = mapper.map_workload(
        mapper.open_model("llama2-7b").bind({"batch": 2, "seq": 1, "past": 64}), mapper.load_hardware("h100-sxm")
    )
    timeline = result.kernels
    assert isinstance(timeline, KernelEstimates) and timeline.by_template is not None
    assert len(timeline.by_template) < len(timeline) / 10  # 32 decoder layers: one template a layer's kernel
    for field in ("time_s", "energy_j", "stall_fraction", "dram_bytes"):
        assert timeline.column(field).tolist() == [getattr(a, field) for a in timeline.assessments]
    plain = KernelEstimates.of(list(timeline))
    assert plain.by_template is None and plain.column("time_s").tolist() == [e.assessment.time_s for e in plain]
    with pytest.raises(ValueError, match="one assessment per kernel template"):
        KernelEstimates(timeline.kernels, timeline.assessments, timeline.starts, timeline.by_template[:-1])


@pytest.mark.parametrize("top", [1, 3, 200, 70_000])
def test_unique_small_is_numpys_unique(top):
    """The template grouping's unique (a 16-bit radix sort below 2^16, numpy's own above): the same groups, first
    positions and inverse as `np.unique`."""
    rng = np.random.default_rng(top)
    for n in (1, 2, 50, 2051):
        keys = rng.integers(0, top, n)
        for mine, numpys in zip(unique_small(keys), np.unique(keys, return_index=True, return_inverse=True)):
            assert mine.tolist() == numpys.tolist()
