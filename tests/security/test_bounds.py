"""Red team, issue 15 item 2: work is bounded before it runs (and item 6's parse crashes in the same code).

Each case is an amplifier found by the targeted review: a small input that asked for gigabytes or
hours, or a parser that recursed until Python gave up. Every one is refused (or its bad part
skipped) with one MapperError line that names the limit, before anything large is built.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from onnx import TensorProto, helper

import mapper
from mapper.core import limits
from mapper.core.errors import MapperError


def _model(nodes, inputs, outputs, initializer=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializer))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_control_flow_bodies_count_toward_max_nodes(monkeypatch):
    """A Loop whose body holds the work, inside Ifs nested 25 deep (about what protobuf parses):
    one node at the top level."""
    body_nodes = [helper.make_node("Relu", ["x"], [f"r{i}"]) for i in range(40)]
    body = helper.make_graph(
        body_nodes + [helper.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("c", [], TensorProto.BOOL)],
        [_vi("c_out", [], TensorProto.BOOL)],
    )
    node = helper.make_node("Loop", ["n", "cond"], [], body=body)
    empty = helper.make_graph([], "empty", [], [])
    for depth in range(25):  # each If's then-branch holds the one below: counted without recursion
        branch = helper.make_graph([node], f"b{depth}", [], [])
        node = helper.make_node("If", ["cond"], [], then_branch=branch, else_branch=empty)
    cond = helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True]))
    data = _model([cond, node], [_vi("x", [4]), _vi("n", [], TensorProto.INT64)], [_vi("x", [4])])
    monkeypatch.setattr(limits, "MAX_NODES", 50)  # the top level has 2 nodes; with the bodies, 67
    with pytest.raises(MapperError, match="MAX_NODES"):
        mapper.load_model(data)


def test_constant_of_shape_2_16_by_2_17_maps_without_allocating():
    """ORT would allocate 32 GiB for it; the importer rates its shape and folds nothing that large."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1 << 16, 1 << 17])
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["c"], value=fill),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    data = _model(nodes, [_vi("x", [1 << 16, 1 << 17])], [_vi("y", None)], [shape])
    tracemalloc.start()
    try:
        result = mapper.map_workload(mapper.load_workload(data), mapper.load_hardware("cpu-x86"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.totals.latency_s > 0
    assert peak < 200 << 20, f"mapping peaked at {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize(
    "raw",
    [
        b"[" + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"]",  # one event nested 10^5 deep
        b'{"traceEvents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # the array itself
    ],
    ids=["event", "array"],
)
def test_deeply_nested_profile_json_is_one_line(raw):
    with pytest.raises(MapperError, match="nested"):
        mapper.load_profile(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"meta": ' * 50_000 + b"1" + b"}" * 50_000,  # JSON
        b"a = " + b"[" * 50_000 + b"]" * 50_000,  # TOML arrays
        b"a = " + b"{b = " * 5_000 + b"1" + b"}" * 5_000,  # TOML inline tables
        b'a = "'
        + b"]" * 5_000
        + b'"\nb = '
        + b"[" * 5_000
        + b"]" * 5_000,  # brackets in a string hide depth from the scan
    ],
    ids=["json", "toml-arrays", "toml-tables", "toml-hidden"],
)
def test_deeply_nested_hardware_profile_is_one_line(raw):
    with pytest.raises(MapperError, match="nested"):
        mapper.load_hardware(raw)


def _ort_event(name: str, dur, ts=1) -> str:
    return (
        f'{{"ph": "X", "cat": "Node", "name": "{name}_kernel_time", "dur": {dur}, "ts": {ts},'
        f' "args": {{"op_name": "Relu"}}}}'
    )


@pytest.mark.parametrize(
    "bad",
    [
        _ort_event("bad", "Infinity"),
        _ort_event("bad", "NaN"),
        _ort_event("bad", "9" * 4000),
        _ort_event("bad", 5, ts='"abc"'),
        _ort_event("bad", -1),
    ],
    ids=["inf", "nan", "4000-digits", "ts-abc", "negative"],
)
def test_profile_event_with_unusable_numbers_is_skipped_and_counted(bad):
    """The event is skipped and counted; the rest of the profile loads with finite times."""
    times = mapper.load_profile(f"[{_ort_event('good', 5)}, {bad}]".encode())
    assert [n.name for n in times.nodes] == ["good"]
    assert times.skipped == 1
    assert times.total_s == pytest.approx(5e-6)


def test_chrome_trace_ts_abc_is_skipped():
    raw = (
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "dur": 3, "ts": "abc"},'
        b' {"ph": "X", "cat": "kernel", "name": "k", "dur": 3, "ts": 5}]}'
    )
    times = mapper.load_profile(raw)
    assert (times.kind, times.skipped, len(times.nodes)) == ("chrome-trace", 1, 1)


@pytest.mark.slow
def test_large_profile_loads_in_memory_proportional_to_events_kept():
    """50 MB of events with 1 kB of arguments each: what is kept (2,000 node names, seven fields an
    event) is small, and so is the peak; json.loads of the whole file peaked at several times its size."""
    events = [
        {
            "ph": "X",
            "cat": "Node",
            "name": f"node{i % 2000}_kernel_time",
            "dur": 5,
            "ts": i,
            "args": {"op_name": "Conv", "input_type_shape": "x" * 900},
        }
        for i in range(50_000)
    ]
    raw = json.dumps(events).encode()
    del events
    tracemalloc.start()
    try:
        times = mapper.load_profile(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(times.nodes) == 2000
    assert peak < len(raw) // 4, f"peak {peak / 2**20:.0f} MiB for a {len(raw) / 2**20:.0f} MiB profile"


def test_serving_requests_limit_fits_the_memory_budget_and_is_checked_first():
    """Dynamic batching peaks at ~310 bytes a request (measured, see limits.py): the limit keeps a run
    under 4 GiB, and a run over it is refused before anything is drawn."""
    from mapper.serve.serving import ServingConfig, simulate_serving

    assert limits.MAX_REQUESTS * 310 <= 4 << 30
    with pytest.raises(MapperError, match="MAX_REQUESTS"):
        simulate_serving(0.001, ServingConfig(requests=limits.MAX_REQUESTS + 1, max_batch=8))


def test_llm_requests_times_output_tokens_is_bounded():
    """1,000 requests of 900k output tokens: a 7 GB jitter array and 9e8 scheduler steps, refused."""
    from mapper.serve.continuous import LLMServingConfig, simulate_llm_serving

    config = LLMServingConfig(requests=1_000, output_tokens=900_000, prompt_tokens=16, kv_capacity_tokens=10**12)
    with pytest.raises(MapperError, match="MAX_LLM_TOKENS"):
        simulate_llm_serving(lambda b, t: 0.01, lambda b, t: 0.001, config)


@pytest.mark.parametrize(
    "row",
    ["0.5,1e20,4", "0.5,4,1e30", "0.5,4,99999999999999999999999"],
    ids=["prompt-1e20", "output-1e30", "output-beyond-int64"],
)
def test_trace_token_counts_beyond_max_tokens_are_refused(tmp_path, row):
    from mapper.serve.trace import load_trace

    path = tmp_path / "trace.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0.1,4,4\n{row}\n")
    with pytest.raises(MapperError, match="MAX_TOKENS"):
        load_trace(path)


def test_identity_only_model_serves_without_zero_division():
    """Every node is free: the assessment serves nothing and says why, in its load and the Serving section."""
    from mapper.serve.serving import ServingConfig, simulate_serving

    data = _model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    hw = mapper.load_hardware("cpu-x86")
    result = mapper.map_workload(mapper.load_workload(data), hw)
    answer = mapper.assess_slice(mapper.open_model(data), {}, hw)
    assert answer.load.source == mapper.LoadSource.REFUSED and "takes no time" in answer.load.refusal
    section = answer.document()["serving"]
    assert section["requests"] == 0 and section["assumptions"][0].startswith("not served:")
    with pytest.raises(MapperError, match="takes no time"):
        simulate_serving(lambda batch: result.totals.latency_s, ServingConfig(requests=10))


def test_sweep_grid_of_20k_by_20k_is_refused_before_it_is_built():
    """4e8 (batch, seq) pairs were listed before MAX_SLICES was checked; now the product of the axes
    is, and 1,000 x 1,000 (~5 h here) is over the limit too."""
    from mapper.explore.sweep import SweepSpec, plan_tasks

    axis = tuple(range(1, 20_001))
    with pytest.raises(MapperError, match="400,000,000 slices, over MAX_SLICES"):
        plan_tasks(SweepSpec(models=("bert-base",), hardware=("cpu-x86",), batches=axis, seqs=axis))
    with pytest.raises(MapperError, match="MAX_SLICES"):
        plan_tasks(SweepSpec(models=("bert-base",), hardware=("cpu-x86",), batches=axis[:1000], seqs=axis[:1000]))
