"""PyTorch profiler (Kineto) traces: read within bounds, tied to mapped kernels by module scope and correlation id.

The committed traces (data/evidence/torch_cpu, bench/torch_cpu_trace.py) are CPU runs of the built-ins at their
shapes; data/evidence/hta_sample is a public GPU trace of the built-in AlexNet (A100, no module scopes: matched in
graph order).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import onnx
import pytest

import mapper
from mapper.cli.main import main
from mapper.core.errors import MapperError
from mapper.evidence.compare import compare_measured
from mapper.evidence.measure import ORT_PLAN, Measurement, measurement_from_profile
from mapper.evidence.torch_match import onnx_types
from mapper.evidence.torch_trace import is_kineto, read_torch_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "evidence"


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _gpu_trace() -> dict:
    """Two steps of one conv and one relu, scoped by module path; a kernel per op, plus one of an unknown launch."""
    events = []
    for step, t0 in enumerate((0, 1000)):
        events += [
            _x("user_annotation", f"ProfilerStep#{step}", t0, 900),
            _x("user_annotation", "conv1", t0 + 10, 200),
            _x("cpu_op", "aten::conv2d", t0 + 20, 150),
            _x("cpu_op", "aten::convolution", t0 + 30, 100),
            _x("cuda_runtime", "cudaLaunchKernel", t0 + 40, 10, correlation=10 + step * 10),
            _x("user_annotation", "layer1.0", t0 + 300, 200),
            _x("cpu_op", "aten::relu_", t0 + 310, 50),
            _x("cuda_runtime", "cudaLaunchKernel", t0 + 320, 10, correlation=11 + step * 10),
            _x("kernel", "sm90_xmma_fprop", t0 + 100, 400, tid=7, correlation=10 + step * 10),
            _x("kernel", "vectorized_elementwise_kernel", t0 + 520, 40, tid=7, correlation=11 + step * 10),
        ]
    events.append(_x("kernel", "orphan_kernel", 2000, 60, tid=7, correlation=999))
    return {"schemaVersion": 1, "traceEvents": events}


def test_kernels_go_to_their_launching_op_and_module_scope():
    raw = json.dumps(_gpu_trace()).encode()
    for blob in (raw, gzip.compress(raw)):
        trace = read_torch_trace(blob)
        assert trace.device == "GPU" and trace.runs == 2 and trace.launches == 4
        by_name = {u.name: u for u in trace.units}
        assert (by_name["sm90_xmma_fprop"].op, by_name["sm90_xmma_fprop"].scope) == ("aten::conv2d", "conv1")
        assert (by_name["vectorized_elementwise_kernel"].op, by_name["vectorized_elementwise_kernel"].scope) == (
            "aten::relu_",
            "layer1.0",
        )
        assert "correlation 999" in by_name["orphan_kernel"].why
        assert is_kineto(raw, "t")


def test_a_gpu_trace_matches_resnet50_and_keeps_the_orphan_with_its_reason():
    m = measurement_from_profile(gzip.compress(json.dumps(_gpu_trace()).encode()), "resnet50")
    matched = {n.name: n for n in m.nodes}
    assert matched["sm90_xmma_fprop"].onnx_nodes == ("/conv1/Conv",)
    relus = {n.onnx_nodes for n in m.nodes if n.name == "vectorized_elementwise_kernel"}
    assert relus == {("/layer1.0/Relu",), ("/layer1.0/Relu_1",)}  # one relu per step: each takes the module's next
    assert matched["sm90_xmma_fprop"].time_s == pytest.approx(400e-6)  # per step
    assert matched["orphan_kernel"].onnx_nodes == () and "correlation 999" in matched["orphan_kernel"].how
    assert m.trace["runtime"] == "PyTorch (GPU profiler trace)" and 0.85 < m.trace["matched_share"] < 0.95


def test_aten_ops_become_onnx_types():
    assert onnx_types("aten::relu_") == {"Relu"}
    assert "MatMul" in onnx_types("aten::linear") and "Gemm" in onnx_types("aten::addmm")
    assert onnx_types("aten::arange") == frozenset()


@pytest.mark.parametrize("model", ["resnet50", "bert-base", "gpt2-small"])
def test_committed_cpu_traces_match_at_least_90_percent(model):
    m = measurement_from_profile(DATA / "torch_cpu" / f"{model}.json.gz", model)
    assert m.trace["device"] == "CPU" and m.trace["runs"] == 2
    assert m.trace["matched_share"] >= 0.9
    result = mapper.map_workload(mapper.open_model(model).bind(None), mapper.load_hardware("cpu-x86"), ORT_PLAN)
    comparison = compare_measured(result, m)
    assert all(layer["measured_s"] > 0 for layer in comparison["layers"] if layer["layer_type"] == "Linear/GEMM")
    row = comparison["model"]
    assert 0 <= row["measured_memory_stall_fraction"] <= 1 and 0 < row["class_agreement"] <= 1
    for layer in comparison["layers"]:
        if layer["measured_s"] > 0:  # the roofline's time over the measured time, and rates at the measured time
            assert layer["roofline_efficiency"] == pytest.approx(layer["roofline_s"] / layer["measured_s"])
            assert layer["achieved_bytes_per_s"] == pytest.approx(layer["dram_bytes"] / layer["measured_s"])
            assert layer["predicted_class"] and layer["measured_class"]


def test_idle_gaps_and_launch_time_go_to_their_kernels_and_sum_to_the_traces():
    """Each unit carries the gap on its stream since the previous unit there ended; per node, kernel group and layer
    type they sum to the trace's idle time. The synthetic trace: per step a conv kernel at +100..+500 us, a relu kernel
    at +520 (a 20 us gap); the orphan at 2000 follows step 2's relu (ends 1560): 440 us, over 2 steps."""
    m = measurement_from_profile(json.dumps(_gpu_trace()).encode(), "resnet50")
    idle = {n.name: 0.0 for n in m.nodes}
    for n in m.nodes:
        idle[n.name] += n.idle_s
    assert idle["vectorized_elementwise_kernel"] == pytest.approx(2 * 20e-6 / 2)
    assert idle["sm90_xmma_fprop"] == pytest.approx((1100 - 560) * 1e-6 / 2)  # step 2's conv after step 1's relu
    assert idle["orphan_kernel"] == pytest.approx(440e-6 / 2)
    assert sum(idle.values()) == pytest.approx(m.trace["idle_s"])
    launch = {n.name: n.launch_s for n in m.nodes if n.name == "sm90_xmma_fprop"}
    assert launch["sm90_xmma_fprop"] == pytest.approx(10e-6)  # its cudaLaunchKernel's 10 us, each step
    assert sum(n.launch_s for n in m.nodes) == pytest.approx(m.trace["launch_s"])  # the orphan has no launch
    result = mapper.map_workload(mapper.open_model("resnet50").bind(None), mapper.load_hardware("h100-sxm"), ORT_PLAN)
    layers = compare_measured(result, m)["layers"]
    assert sum(layer["idle_before_s"] for layer in layers) == pytest.approx(m.trace["idle_s"] - idle["orphan_kernel"])
    assert Measurement.from_dict({**m.to_dict(), "latencies_s": []}).nodes == m.nodes  # idle survives the round trip


def test_measured_stall_is_a_memory_bound_groups_time_past_its_compute_floor():
    from mapper.core.classes import Bottleneck
    from mapper.evidence.compare import _roofline_s, _stall_s

    group = {"measured_class": Bottleneck.MEMORY, "measured_s": 5e-3, "flops": 2e9}
    assert _stall_s(group, peak=1e12) == pytest.approx(5e-3 - 2e-3)  # 2 GFLOP at 1 TFLOP/s: a 2 ms floor
    assert _stall_s({**group, "measured_class": Bottleneck.COMPUTE_MATRIX}, peak=1e12) == 0.0
    assert _roofline_s(2e9, 3e9, peak=1e12, bandwidth=1e12) == pytest.approx(3e-3)  # the bytes are the slower


def test_the_public_gpu_sample_against_another_model_says_where_the_order_departs():
    m = measurement_from_profile(DATA / "hta_sample" / "alexnet_trace.json.gz", "resnet50")
    assert m.trace["device"] == "GPU" and m.trace["units"] > 50 and m.trace["matched_share"] == 0.0
    why = next(why for why in m.trace["unmatched_by_reason"] if "no module scopes" in why)
    assert "departs from the graph's (aten::relu_ where the graph runs BatchNormalization node /bn1/" in why
    assert m.trace["runs"] == 1 and m.trace["outside_runs_units"] == 0  # no passes without an alignment


def test_the_public_gpu_sample_matches_the_alexnet_built_in_in_graph_order():
    """HTA's AlexNet trace (A100, batch 128, a warm-up and a measured forward, no module scopes): each op instance
    takes the next node of its types, so both passes match; the weight copies and the input before the first pass
    are counted apart, and the only unmatched time inside the passes is dropout (no node at inference)."""
    m = measurement_from_profile(DATA / "hta_sample" / "alexnet_trace.json.gz", "alexnet")
    t = m.trace
    assert t["runs"] == 2 and t["matched_share"] > 0.99
    assert list(t["unmatched_by_reason"]) == ["no ONNX op is known for aten::dropout"]
    assert t["outside_runs_units"] == 17 and t["outside_runs_s"] > 0.05  # 16 weight/bias copies and aten::rand
    assert t["traced_s"] == pytest.approx(5.314e-3, rel=1e-3)  # per pass
    graph = mapper.build_zoo_model("alexnet").graph.node
    matched = {node for n in m.nodes for node in n.onnx_nodes}
    assert {n.name for n in graph if n.op_type in ("Conv", "Gemm", "MaxPool", "Relu", "AveragePool")} == matched
    conv1 = sum(n.time_s for n in m.nodes if n.onnx_nodes == ("/features.0/Conv",))
    # pass 1: a memset of cuDNN's algorithm search, offsets, the conv, its bias; pass 2: the last three again
    assert conv1 == pytest.approx((4 + 4 + 1035 + 187 + 4 + 1034 + 187) * 1e-6 / 2)


def test_graph_order_needs_the_trace_to_follow_the_graph():
    """Two passes of conv -> relu over a Conv -> Reshape -> Relu graph (the view launches nothing and is passed);
    a trace whose relu comes first departs from the graph at its Conv node."""
    from mapper.evidence.torch_match import _graph_order
    from mapper.evidence.torch_trace import Unit

    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            [
                onnx.helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                onnx.helper.make_node("Reshape", ["c", "s"], ["r"], name="view"),
                onnx.helper.make_node("Relu", ["r"], ["y"], name="relu"),
            ],
            "g",
            [],
            [],
        )
    )

    def units(*ops):
        return tuple(Unit(f"k{i}", op, "", float(i), 1.0, "0/7", f"op{i}") for i, op in enumerate(ops))

    order = _graph_order(model, units("aten::conv2d", "aten::relu_", "aten::conv2d", "aten::relu_"))
    assert order.passes == 2 and not order.departure
    assert list(order.node_of.values()) == ["conv", "relu", "conv", "relu"]
    bad = _graph_order(model, units("aten::relu_", "aten::conv2d"))
    assert bad.node_of == {} and "aten::relu_ where the graph runs Conv node conv" in bad.departure


def test_measure_says_pytorch_not_onnx_runtime(capsys):
    trace = str(DATA / "torch_cpu" / "resnet50.json.gz")
    assert main(["measure", "resnet50", "--hw", "cpu-x86", "--profile", trace]) == 0
    out = capsys.readouterr().out
    assert "on PyTorch (CPU profiler trace)" in out and "ONNX Runtime" not in out
    assert "matched to mapped kernels 100.0%" in out
    assert "memory stall" in out and "compute-bound (matrix) -> " in out and "GFLOP/s" in out


def _deep(n: int) -> bytes:
    return b'{"traceEvents": [' + b'{"a":' * n + b"1" + b"}" * n + b"]}"


HOSTILE = {
    "malformed": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", ',
    "deep": _deep(100_000),
    "no events": b'{"traceEvents": []}',
    "bomb": gzip.compress(b" " * (600 << 20)),
    "nan durations": json.dumps({"traceEvents": [_x("cpu_op", "aten::add", 0, "NaN")]}).encode(),
    "broken gzip": b"\x1f\x8b\x08\x00garbage",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_traces_are_one_line_exit_2(case, tmp_path, capsys):
    path = tmp_path / "trace.json"
    path.write_bytes(HOSTILE[case])
    with pytest.raises(MapperError):
        measurement_from_profile(HOSTILE[case], "resnet50")
    assert main(["measure", "resnet50", "--hw", "cpu-x86", "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_wrong_correlation_ids_match_nothing_but_are_kept():
    trace = _gpu_trace()
    for e in trace["traceEvents"]:
        if e["cat"] == "kernel":
            e["args"]["correlation"] += 5000
    m = measurement_from_profile(json.dumps(trace).encode(), "resnet50")
    assert m.trace["matched_share"] == 0.0 and all(not n.onnx_nodes for n in m.nodes)
    assert m.trace["traced_s"] == pytest.approx((2 * 440 + 60) / 2 * 1e-6)


def test_calibrating_on_a_trace_never_sees_its_held_back_kernels(tmp_path, capsys):
    """The declared split: every 4th measured kernel group is held back. Making those kernels 10x slower leaves the
    fitted curves as they were (the fit did not read them), and moves only the held-out score."""
    import dataclasses

    from mapper.evidence.calibrate import _held_nodes, calibrate, held_out_kernels, kernel_groups

    trace = DATA / "torch_cpu" / "resnet50.json.gz"
    m = measurement_from_profile(trace, "resnet50", "resnet50")
    result = mapper.map_workload(mapper.open_model("resnet50").bind(None), mapper.load_hardware("cpu-x86"), ORT_PLAN)
    held = _held_nodes(result, m, 4)
    slower = dataclasses.replace(
        m, nodes=tuple(dataclasses.replace(n, time_s=n.time_s * 10) if set(n.onnx_nodes) & held else n for n in m.nodes)
    )
    fits = [calibrate("cpu-x86", [x], holdout_every=4) for x in (m, slower)]
    for key in ("matrix_by_flops", "vector_by_bytes", "dram_by_bytes"):
        curves = [[e for _size, e in fit["efficiency"][key]["value"]] for fit in fits]
        assert curves[0] == pytest.approx(curves[1], rel=1e-9)
    report = held_out_kernels("cpu-x86", fits[0], [m], 4)
    groups, _, _ = kernel_groups(result, m)
    assert report["kernel_groups"] == sum(1 for i, g in enumerate(groups) if i % 4 == 3 and g["measured_s"] > 0)
    assert held_out_kernels("cpu-x86", fits[1], [slower], 4)["measured_s"] > 9 * report["measured_s"]
    out = tmp_path / "fitted.toml"
    assert main(["calibrate", "--hw", "cpu-x86", "--trace", f"resnet50={trace}", "--out", str(out)]) == 0
    assert "held back (every 4th measured kernel group" in capsys.readouterr().out and out.exists()
    assert main(["calibrate", "--hw", "cpu-x86", "--trace", str(trace), "--out", str(out)]) == 2  # no MODEL=


def test_measure_compares_a_trace_with_the_plan_it_ran(capsys):
    """`measure` takes `map`'s plan flags: the committed CPU trace against an int8 plan is another prediction."""
    trace = str(DATA / "torch_cpu" / "resnet50.json.gz")
    assert main(["measure", "resnet50", "--hw", "cpu-x86", "--profile", trace, "--json"]) == 0
    fp32 = json.loads(capsys.readouterr().out)["comparison"]["model"]["predicted_s"]
    assert main(["measure", "resnet50", "--hw", "cpu-x86", "--profile", trace, "--dtype", "int8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["comparison"]["model"]["predicted_s"] != fp32
