"""Evidence: profile import and matching, probe output, measurement, comparison, calibration.

The committed tests/data/ort_profile_small.json was made by ONNX Runtime 1.32 (CPU, 1 thread) from
small_cnn() below: `.venv/bin/python tests/test_evidence.py` regenerates it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import mapper
from mapper.core.errors import MapperError
from mapper.evidence import (
    Measurement,
    calibrate,
    compare_measured,
    load_profile,
    match_nodes,
    measure_model,
    measurement_from_profile,
    probe_machine,
)
from mapper.evidence.calibrate import Sample, fit_curve
from mapper.evidence.profiles import NodeMatch, candidate_names

DATA = Path(__file__).parent / "data"
PROFILE = DATA / "ort_profile_small.json"


def small_cnn():
    """Conv -> BatchNormalization -> Relu -> MaxPool -> Flatten -> Gemm, named nodes, inline weights."""
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.uniform(0.5, 1.5, shape).astype(np.float32), name)
    inits = [
        w("conv_w", 16, 3, 3, 3),
        w("conv_b", 16),
        w("bn_s", 16),
        w("bn_b", 16),
        w("bn_m", 16),
        w("bn_v", 16),
        w("fc_w", 16 * 16 * 16, 10),
        w("fc_b", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_ort_profile_loads_and_matches_every_node():
    times = load_profile(PROFILE)
    assert times.kind == "onnxruntime" and times.runs >= 3
    by_op = {n.op_type for n in times.nodes}
    assert "MaxPool" in by_op and times.total_s > 0
    matches = {m.name: m for m in match_nodes(times, small_cnn())}
    # ORT fused Conv+BN+Relu; its NCHWc node is named after the chain's output tensor ("r_nchwc" -> r -> relu)
    matched = [m for m in matches.values() if m.onnx_nodes]
    assert sum(m.time_s for m in matched) / times.total_s > 0.9
    assert any("relu" in m.onnx_nodes for m in matched)
    assert any("fc" in m.onnx_nodes for m in matched)


def test_profile_bytes_and_statistics_agree():
    raw = PROFILE.read_bytes()
    median, best = load_profile(raw), load_profile(raw, statistic="min")
    assert {n.name for n in median.nodes} == {n.name for n in best.nodes}
    assert all(
        b.time_s <= m.time_s + 1e-12
        for b, m in zip(sorted(best.nodes, key=lambda n: n.name), sorted(median.nodes, key=lambda n: n.name))
    )


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b"not json", "not JSON"),
        (b'{"a": 1}', "traceEvents"),
        (b"[]", "no complete"),
        (b'[{"ph": "X", "name": "a", "dur": 1, "cat": "foo"}]', "Chrome trace"),
    ],
)
def test_bad_profiles_are_one_line_errors(raw, fragment):
    with pytest.raises(MapperError, match=fragment):
        load_profile(raw)


def test_chrome_trace_keeps_outermost_events_and_matches_names():
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "conv", "ts": 0, "dur": 100, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 10, "dur": 80, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "fc", "ts": 200, "dur": 50, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 300, "dur": 20, "tid": 1},
    ]
    times = load_profile(json.dumps({"traceEvents": events}).encode())
    assert {n.name: n.time_s for n in times.nodes} == pytest.approx({"conv": 1e-4, "fc": 5e-5, "aten::addmm": 2e-5})
    m = {x.name: x for x in match_nodes(times, small_cnn())}
    assert m["conv"].onnx_nodes == ("conv",) and m["aten::addmm"].onnx_nodes == ()


def test_ort_suffixes_strip():
    assert candidate_names("r2_nchwc") == ["r2_nchwc", "r2"]
    assert "x" in candidate_names("x_fusion_kernel_time")


def test_compare_an_imported_profile(tmp_path):
    path = tmp_path / "small.onnx"
    path.write_bytes(small_cnn().SerializeToString())
    measurement = measurement_from_profile(PROFILE, str(path))
    result = mapper.map_workload(mapper.load_workload(str(path)), mapper.load_hardware("cpu-x86"))
    doc = compare_measured(result, measurement)
    json.dumps(doc, allow_nan=False)
    assert doc["model"]["measured_p50_s"] > 0 and doc["model"]["error"] is not None
    assert abs(doc["kernels"][0]["predicted_s"] - doc["kernels"][0]["measured_s"]) >= abs(
        doc["kernels"][-1]["predicted_s"] - doc["kernels"][-1]["measured_s"]
    )
    assert {row["layer_type"] for row in doc["layers"]} >= {"Conv"}


def test_quick_probe_writes_a_valid_profile(tmp_path):
    out = tmp_path / "probed-cpu.toml"
    profile = probe_machine(out, quick=True)
    hw = mapper.load_hardware(out)
    assert hw.name == "probed-cpu" and hw.matrix_peak("fp32") > 1e9 and hw.dram_bandwidth_bytes_per_s > 1e9
    assert hw.sources["compute.matrix_peak_flops_per_s.fp32"].startswith("measured: mapper probe")
    assert hw.sources["overhead.kernel_launch_s"].startswith("measured:")
    assert profile["meta"]["name"] == "probed-cpu"
    # int8 is timed as quantized models run it: uint8 activations by a constant (prepacked) int8 weight
    assert "constant int8" in hw.sources["compute.matrix_peak_flops_per_s.int8"]
    from onnx import TensorProto

    from mapper.evidence.probe import _matmul_model

    gemm = _matmul_model(64, integer=True).graph
    assert [t.data_type for t in gemm.initializer] == [TensorProto.INT8] and gemm.node[0].input[1] == "b"


def test_measure_runs_a_model_and_matches_it(tmp_path):
    path = tmp_path / "small.onnx"
    path.write_bytes(small_cnn().SerializeToString())
    m = measure_model(str(path), runs=3, profiled_runs=2)
    assert len(m.latencies_s) == 3 and m.p50_s > 0 and m.percentile_s(50) <= m.percentile_s(99)
    assert sum(n.time_s for n in m.nodes if n.onnx_nodes) > 0.9 * sum(n.time_s for n in m.nodes)
    assert Measurement.from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_measure_cli_binds_batch_and_seq_by_the_models_own_names(capsys):
    """`mapper measure --batch/--seq` resolves the shortcuts as `mapper map` does (an Optimum export's dims
    are batch_size and sequence_length): the run and the prediction bind the same dims."""
    from mapper.cli.main import main
    from tests.conftest import MODELS_DIR

    model = str(MODELS_DIR / "optimum_llama_tiny_with_past.onnx")
    assert (
        main(
            [
                "measure",
                model,
                "--batch",
                "2",
                "--seq",
                "3",
                "--dim",
                "past_sequence_length=5",
                "--runs",
                "1",
                "--hw",
                "cpu-x86",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["dims"] == {"batch_size": 2, "past_sequence_length": 5, "sequence_length": 3}


def test_fit_curve_recovers_a_known_curve():
    truth = lambda lx: 0.2 * 4 ** ((lx - 4) / 6)
    samples = [Sample("matrix", lx, truth(lx), 1.0) for lx in np.linspace(4, 10, 25)]
    fitted = fit_curve([[1e4, 0.9], [1e10, 0.9]], samples, ridge=1e-4)
    for x, e in fitted:
        assert e == pytest.approx(truth(np.log10(x)), rel=0.02)


def test_calibrate_recovers_known_launch_and_efficiency():
    """Synthetic 'measurements' made by the engine itself with a known profile: calibrate from a wrong
    start recovers it."""
    truth = mapper.load_hardware("cpu-x86").to_dict()
    truth["overhead"]["kernel_launch_s"]["value"] = 2e-5
    truth["efficiency"]["matrix_by_flops"]["value"] = [[1e5, 0.05], [1e7, 0.1], [1e9, 0.2], [1e11, 0.3]]
    hw_true = mapper.load_hardware(truth)
    start = mapper.load_hardware("cpu-x86").to_dict()
    measurements = []
    for name, dims in (("resnet50", {"batch": 1}), ("bert-base", {"batch": 1, "seq": 32})):
        result = mapper.map_workload(mapper.load_workload(name, dims), hw_true)
        nodes = tuple(
            NodeMatch(e.kernel.name, "", e.time_s - e.overhead_s, (e.kernel.nodes[-1],), "name") for e in result.kernels
        )
        measurements.append(
            Measurement(
                name, tuple(dims.items()), 1, (result.totals.latency_s,) * 3, nodes, "synthetic", "", "", (), name
            )
        )
    fitted = calibrate(start, measurements)
    report = fitted.pop("calibration")
    assert report["median_abs_error_after"] < 0.03 < report["median_abs_error_before"]
    assert fitted["overhead"]["kernel_launch_s"]["value"] == pytest.approx(2e-5, rel=0.1)
    assert "calibrated: mapper calibrate" in fitted["efficiency"]["matrix_by_flops"]["source"]
    mapper.load_hardware(fitted)


def _regenerate() -> None:  # pragma: no cover - run by hand to refresh the committed profile
    import tempfile

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.enable_profiling = 1, True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ort")
    sess = ort.InferenceSession(small_cnn().SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(4):
        sess.run(None, {"x": np.ones((1, 3, 32, 32), np.float32)})
    events = [
        {k: v for k, v in e.items() if k in ("cat", "name", "ph", "ts", "dur", "pid", "tid")}
        | ({"args": {k: e["args"][k] for k in ("op_name", "provider")}} if e.get("cat") == "Node" else {})
        for e in json.loads(Path(sess.end_profiling()).read_text())
    ]
    PROFILE.write_text(json.dumps(events, indent=0))


if __name__ == "__main__":
    _regenerate() if sys.argv[1:] == [] else None


def test_calibrate_gives_an_outlier_op_its_own_scale():
    """ONNX Runtime's LRN runs ~10-30x off the vector roofline: calibration finds a per-op scale
    instead of bending the vector curve for every other kernel."""
    import onnx

    light = Path(onnx.__file__).parent / "backend/test/data/light/light_bvlc_alexnet.onnx"
    truth = mapper.load_hardware("cpu-x86").to_dict()
    truth["efficiency"]["op_time_scale"] = {"LRN": {"value": 15.0, "source": "synthetic truth"}}
    hw_true = mapper.load_hardware(truth)
    result = mapper.map_workload(mapper.load_workload(str(light)), hw_true)
    nodes = tuple(
        NodeMatch(e.kernel.name, e.kernel.op_types[-1], e.time_s - e.overhead_s, (e.kernel.nodes[-1],), "name")
        for e in result.kernels
    )
    m = Measurement("alexnet", (), 1, (result.totals.latency_s,) * 3, nodes, "synthetic", "", "", (), str(light))
    fitted = calibrate(mapper.load_hardware("cpu-x86").to_dict(), [m])
    report = fitted.pop("calibration")
    assert fitted["efficiency"]["op_time_scale"]["LRN"]["value"] == pytest.approx(15.0, rel=0.2)
    assert "single-op LRN kernels" in fitted["efficiency"]["op_time_scale"]["LRN"]["source"]
    assert report["median_abs_error_after"] < 0.05 < report["median_abs_error_before"]


def test_an_imported_trace_names_the_model_not_its_handle():
    """The CLI passes the opened handle: the measurement is named by the model and re-opens from its name (a
    handle's repr was written as the name before)."""
    trace = Path(__file__).resolve().parents[1] / "data" / "evidence" / "torch_cpu" / "resnet50.json.gz"
    m = measurement_from_profile(trace, mapper.open_model("resnet50"))
    assert m.model_name == "resnet50" and m.to_dict()["source"] == "resnet50"
