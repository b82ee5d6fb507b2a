"""The dashboard's shared models (app_pages/held.py, issue 31): keyed by content, bounded by the bytes the engine's
estimate charges (not by a count of handles), each held by the sessions showing it, released once no session
has shown it for MODEL_IDLE_SECONDS or its sessions ended; and the estimate itself, checked against a real
node-dense model's allocations."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from dataclasses import dataclass, field

import pytest
from onnx import TensorProto, helper

import mapper
from app_pages.held import HeldModels
from mapper.core.footprint import Footprint
from tests.conftest import make_model, tensor

MB = 1 << 20


@dataclass(eq=False)
class FakeHandle:
    """What HeldModels reads of a handle: its footprint and how many workloads it keeps."""

    footprint_of: Footprint
    workloads_kept: int = 0
    label: str = ""
    builds: list = field(default_factory=list)

    def footprint(self) -> Footprint:
        return self.footprint_of


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def held(budget: int, alive=lambda _: True, clock=None) -> HeldModels:
    return HeldModels(budget, idle_s=600, mappings_each=4, alive=alive, clock=clock or Clock())


def handle(handle_mb: float, label: str = "", workload_mb: float = 1, mapping_mb: float = 1) -> FakeHandle:
    return FakeHandle(Footprint(int(handle_mb * MB), int(workload_mb * MB), int(mapping_mb * MB)), label=label)


def test_one_content_is_parsed_once_for_every_session():
    models, builds = held(100 * MB), []

    def build():
        builds.append(1)
        return handle(10)

    first = models.model(("upload:abc", "a.onnx"), build, "session-1")
    again = models.model(("upload:abc", "a.onnx"), build, "session-2")
    assert first is again and len(builds) == 1


def test_one_content_built_by_two_sessions_at_once_is_parsed_once():
    models, builds, gate = held(100 * MB), [], threading.Event()

    def build():
        builds.append(1)
        gate.wait(5)
        return handle(10)

    threads = [threading.Thread(target=models.model, args=("k", build, f"s{i}")) for i in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(builds) == 1


def test_the_bound_is_bytes_not_handles():
    """The issue's attack: one hostile file uploaded under 8 names, each a handle of its own."""
    models = held(1000 * MB)
    for i in range(8):
        models.model(("upload:hostile", f"name{i}.onnx"), lambda: handle(400), f"attacker-{i}")
        assert models.held_bytes() <= 1000 * MB
    assert len(models.held_keys()) == 2  # 2 x 400 MB fit; the least recently used went first


def test_models_no_session_shows_go_first_and_the_one_in_use_stays():
    models = held(1000 * MB)
    models.model("shown", lambda: handle(400), "alice")
    models.model("left", lambda: handle(400), "bob")
    models.model("bobs-new", lambda: handle(400), "bob")  # bob moved on: 'left' is idle, 'shown' is not
    assert models.held_keys() == ["shown", "bobs-new"]


def test_an_idle_model_is_released_after_the_idle_time():
    clock = Clock()
    models = held(1000 * MB, clock=clock)
    models.model("a", lambda: handle(10), "alice")
    models.model("b", lambda: handle(10), "alice")  # alice shows b now: nobody shows a
    clock.now += 599
    models.model("b", lambda: handle(10), "alice")
    assert "a" in models.held_keys()
    clock.now += 1
    models.model("b", lambda: handle(10), "alice")
    assert models.held_keys() == ["b"]


def test_an_ended_sessions_model_is_released():
    clock, ended = Clock(), set()
    models = held(1000 * MB, alive=lambda s: s not in ended, clock=clock)
    models.model("alices-upload", lambda: handle(10), "alice")
    ended.add("alice")  # the browser closed; Streamlit dropped the session
    models.model("other", lambda: handle(10), "bob")
    clock.now += 600
    models.model("other", lambda: handle(10), "bob")
    assert models.held_keys() == ["other"]
    models.model("x", lambda: handle(10), "carol")
    models.release("carol")  # a session that says it ended
    clock.now += 600
    models.model("other", lambda: handle(10), "bob")
    assert models.held_keys() == ["other"]


def test_a_model_over_the_whole_budget_is_refused_in_one_line():
    models = held(100 * MB)
    with pytest.raises(mapper.MapperError) as caught:
        models.model("huge", lambda: handle(200), "alice")
    assert "MODEL_CACHE_BYTES" in str(caught.value) and "\n" not in str(caught.value)
    assert models.held_keys() == [] and models.held_bytes() == 0


def test_mappings_live_with_their_model_and_are_charged():
    models = held(100 * MB)
    models.model("m", lambda: handle(10, mapping_mb=20), "alice")
    made = []
    for i in range(6):
        models.mapping("m", ("slice", i), lambda i=i: made.append(i) or (f"result{i}", {}), "alice")
    assert models.mapping("m", ("slice", 5), lambda: pytest.fail("kept"), "alice") == ("result5", {})
    assert models.held_bytes() <= 100 * MB  # 10 + 4 x 20 = 90 MB: 4 kept (mappings_each), within the budget
    models.model("n", lambda: handle(50), "alice")  # the budget needs room: 'm' (idle now) goes with its mappings
    assert models.held_keys() == ["n"]


def test_workloads_bound_later_are_charged_on_the_next_use():
    models = held(100 * MB)
    h = models.model("m", lambda: handle(10, workload_mb=30), "alice")
    models.model("other", lambda: handle(10), "bob")
    h.workloads_kept = 3  # alice bound three shapes: 100 MB in all with 'other'
    models.model("m", lambda: pytest.fail("kept"), "alice")
    assert models.held_keys() == ["m"] and models.held_bytes() == 100 * MB


def chain_model(nodes: int) -> bytes:
    """Node-dense: a chain of Relu nodes, the most memory a byte of structure can ask for."""
    return make_model(
        [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(nodes)],
        [tensor("t0", ["batch", 64], TensorProto.FLOAT)],
        [tensor(f"t{nodes}", ["batch", 64], TensorProto.FLOAT)],
    )


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_the_estimate_covers_what_a_node_dense_model_allocates(h100):
    """What Python allocates for the handle, a workload and a mapping stays under the estimate (protobuf's own
    parse is outside tracemalloc's view: mapper/core/footprint.py charges it from RSS measurements)."""
    data = chain_model(5_000)
    gc.collect()
    tracemalloc.start()
    try:
        model = mapper.open_model(data, file_name="chain.onnx")
        result = mapper.map_workload(model.bind({"batch": 1}), h100, mapper.PlanOptions())
        doc = mapper.mapping_document(result)
        gc.collect()
        allocated = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    estimate = model.footprint().total(model.workloads_kept, 1)
    assert doc["kernels"] and allocated < estimate < 4 * allocated, (allocated, estimate)


def test_the_operator_sets_the_budget_and_a_bad_value_is_one_line(monkeypatch):
    monkeypatch.setenv("MAPPER_MODEL_CACHE_BYTES", "1_073_741_824")
    monkeypatch.setenv("MAPPER_MODEL_IDLE_SECONDS", "60")
    assert mapper.setting("MODEL_CACHE_BYTES") == 1 << 30 and mapper.setting("MODEL_IDLE_SECONDS") == 60
    assert mapper.setting_text("MODEL_CACHE_BYTES") == "MODEL_CACHE_BYTES=1073741824 (MAPPER_MODEL_CACHE_BYTES)"
    monkeypatch.setenv("MAPPER_MODEL_CACHE_BYTES", "2GB")
    with pytest.raises(mapper.MapperError, match="MAPPER_MODEL_CACHE_BYTES") as caught:
        mapper.setting("MODEL_CACHE_BYTES")
    assert "\n" not in str(caught.value)
