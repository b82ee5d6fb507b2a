"""Per-rule tests with hand-computed figures: work model rows, contrib ops, bottleneck rules."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import mapper
from mapper.core.graph import OpClass
from mapper.cost.bottleneck import LAUNCH_SHARE, OCCUPANCY_LIMIT, Facts, classify
from tests.conftest import make_model, tensor, weight


def _one(node, inputs, outputs, inits=(), opset=17, domains=()):
    data = make_model([node], inputs, outputs, inits, opset=opset)
    if domains:
        import onnx

        m = onnx.load_from_string(data)
        m.opset_import.extend(helper.make_opsetid(d, 1) for d in domains)
        data = m.SerializeToString()
    (w,) = mapper.load_workload(data).nodes
    return w


def test_conv_flops_and_bytes_by_hand():
    # 2 * N * Cout * Hout * Wout * (Cin/groups) * Kh * Kw, + one bias add per output element
    w = _one(
        helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
        [tensor("x", [2, 16, 32, 32])],
        [tensor("y", [2, 8, 16, 16])],
        [weight("w", (8, 16, 3, 3)), weight("b", (8,))],
    )
    out = 2 * 8 * 16 * 16
    assert w.matrix_flops == 2 * out * 16 * 9
    assert w.flops == 2 * out * 16 * 9 + out
    assert w.bytes_read == 4 * (2 * 16 * 32 * 32 + 8 * 16 * 9 + 8) and w.bytes_written == 4 * out
    assert w.weight_bytes == 4 * (8 * 16 * 9 + 8)
    assert w.matrix.m == out // 8 and w.matrix.n == 8 and w.matrix.k == 144


def test_depthwise_conv_is_flagged():
    w = _one(
        helper.make_node("Conv", ["x", "w"], ["y"], group=16, pads=[1, 1, 1, 1]),
        [tensor("x", [1, 16, 8, 8])],
        [tensor("y", [1, 16, 8, 8])],
        [weight("w", (16, 1, 3, 3))],
    )
    assert w.matrix.depthwise and w.matrix.k == 9 and w.matrix_flops == 2 * 16 * 64 * 9


def test_batched_matmul_broadcasts_batch_dims():
    w = _one(
        helper.make_node("MatMul", ["a", "b"], ["c"]),
        [tensor("a", [3, 4, 5, 6]), tensor("b", [6, 7])],
        [tensor("c", [3, 4, 5, 7])],
    )
    assert w.matrix_flops == 2 * 12 * 5 * 7 * 6 and w.op_class is OpClass.MATRIX


def test_gemm_with_transposes_and_bias():
    w = _one(
        helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1),
        [tensor("a", [6, 4])],
        [tensor("y", [4, 5])],
        [weight("b", (5, 6)), weight("c", (5,))],
    )
    assert w.matrix_flops == 2 * 4 * 5 * 6 and w.flops == 2 * 4 * 5 * 6 + 4 * 5


@pytest.mark.parametrize(
    "op,per_element,sfu",
    [("Relu", 1, 0), ("Add", 1, 0), ("Exp", 1, 1), ("Sigmoid", 3, 1), ("Tanh", 5, 1), ("Erf", 1, 1)],
)
def test_elementwise_rows(op, per_element, sfu):
    inputs = [tensor("x", [4, 10])] + ([tensor("y", [4, 10])] if op == "Add" else [])
    w = _one(helper.make_node(op, [i.name for i in inputs], ["z"]), inputs, [tensor("z", [4, 10])])
    assert w.flops == 40 * per_element and w.sfu_ops == 40 * sfu
    assert w.bytes_written == 160 and w.bytes_read == 160 * len(inputs)


def test_softmax_and_layernorm_are_counted_per_element():
    sm = _one(helper.make_node("Softmax", ["x"], ["y"], axis=-1), [tensor("x", [8, 128])], [tensor("y", [8, 128])])
    assert sm.flops == 5 * 1024 and sm.sfu_ops == 1024 and sm.op_class is OpClass.TRANSCENDENTAL
    ln = _one(
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1),
        [tensor("x", [8, 128])],
        [tensor("y", [8, 128])],
        [weight("g", (128,)), weight("b", (128,))],
    )
    assert ln.flops == 8 * 1024 and ln.op_class is OpClass.REDUCTION and ln.layer_type is mapper.LayerType.NORMALIZATION


def test_views_move_no_bytes_and_gather_reads_only_its_rows():
    view = _one(
        helper.make_node("Reshape", ["x", "s"], ["y"]),
        [tensor("x", [4, 6])],
        [tensor("y", [24])],
        [helper.make_tensor("s", TensorProto.INT64, [1], [24])],
    )
    assert view.op_class is OpClass.VIEW and view.bytes == 0
    gather = _one(
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        [tensor("ids", [2, 3], TensorProto.INT64)],
        [tensor("e", [2, 3, 64])],
        [weight("table", (50000, 64))],
    )
    assert gather.bytes_read == 4 * 6 * 64 + 8 * 6  # the six rows and the ids, not the 12.8 MB table
    assert gather.layer_type is mapper.LayerType.EMBEDDING


def test_contrib_ops_from_exporters_are_modeled():
    fg = _one(
        helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft"),
        [tensor("x", [2, 8])],
        [tensor("y", [2, 8])],
        domains=("com.microsoft",),
    )
    assert fg.op_class is OpClass.TRANSCENDENTAL and fg.flops > 0 and not fg.reason
    mha = _one(
        helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft", num_heads=4),
        [tensor("q", [2, 16, 64]), tensor("k", [2, 16, 64]), tensor("v", [2, 16, 64])],
        [tensor("o", [2, 16, 64])],
        domains=("com.microsoft",),
    )
    assert mha.matrix_flops == 2 * 2 * 2 * 4 * 16 * 16 * 16 and mha.layer_type is mapper.LayerType.ATTENTION


def test_host_ops_say_why_they_carry_no_time():
    """Control flow and host-side ops (sequences, sampling, data-dependent sizes) are one class with two
    reasons: only the ops with bodies are control flow."""
    unique = _one(helper.make_node("Unique", ["x"], ["u"], sorted=1), [tensor("x", [16])], [tensor("u", [16])])
    assert unique.op_class is OpClass.CONTROL and unique.reason.startswith("a host-side op")
    # an If on a computed condition (one on a boolean graph input is bound and inlined: test_import)
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "body", [], [tensor("y", [4])])
    data = make_model(
        [
            helper.make_node("Greater", ["a", "b"], ["c"]),
            helper.make_node("If", ["c"], ["out"], then_branch=body, else_branch=body),
        ],
        [tensor("a", [1]), tensor("b", [1])],
        [tensor("out", [4])],
    )
    branch = next(w for w in mapper.load_workload(data).nodes if w.op_type == "If")
    assert branch.op_class is OpClass.CONTROL and branch.reason.startswith("control flow runs on the host")


def _contrib_workload(nodes, inputs, outputs, inits=(), dims=None):
    import onnx

    m = onnx.load_from_string(make_model(nodes, inputs, outputs, inits))
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return mapper.load_workload(m.SerializeToString(), dims)


def test_diffusion_contrib_ops_by_hand():
    """ONNX Runtime's transformer optimizer on a UNet: BiasAdd, GroupNorm, BiasSplitGelu (half the width
    out), GemmFastGelu (a MatMul with a FastGelu epilogue)."""
    nodes = [
        helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain="com.microsoft"),
        helper.make_node("GroupNorm", ["y", "g", "be"], ["z"], domain="com.microsoft", groups=4, activation=1),
        helper.make_node("BiasSplitGelu", ["z", "b2"], ["h"], domain="com.microsoft"),
        helper.make_node("GemmFastGelu", ["h", "w"], ["o"], domain="com.microsoft"),
    ]
    w = _contrib_workload(
        nodes,
        [tensor("x", [2, 64, 32]), tensor("s", [2, 64, 32])],
        [tensor("o", None)],
        [weight("b", (32,)), weight("g", (32,)), weight("be", (32,)), weight("b2", (32,)), weight("w", (16, 8))],
    )
    by_op = {n.op_type: n for n in w.nodes}
    assert w.graph.tensors["h"].shape == (2, 64, 16) and w.graph.tensors["o"].shape == (2, 64, 8)
    assert by_op["BiasAdd"].flops == 2 * 2 * 64 * 32
    assert by_op["GroupNorm"].layer_type is mapper.LayerType.NORMALIZATION
    gemm = by_op["GemmFastGelu"]
    assert gemm.matrix_flops == 2 * 2 * 64 * 8 * 16 and gemm.layer_type is mapper.LayerType.LINEAR
    assert gemm.flops > gemm.matrix_flops and gemm.sfu_ops == 2 * 64 * 8


def test_onnxruntime_shape_inference_resolves_a_contrib_op_without_a_rule():
    """DecoderMaskedMultiHeadAttention has no rule here and onnx does not know it: ONNX Runtime's symbolic
    inference (child process) gives its shape, so the nodes after it map; it stays unmodeled, with why."""
    nodes = [
        helper.make_node(
            "DecoderMaskedMultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=4
        ),
        helper.make_node("Relu", ["y"], ["z"]),
        helper.make_node("MatMul", ["z", "m"], ["o"]),
    ]
    w = _contrib_workload(
        nodes,
        [tensor("q", ["batch", 1, 64]), tensor("k", ["batch", 1, 64]), tensor("v", ["batch", 1, 64])],
        [tensor("o", None)],
        [weight("m", (64, 4))],
        {"batch": 2},
    )
    dmmha, relu, matmul = w.nodes
    assert w.graph.tensors["y"].shape == (2, 1, 64)
    assert dmmha.op_class is OpClass.UNMODELED and "no work rule" in dmmha.reason
    assert relu.flops == 2 * 64 and matmul.matrix_flops == 2 * 2 * 4 * 64


def _nhwc_and_attention(heads_per_node):
    """A model whose NhwcConv makes ONNX Runtime's whole-model inference give up, and DecoderMaskedMHA nodes
    (no rule here, onnx does not know them) each followed by a Relu."""
    nodes = [
        helper.make_node(
            "NhwcConv", ["xi", "wc"], ["yc"], domain="com.microsoft", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        )
    ]
    outputs = [tensor("yc", None)]
    for i, heads in enumerate(heads_per_node):
        nodes += [
            helper.make_node(
                "DecoderMaskedMultiHeadAttention", ["q", "k", "v"], [f"y{i}"], domain="com.microsoft", num_heads=heads
            ),
            helper.make_node("Relu", [f"y{i}"], [f"z{i}"]),
        ]
        outputs.append(tensor(f"z{i}", None))
    inputs = [tensor("xi", [1, 8, 8, 4])] + [tensor(n, ["batch", 1, 64]) for n in "qkv"]
    return _contrib_workload(nodes, inputs, outputs, [weight("wc", (4, 3, 3, 4))], {"batch": 2})


@pytest.mark.slow
def test_onnxruntime_inference_of_one_node_when_the_whole_model_fails():
    """ORT's inference over the whole model gives up when any node's handler raises (here NhwcConv): the
    contrib node is then inferred alone at its known input shapes, so the nodes after it map."""
    w = _nhwc_and_attention([4])
    assert w.graph.tensors["y0"].shape == (2, 1, 64)
    relu = next(n for n in w.nodes if n.op_type == "Relu")
    assert relu.op_class is OpClass.ELEMENTWISE and relu.flops == 2 * 64


@pytest.mark.slow
def test_single_node_onnxruntime_queries_are_capped_per_import(monkeypatch):
    """Each single-node query is a child process: one import starts at most ORT_NODE_QUERIES of them, and
    nodes past the cap stay unresolved (said so) instead of costing a process each."""
    from mapper.core import limits

    monkeypatch.setattr(limits, "ORT_NODE_QUERIES", 2)
    w = _nhwc_and_attention([4, 2])  # NhwcConv and two attention signatures: three queries wanted, two allowed
    resolved = [name for name in ("y0", "y1") if name in w.graph.tensors]
    assert len(resolved) == 1
    assert sum(n.reason.startswith("shape unknown") for n in w.nodes if n.op_type == "Relu") == 1


@pytest.mark.slow
def test_onnxruntime_shape_inference_runs_capped_and_names_no_file(tmp_path, monkeypatch):
    """ONNX Runtime's inference evaluates a ConstantOfShape of 5 GiB of int64s beside the contrib op: the
    child process hits its 4 GiB cap, and the import goes on with the op unresolved (uncapped, the
    child would allocate it and resolve the op); asked about the op alone, ORT then resolves it. The copy
    it is handed names no external file."""
    import numpy as np
    import onnx

    from mapper.core import limits
    from mapper.model.ort_shapes import without_external_data

    big = onnx.numpy_helper.from_array(np.array([5 << 14, 1 << 13], np.int64), "shape")  # 5 GiB of int64
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["shape"], ["huge"], value=helper.make_tensor("v", onnx.TensorProto.INT64, [1], [1])
        ),
        helper.make_node(
            "DecoderMaskedMultiHeadAttention", ["q", "q", "q"], ["y"], domain="com.microsoft", num_heads=4
        ),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    args = (nodes, [tensor("q", [2, 1, 64])], [tensor("z", None), tensor("huge", None, onnx.TensorProto.INT64)], [big])
    monkeypatch.setattr(limits, "ORT_NODE_QUERIES", 0)  # the whole-model child alone
    w = _contrib_workload(*args)
    assert "z" not in w.graph.tensors and "has no known shape" in w.nodes[-1].reason
    monkeypatch.undo()
    assert _contrib_workload(*args).graph.tensors["z"].shape == (2, 1, 64)
    m = onnx.load_from_string(
        make_model(
            [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [4])], [tensor("y", [4])], [weight("w", (4,))]
        )
    )
    ext = m.graph.initializer[0]
    ext.data_location = onnx.TensorProto.EXTERNAL
    ext.external_data.add(key="location", value=str(tmp_path / "secret"))
    stripped = without_external_data(m)
    assert not stripped.graph.initializer and "w" in {i.name for i in stripped.graph.input}
    assert b"secret" not in stripped.SerializeToString()


def test_opset_7_attribute_forms_are_read():
    data = make_model(
        [
            helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]),
            helper.make_node("Slice", ["u"], ["s"], starts=[1], ends=[3], axes=[2]),
        ],
        [tensor("x", [4, 5])],
        [tensor("s", [1, 4, 2])],
        opset=7,
    )
    w = mapper.load_workload(data)
    assert w.graph.tensors["s"].shape == (1, 4, 2)


def test_opset_below_7_is_refused():
    with pytest.raises(mapper.MapperError, match="opset 6"):
        mapper.load_workload(
            make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])], opset=6)
        )


# --- bottleneck rules: hand-made facts, first match wins --------------------------------------------
def _facts(**kw):
    base = dict(
        engine="matrix",
        time_s=10e-6,
        compute_s=8e-6,
        memory_s=2e-6,
        overhead_s=1e-6,
        sync_s=0.0,
        intensity=500.0,
        ridge=295.0,
        waves=4,
        wave_efficiency=0.95,
        padding_efficiency=1.0,
        overlap_exponent=6.0,
    )
    return Facts(**{**base, **kw})


@pytest.mark.parametrize(
    "facts,cls,evidence",
    [
        (_facts(), "compute-bound (matrix)", "intensity 500 FLOP/B above ridge 295"),
        (_facts(memory_s=9e-6, compute_s=3e-6, intensity=12.0), "memory-bound", "intensity 12 FLOP/B below ridge 295"),
        (_facts(overhead_s=LAUNCH_SHARE * 10e-6), "launch / latency-bound", "launch 5.00 µs of 10.0 µs"),
        (
            _facts(waves=2, wave_efficiency=0.51, padding_efficiency=1.0),
            "occupancy / wave quantization",
            "2 waves at 51%",
        ),
        (_facts(engine="host"), "host / unsupported", "runs on the host"),
        (_facts(engine="sfu", intensity=5.0), "compute-bound (vector/SFU)", "sfu units busy"),
        (_facts(sync_s=4e-6), "synchronization", "grid sync 4.00 µs"),
    ],
)
def test_bottleneck_rules(facts, cls, evidence):
    got, text, owner = classify(facts)
    assert got == cls and evidence in text and owner


def test_occupancy_threshold_is_the_named_one():
    just_above = _facts(wave_efficiency=OCCUPANCY_LIMIT + 0.01)
    just_below = _facts(wave_efficiency=OCCUPANCY_LIMIT - 0.01)
    assert classify(just_above)[0] == "compute-bound (matrix)"
    assert classify(just_below)[0] == "occupancy / wave quantization"


def test_onnxruntime_shape_inference_leaves_the_working_folder_alone(tmp_path, monkeypatch):
    """Where it cannot infer every shape (here: QLinearConv), ONNX Runtime saves the model as
    sym_shape_infer_temp.onnx in its working folder; the child runs in a scratch folder instead."""
    import onnx

    from mapper.model.ort_shapes import ort_inferred_value_info
    from tests.conftest import MODELS_DIR

    monkeypatch.chdir(tmp_path)
    assert (
        ort_inferred_value_info(onnx.load(MODELS_DIR / "resnet50_int8_qoperator.onnx", load_external_data=False)) == []
    )
    assert list(tmp_path.iterdir()) == []


def test_a_second_entry_for_one_op_type_raises():
    """Two entries for one op would make the winner depend on import order: registering one raises."""
    from mapper.ops import OPS, Backward, OpDef

    with pytest.raises(ValueError, match="a second registration of Relu"):
        OPS.register(OpDef("Relu", backward=Backward.VECTOR))
