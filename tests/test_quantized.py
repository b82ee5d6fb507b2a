"""Quantized models: ONNX Runtime's QOperator ops (float twin's rules over the data operands), the
Quantize/Dequantize types, QDQ weights stored as int8, and the int8 ResNet-50 fixtures made by ONNX
Runtime's static quantizer (tests/models/export_quantized.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mapper
from mapper.core.graph import LayerType, OpClass
from tests.conftest import MODELS_DIR, make_model, tensor


def _scalar(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def _qparams(*prefixes):
    """A scale and a uint8 zero point for each prefix (x_scale, x_zero_point...)."""
    return [t for p in prefixes for t in (_scalar(f"{p}_scale", 0.05), _scalar(f"{p}_zero_point", 128, np.uint8))]


def _int8_weight(name, shape):
    return numpy_helper.from_array(np.zeros(shape, np.int8), name)


def _map(nodes, inputs, outputs, inits):
    data = make_model(nodes, inputs, outputs, inits)
    m = onnx.load_from_string(data)
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return mapper.load_workload(m.SerializeToString())


def _u8(name, shape):
    return tensor(name, shape, TensorProto.UINT8)


def test_qlinear_matmul_counts_its_b_operand():
    """QLinearMatMul's B is input 3 (after a's scale and zero point): 2*M*N*K, not N=1."""
    node = helper.make_node(
        "QLinearMatMul",
        ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"],
        ["y"],
    )
    w = _map(
        [node],
        [_u8("a", [4, 64, 32])],
        [_u8("y", [4, 64, 48])],
        _qparams("a", "y")
        + [_int8_weight("b", (32, 48)), _scalar("b_scale", 0.1), _scalar("b_zero_point", 0, np.int8)],
    )
    (n,) = w.nodes
    assert n.op_class is OpClass.MATRIX and n.layer_type is LayerType.LINEAR
    assert n.matrix_flops == 2 * 4 * 64 * 48 * 32
    assert w.graph.tensors["y"].dtype == "uint8"
    assert n.weight_bytes == 32 * 48 + 3 * (4 + 1)  # int8 B; three float32 scales and 8-bit zero points


def test_qgemm_output_is_float_without_y_scale():
    common = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "c"]
    inits = _qparams("a", "y") + [
        _int8_weight("b", (10, 64)),
        _scalar("b_scale", 0.1),
        _scalar("b_zero_point", 0, np.int8),
        numpy_helper.from_array(np.zeros(10, np.int32), "c"),
    ]
    for inputs, dtype in ((common, "float32"), (common + ["y_scale", "y_zero_point"], "uint8")):
        node = helper.make_node("QGemm", inputs, ["y"], domain="com.microsoft", transB=1)
        w = _map([node], [_u8("a", [8, 64])], [tensor("y", [8, 10])], inits)
        assert w.graph.tensors["y"] == mapper.core.graph.TensorSpec("y", (8, 10), dtype)
        assert w.nodes[0].matrix_flops == 2 * 8 * 10 * 64


@pytest.mark.parametrize("op,float_twin_flops", [("QLinearAdd", 1), ("QLinearMul", 1)])
def test_qlinear_binary_broadcasts_and_requantizes(op, float_twin_flops):
    node = helper.make_node(
        op,
        ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "c_scale", "c_zero_point"],
        ["c"],
        domain="com.microsoft",
    )
    w = _map(
        [node], [_u8("a", [2, 8, 16, 16]), _u8("b", [1, 8, 1, 1])], [_u8("c", [2, 8, 16, 16])], _qparams("a", "b", "c")
    )
    (n,) = w.nodes
    assert w.graph.tensors["c"].shape == (2, 8, 16, 16)
    assert n.op_class is OpClass.ELEMENTWISE
    assert n.flops == (float_twin_flops + mapper.ops.work.REQUANTIZE) * 2 * 8 * 16 * 16


def test_qlinear_concat_and_where_pick_their_data_operands():
    concat = helper.make_node(
        "QLinearConcat",
        ["y_scale", "y_zero_point", "p", "p_scale", "p_zero_point", "q", "q_scale", "q_zero_point"],
        ["y"],
        domain="com.microsoft",
        axis=1,
    )
    w = _map([concat], [_u8("p", [1, 3, 8]), _u8("q", [1, 5, 8])], [_u8("y", None)], _qparams("y", "p", "q"))
    assert w.graph.tensors["y"].shape == (1, 8, 8)
    where = helper.make_node(
        "QLinearWhere",
        ["cond", "x", "x_scale", "x_zero_point", "z", "z_scale", "z_zero_point", "y_scale", "y_zero_point"],
        ["y"],
        domain="com.microsoft",
    )
    w = _map(
        [where],
        [tensor("cond", [4, 1], TensorProto.BOOL), _u8("x", [1, 6]), _u8("z", [4, 6])],
        [_u8("y", None)],
        _qparams("x", "z", "y"),
    )
    assert w.graph.tensors["y"].shape == (4, 6) and w.graph.tensors["y"].dtype == "uint8"


def test_qlinear_global_pool_and_dynamic_quantize_matmul():
    pool = helper.make_node(
        "QLinearGlobalAveragePool",
        ["x", "x_scale", "x_zero_point", "y_scale", "y_zero_point"],
        ["y"],
        domain="com.microsoft",
    )
    w = _map([pool], [_u8("x", [2, 64, 7, 7])], [_u8("y", None)], _qparams("x", "y"))
    assert w.graph.tensors["y"].shape == (2, 64, 1, 1) and w.nodes[0].layer_type is LayerType.POOLING
    mm = helper.make_node("DynamicQuantizeMatMul", ["a", "b", "b_scale"], ["y"], domain="com.microsoft")
    w = _map([mm], [tensor("a", [3, 16])], [tensor("y", None)], [_int8_weight("b", (16, 24)), _scalar("b_scale", 0.1)])
    assert w.graph.tensors["y"].dtype == "float32" and w.nodes[0].matrix_flops == 2 * 3 * 24 * 16


def test_quantize_dequantize_types():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["d"]),
        helper.make_node("DynamicQuantizeLinear", ["d"], ["dq", "dq_scale", "dq_zero_point"]),
    ]
    w = _map(
        nodes,
        [tensor("x", [4, 8])],
        [tensor("dq", None), tensor("dq_scale", None), tensor("dq_zero_point", None)],
        [_scalar("s", 0.1), _scalar("zp", 0, np.int8)],
    )
    t = w.graph.tensors
    assert (t["q"].dtype, t["d"].dtype, t["dq"].dtype) == ("int8", "float32", "uint8")
    assert (t["dq_scale"].shape, t["dq_zero_point"].shape) == ((), ())


def test_a_wrong_rank_quantized_operand_is_inconsistent_not_a_crash():
    node = helper.make_node(
        "QLinearConv",
        ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point"],
        ["y"],
    )
    w = _map(
        [node],
        [_u8("x", [8])],
        [_u8("y", [1, 4, 6, 6])],
        _qparams("x", "y")
        + [_int8_weight("w", (4, 2, 3, 3)), _scalar("w_scale", 0.1), _scalar("w_zero_point", 0, np.int8)],
    )
    assert w.nodes[0].op_class is OpClass.UNMODELED and "rank" in w.nodes[0].reason


# --- the int8 ResNet-50 fixtures (ONNX Runtime quantize_static, graph-only) ---------------------------
FIXTURES = ("resnet50_int8_qoperator", "resnet50_int8_qdq")


@pytest.mark.parametrize("stem", FIXTURES)
@pytest.mark.parametrize("batch", [1, 8])
def test_int8_resnet50_maps_like_the_float_one(stem, batch):
    """Every node modeled; the same matrix MACs as the float ResNet-50 (4.09 GMACs a image, torchvision);
    weights stored as int8 (the QDQ format's dequantized constants too), so the plan runs at int8."""
    w = mapper.load_workload(str(MODELS_DIR / f"{stem}.onnx"), {"batch": batch})
    assert not w.unmodeled
    float_model = mapper.load_workload("resnet50", {"batch": batch})
    assert w.matrix_flops == float_model.matrix_flops
    result = mapper.map_workload(w, mapper.load_hardware("h100-sxm"))
    assert result.totals.dtype == "int8" and not result.caveats
    params = sum(float_model.graph.tensors[t].elements for t in float_model.graph.weights)
    assert result.totals.weight_bytes == pytest.approx(params, rel=0.01)  # one byte a parameter
    assert not any(k.kernel.op_types in (("QuantizeLinear",), ("DequantizeLinear",)) for k in result.kernels[1:-1])


def test_int8_formats_agree_and_a_device_without_int8_says_so():
    """QDQ and QOperator exports of one model are one int8 workload: their latencies agree within 5% (QDQ's
    Quantize/Dequantize pairs ride in the kernels' epilogues). On Gaudi 2 (no int8 matrix peak) the plan
    falls back to the nearest wider precision it has (fp16) and says why."""
    hw = mapper.load_hardware("h100-sxm")
    times = [
        mapper.map_workload(mapper.load_workload(str(MODELS_DIR / f"{s}.onnx"), {"batch": 8}), hw).totals.latency_s
        for s in FIXTURES
    ]
    assert times[1] == pytest.approx(times[0], rel=0.05)
    gaudi = [
        mapper.map_workload(
            mapper.load_workload(str(MODELS_DIR / f"{s}.onnx"), {"batch": 8}), mapper.load_hardware("gaudi2")
        )
        for s in FIXTURES
    ]
    assert all(g.totals.dtype == "fp16" and "no int8 matrix peak" in g.caveats[-1] for g in gaudi)
    # at fp16 the weights still stream as the int8 memory holds them, in either format
    weight_traffic = [sum(k.kernel.weight_bytes for k in g.kernels) for g in gaudi]
    assert weight_traffic[1] == pytest.approx(weight_traffic[0], rel=0.01)


def test_int4_weight_only_model_stays_at_its_float_precision():
    """MatMulNBits (ONNX Runtime's int4 LLM weights) unpacks its packed uint8 weight and computes in the
    activations' float type: the plan stays fp32 and the weight streams packed (half a byte a weight)."""
    n, k, block = 64, 128, 32
    node = helper.make_node(
        "MatMulNBits", ["a", "b", "scales"], ["y"], domain="com.microsoft", K=k, N=n, bits=4, block_size=block
    )
    packed = numpy_helper.from_array(np.zeros((n, k // block, block // 2), np.uint8), "b")
    scales = numpy_helper.from_array(np.ones(n * k // block, np.float32), "scales")
    w = _map([node], [tensor("a", [16, k])], [tensor("y", [16, n])], [packed, scales])
    assert w.nodes[0].matrix_flops == 2 * 16 * n * k
    result = mapper.map_workload(w, mapper.load_hardware("h100-sxm"))
    assert result.totals.dtype == "fp32"
    assert result.totals.weight_bytes == n * k // 2 + 4 * n * k // block


def test_auto_dtype_takes_the_nearest_precision_a_device_has():
    """An fp16 model on a TPU v5e (bf16, int8 matrix peaks; no fp16) maps at bf16; on the CPU profile
    (fp32, int8) at fp32; on H100 at its own fp16. Each fallback is a caveat on the sheet."""
    node = helper.make_node("MatMul", ["a", "w"], ["y"])
    w = _map(
        [node],
        [tensor("a", [64, 256], TensorProto.FLOAT16)],
        [tensor("y", [64, 128], TensorProto.FLOAT16)],
        [numpy_helper.from_array(np.zeros((256, 128), np.float16), "w")],
    )
    for hw, dtype in (("h100-sxm", "fp16"), ("tpu-v5e", "bf16"), ("cpu-x86", "fp32")):
        result = mapper.map_workload(w, mapper.load_hardware(hw))
        assert result.totals.dtype == dtype
        assert bool(result.caveats) == (dtype != "fp16")


@pytest.mark.parametrize(
    "weight_type,name,bytes_per_weight", [(TensorProto.INT8, "int8", 1), (TensorProto.INT4, "int4", 0.5)]
)
def test_qdq_weight_only_quantization_stays_float(weight_type, name, bytes_per_weight):
    """DequantizeLinear(int8 or int4 constant) -> MatMul with float activations (no QuantizeLinear on
    them): weight-only quantization. The plan stays at the activations' fp32, and the weight streams at
    its stored width."""
    k, n = 256, 128
    packed = helper.make_tensor("w_q", weight_type, [k, n], [0] * (k * n))
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"]),
        helper.make_node("MatMul", ["a", "w"], ["y"]),
    ]
    data = make_model(
        nodes, [tensor("a", [32, k])], [tensor("y", [32, n])], [packed, _scalar("w_scale", 0.1)], opset=21
    )
    w = mapper.load_workload(data)
    assert w.graph.stored_dtypes == {"w": name}
    result = mapper.map_workload(w, mapper.load_hardware("h100-sxm"))
    assert result.totals.dtype == "fp32"
    assert sum(k_.kernel.weight_bytes for k_ in result.kernels) == pytest.approx(k * n * bytes_per_weight)


# --- BERT-base, dynamically quantized (ONNX Runtime quantize_dynamic, graph-only) --------------------
DYNAMIC = MODELS_DIR / "bert_base_int8_dynamic.onnx"


def test_dynamic_int8_bert_maps_like_the_float_one():
    """DynamicQuantizeLinear -> MatMulInteger (int8 weights) -> Cast -> Mul by the scale product: every node
    modeled, the float BERT-base's matrix FLOPs exactly, an int8 plan."""
    w = mapper.load_workload(str(DYNAMIC), {"batch": 2, "seq": 128})
    assert not w.unmodeled
    assert w.matrix_flops == mapper.load_workload("bert-base", {"batch": 2, "seq": 128}).matrix_flops
    assert mapper.map_workload(w, mapper.load_hardware("cpu-x86")).totals.dtype == "int8"


def test_dynamic_int8_gemm_dequantizes_in_its_epilogue():
    """ONNX Runtime runs each MatMulInteger -> Cast -> Mul(scale product) as one MatMulIntegerToFloat. The
    plan does the same: the Cast, the dequantizing Mul and the scalar scale product (which comes before
    the GEMM in graph order) ride in the GEMM's epilogue; no kernel is a lone scalar Mul."""
    w = mapper.load_workload(str(DYNAMIC), {"batch": 1, "seq": 128})
    result = mapper.map_workload(w, mapper.load_hardware("h100-sxm"))
    gemms = [k.kernel for k in result.kernels if k.kernel.op_types[0] == "MatMulInteger"]
    assert len(gemms) == 73  # 12 layers x 6 Linear + the pooler
    for kernel in gemms:
        assert kernel.op_types[:4] == ("MatMulInteger", "Cast", "Mul", "Mul"), kernel.name
        assert any(n.endswith("_quant_scales_mul") for n in kernel.nodes)
    assert not any(k.kernel.op_types == ("Mul",) and k.kernel.flops <= 4096 for k in result.kernels)
