"""Records the hot loops build without their dataclass constructor are the constructor's, field for field.

`core.records.writer` writes a record's slots directly: the import's tensor specs, `work.kinds._placed`'s node works
(every binding copies ~400 of them), `plan.kernels._renamed`'s kernels and the cost stage's estimates. Fusion groups
keep their hash (a slice keys three tables by them). All must stay what the plain dataclass would give.
"""

from __future__ import annotations

import dataclasses
import pickle

import pytest

import mapper
from mapper.core import records as record_module
from mapper.core.graph import LayerType, OpClass, TensorSpec
from mapper.core.records import writer
from mapper.core.result import Kernel, KernelEstimate, MatrixShape, NodeWork
from mapper.plan.fusion import Group
from mapper.plan.kernels import KERNEL_FIELDS_BUT_NAME, _renamed
from mapper.work.kinds import _placed


@pytest.mark.parametrize("model, dims", [("bert-base", {"batch": 2, "seq": 40}), ("resnet50", {"batch": 3})])
def test_placed_node_work_is_the_constructors(model, dims):
    workload = mapper.open_model(model).bind(dims)
    for i, w in enumerate(workload.nodes):
        layer = LayerType.ATTENTION if i % 2 else w.layer_type
        placed = _placed(w, f"{w.name}/copy", layer, i)
        fields = {f.name: getattr(w, f.name) for f in dataclasses.fields(NodeWork)}  # not asdict: it copies MatrixShape
        expected = NodeWork(**(fields | {"name": f"{w.name}/copy", "layer_type": layer, "layer_group": i}))
        assert placed == expected
        assert [getattr(placed, f.name) for f in dataclasses.fields(NodeWork)] == [
            getattr(expected, f.name) for f in dataclasses.fields(NodeWork)
        ]
        assert pickle.loads(pickle.dumps(placed)) == expected
    w = workload.nodes[0]
    assert _placed(w, w.name, w.layer_type, w.layer_group) is w  # already placed: itself


def test_placed_keeps_every_field_apart():
    """A record whose fields all differ: a field written from another is seen (real ones share values)."""
    w = NodeWork("n", "MatMul", list(OpClass)[1], 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, MatrixShape(7, 8, 9, 10), "why")
    placed = _placed(w, "m", LayerType.LINEAR, 11)
    assert placed == NodeWork("m", "MatMul", list(OpClass)[1], 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, w.matrix, "why",
                              LayerType.LINEAR, 11)  # fmt: skip


def test_group_hash_and_pickle():
    g = Group(("a", "b"), "single")
    assert hash(g) == hash((("a", "b"), "single"))
    assert g == Group(("a", "b"), "single") and g != Group(("a", "b"), "gemm-epilogue")
    back = pickle.loads(pickle.dumps(g))
    assert back == g and hash(back) == hash(g) and {g: 1}[back] == 1


def test_renamed_kernel_is_the_constructors():
    result = mapper.map_workload(
        mapper.open_model("bert-base").bind({"batch": 2, "seq": 40}), mapper.load_hardware("h100-sxm")
    )
    for i, e in enumerate(result.kernels):
        k = e.kernel
        values = tuple(getattr(k, f) for f in KERNEL_FIELDS_BUT_NAME)
        renamed = _renamed(f"{k.name}/copy", (f"n{i}",), values)
        assert renamed == Kernel(f"{k.name}/copy", (f"n{i}",), *values)
        assert renamed == dataclasses.replace(k, name=f"{k.name}/copy", nodes=(f"n{i}",))
    with pytest.raises(TypeError):
        _renamed("x", ("y",), values[:-1])  # a field short: refused, not a half-built kernel


def _fields(record) -> list:
    return [getattr(record, f.name) for f in dataclasses.fields(record)]


def test_writers_give_the_constructors_records():
    """A mapping's every tensor spec and estimate, written again by `writer`, is the constructor's record."""
    workload = mapper.open_model("bert-base").bind({"batch": 2, "seq": 40})
    result = mapper.map_workload(workload, mapper.load_hardware("h100-sxm"))
    for cls, records in ((TensorSpec, workload.graph.tensors.values()), (KernelEstimate, result.kernels)):
        write = writer(cls)
        for record in records:
            written = write(*_fields(record))
            assert type(written) is cls and written == cls(*_fields(record)) and _fields(written) == _fields(record)
            assert pickle.loads(pickle.dumps(written)) == record
    spec = writer(TensorSpec)("t", (2, 3), "float16")
    assert (spec.name, spec.shape, spec.dtype, spec.bytes) == ("t", (2, 3), "float16", 12)  # each field its own
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "u"  # still frozen


def test_writer_refuses_records_it_would_build_wrong():
    @dataclasses.dataclass(frozen=True)
    class Plain:  # no slots: its fields are no descriptors to write
        x: int

    for cls in (Group, Plain):  # Group's __post_init__ keeps its hash: a writer would skip it
        with pytest.raises(TypeError):
            writer(cls)


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


def test_a_writer_with_defaults_is_the_constructor_and_a_strict_one_refuses_a_missing_field():
    given = {"name": "k", "nodes": ("a",), "op_types": ("MatMul",), "rule": "single", "engine": "matrix"}
    given |= {"layer_type": LayerType.LINEAR, "flops": 2.0, "matrix_flops": 2.0, "sfu_ops": 0.0}
    given |= {"dram_bytes": 8.0, "weight_bytes": 4.0, "note": "why"}
    made = writer(Kernel, defaults=True)(**given)
    assert made == Kernel(**given) and _fields(made) == _fields(Kernel(**given))  # the defaults filled in
    assert writer(NodeWork, defaults=True)("n", "Relu", OpClass.ELEMENTWISE, 1.0, 0.0, 0.0, 4.0, 4.0, 0.0) == NodeWork(
        "n", "Relu", OpClass.ELEMENTWISE, 1.0, 0.0, 0.0, 4.0, 4.0, 0.0
    )
    with pytest.raises(TypeError):
        writer(Kernel)(**given)  # strict: a copy missing a field is refused, not filled in


def test_a_writer_falls_back_where_the_class_change_is_refused(monkeypatch):
    """Where an interpreter refuses the draft's class change, the writer writes each slot through its descriptor:
    the same records (a draft of another layout stands in for the refusal here)."""

    def other_layout(name, bases, namespace):  # one slot more: Python refuses the __class__ change
        return type(name, bases, {"__slots__": (*namespace["__slots__"], "extra")})

    monkeypatch.setattr(record_module, "type", other_layout, raising=False)
    write = record_module.writer(TensorSpec)
    assert "_set_name" in write.__code__.co_names  # the descriptor writes were taken
    spec = write("t", (2, 3), "float16")
    assert type(spec) is TensorSpec and spec == TensorSpec("t", (2, 3), "float16") and spec.bytes == 12
    kernel = record_module.writer(Kernel, defaults=True)(
        "k", ("a",), ("Relu",), "single", "vector", LayerType.OTHER, 1, 0, 0, 8, 0
    )
    assert kernel == Kernel("k", ("a",), ("Relu",), "single", "vector", LayerType.OTHER, 1, 0, 0, 8, 0)
