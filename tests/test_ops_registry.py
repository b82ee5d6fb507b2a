"""The operator registry (mapper/ops): one entry per op type, a second raises, every stage reads it, and an op
is added by one entry."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

import mapper
from mapper.core.graph import SUBGRAPH_OPS, LayerType, OpClass
from mapper.ops import FLOAT_OPS, OPS, Backward, FusionRole, OpDef, Registry
from mapper.ops.elementwise import same_shape
from mapper.ops.movement import BODY
from mapper.ops.quantized import QUANTIZED_FORMS
from mapper.ops.work import PerOutput
from mapper.plan import boundary, fusion_rules, kernel_names, precision
from mapper.work import layers
from tests.conftest import make_model, tensor


def test_a_second_registration_of_an_op_type_raises():
    registry = Registry([OpDef("Toy", backward=Backward.NONE)])
    with pytest.raises(ValueError, match="a second registration of Toy"):
        registry.register(OpDef("Toy", same_shape, backward=Backward.NONE))
    with pytest.raises(ValueError, match="a second registration of MatMul"):
        Registry([*FLOAT_OPS, OpDef("MatMul", backward=Backward.GEMM)])
    assert len(registry) == 1


def test_every_op_a_stage_names_has_exactly_one_entry():
    """The tables are rows of `OpDef`s whose op types are distinct (a registry holds one entry an op type), and
    every op type a stage names in a table of its own (block patterns, kernel words, boundary sets) is one of
    them: the stage reads the rest from the entry."""
    rows = [*FLOAT_OPS, *(OpDef(op, backward=Backward.NONE) for op, _ in QUANTIZED_FORMS)]
    assert len({e.op_type for e in rows}) == len(rows) == len(OPS)
    named = {
        *layers.SCORE_OPS,
        *layers.PROB_OPS,
        *layers.KV_PATH_OPS,
        *layers.NORM_CHAIN_OPS,
        *boundary.REDUCING_OPS,
        *kernel_names.OP_WORDS,
        *kernel_names.NORM_WORDS,
        *SUBGRAPH_OPS,
        *(rule_op for rule in fusion_rules.FUSION_RULES for rule_op in rule.absorbs),
        *(precision.WEIGHT_ONLY_QUANTIZED_OPS - {"GatherBlockQuantized"}),  # no shape or work rule yet
    }
    assert sorted(named - {e.op_type for e in OPS}) == []


def test_the_stages_tables_are_read_off_the_entries():
    assert fusion_rules.MATRIX_STARTS == {e.op_type for e in OPS if e.fusion is FusionRole.MATRIX}
    assert fusion_rules.QDQ_OPS == {"QuantizeLinear", "DequantizeLinear"}
    assert {"Relu", "QLinearAdd", "QuantizeLinear"} <= fusion_rules.EPILOGUE_OPS
    assert {"Exp", "Relu"} <= fusion_rules.CHAIN_OPS and "Exp" not in fusion_rules.EPILOGUE_OPS
    assert boundary.VIEWS == {e.op_type for e in OPS if e.op_class is OpClass.VIEW}
    assert {e.op_type for e in OPS if e.host_reason == BODY} == SUBGRAPH_OPS
    assert all(e.host_reason for e in OPS if e.op_class is OpClass.CONTROL)


def test_a_quantized_entry_is_its_twins_over_the_data_operands():
    for op, form in QUANTIZED_FORMS:
        entry, twin = OPS[op], OPS[form.twin]
        assert (entry.quantized, entry.op_class, entry.layer, entry.min_ranks) == (
            form,
            twin.op_class,
            twin.layer,
            twin.min_ranks,
        )
        assert OPS.twin_of(op) == form.twin and entry.fusion in (twin.fusion, FusionRole.NONE)
    assert OPS.twin_of("MatMul") == "MatMul" and OPS.twin_of("NoSuchOp") == "NoSuchOp"


TOY = OpDef(  # y = 3x: one row gives the op its shape, its work, its layer, its part in fusion and its backward
    "ToyTriple",
    same_shape,
    OpClass.ELEMENTWISE,
    PerOutput(3),
    layer=LayerType.OTHER,
    fusion=FusionRole.EPILOGUE,
    backward=Backward.VECTOR,
)


def test_adding_an_op_is_one_entry(monkeypatch):
    """A registry with one more entry maps a graph that uses the op: its output shape from the entry's rule, its
    FLOPs from its formula, its layer from its row (without the entry it is unresolved and unmodeled)."""
    graph = make_model(
        [helper.make_node("ToyTriple", ["x"], ["y"], domain="toy"), helper.make_node("Relu", ["y"], ["z"])],
        [tensor("x", [4, 8])],
        [tensor("z", [4, 8])],
    )
    model = onnx.load_from_string(graph)
    model.opset_import.append(helper.make_opsetid("toy", 1))
    data = model.SerializeToString()
    before = {n.op_type: n for n in mapper.load_workload(data).nodes}["ToyTriple"]
    assert before.op_class is OpClass.UNMODELED

    registry = Registry([*OPS, TOY])
    for module in ("mapper.model.shapes", "mapper.work.ops", "mapper.work.layers"):
        monkeypatch.setattr(f"{module}.OPS", registry)
    workload = mapper.load_workload(data)
    toy = {n.op_type: n for n in workload.nodes}["ToyTriple"]
    assert workload.graph.tensors["y"].shape == (4, 8)
    assert (toy.op_class, toy.flops, toy.layer_type) == (OpClass.ELEMENTWISE, 3.0 * 4 * 8, LayerType.OTHER)
    result = mapper.map_workload(workload, mapper.load_hardware("h100-sxm"), mapper.PlanOptions(dtype="fp16"))
    assert result.totals.flops == 3.0 * 4 * 8 + 4 * 8


def test_every_registered_op_states_its_backward():
    """An entry's backward has no default (an op added without one is refused), every registered op type names
    one, NONE included, and the names follow the ops: views, shape and host ops pass no gradient, a matrix op's
    is its operands' GEMMs (a fused attention op FlashAttention-2's), a quantized op's its float twin's; only the
    plan's collectives (no ONNX op) run their conjugate."""
    with pytest.raises(TypeError, match="backward"):
        OpDef("Toy")  # type: ignore[call-arg]
    assert all(isinstance(e.backward, Backward) for e in OPS)
    assert OPS.backward("NoSuchOp") is None
    for e in OPS:
        if e.op_class in (OpClass.VIEW, OpClass.SHAPE_ONLY, OpClass.CONTROL):
            assert e.backward is Backward.NONE, e.op_type
        if e.op_class is OpClass.MATRIX:
            assert e.backward in (Backward.GEMM, Backward.ATTENTION), e.op_type
        if e.quantized is not None:
            assert e.backward is OPS[e.quantized.twin].backward, e.op_type
    named = {e.op_type: e.backward for e in OPS}
    assert {b for b in named.values()} == set(Backward) - {Backward.CONJUGATE}
    assert [named[op] for op in ("MatMul", "Gemm", "Conv", "QLinearMatMul")] == [Backward.GEMM] * 4
    assert [named[op] for op in ("Attention", "MultiHeadAttention", "GroupQueryAttention")] == [Backward.ATTENTION] * 3
    assert [named[op] for op in ("LayerNormalization", "Softmax", "Add", "QLinearAdd", "Gather")] == [
        Backward.VECTOR
    ] * 5
    assert [named[op] for op in ("Transpose", "Concat", "Slice", "QLinearConcat")] == [Backward.MOVEMENT] * 4
    assert [named[op] for op in ("Reshape", "Shape", "Equal", "ArgMax", "If")] == [Backward.NONE] * 5
