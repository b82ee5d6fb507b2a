"""serve_model reusing a mapping already made (the dashboard's Overview maps the batch, then serves it): the
mapped batch is not mapped again, the run and its assumptions are the same as without it, and a mapping of
another slice is never taken for the one being served."""

from __future__ import annotations

import mapper
from mapper.serve import engine
from mapper.serve.serving import ServingConfig
from tests.test_app import assert_clean, shown, start, state

HW = mapper.load_hardware("h100-sxm")
REQUEST = mapper.ServeRequest(ServingConfig(max_batch=8, rate_per_s=500.0, requests=2_000), follow_mapped_batch=True)


def counted(monkeypatch) -> list[int]:
    """The batches the serving engine maps itself (engine.map_workload), in order."""
    calls: list[int] = []
    real = engine.map_workload

    def spy(workload, hw, options):
        result = real(workload, hw, options)
        calls.append(result.totals.batch)
        return result

    monkeypatch.setattr(engine, "map_workload", spy)
    return calls


def test_the_mapped_batch_is_served_from_its_mapping_with_the_same_figures_and_assumptions(monkeypatch):
    model = mapper.open_model("resnet50")
    options = mapper.PlanOptions()
    mapped = mapper.map_workload(model.bind({"batch": 4}), HW, options)
    calls = counted(monkeypatch)
    fresh = mapper.serve_model(model, HW, options, REQUEST, {"batch": 4}).section()
    first = list(calls)
    assert 4 in first  # dynamic batches up to the mapped 4: the engine maps each size it probes
    reused = mapper.serve_model(model, HW, options, REQUEST, {"batch": 4}, mapped).section()
    assert calls[len(first) :] == [b for b in first if b != 4]  # the same sizes again, the mapped 4 not at all
    assert reused == fresh
    assert "service time: the engine's latency at the batch size, computed once per size" in reused["assumptions"]


def test_a_mapping_of_another_slice_is_not_taken_for_the_served_one(monkeypatch):
    model = mapper.open_model("resnet50")
    options = mapper.PlanOptions()
    other_options = mapper.map_workload(model.bind({"batch": 4}), HW, mapper.PlanOptions(dtype="fp32"))
    other_hw = mapper.map_workload(model.bind({"batch": 4}), mapper.load_hardware("a100-sxm-80gb"), options)
    calls = counted(monkeypatch)
    fresh = mapper.serve_model(model, HW, options, REQUEST, {"batch": 4}).section()
    for mapped in (other_options, other_hw):
        assert mapper.serve_model(model, HW, options, REQUEST, {"batch": 4}, mapped).section() == fresh
    assert calls.count(4) == 3  # each mapped the served slice itself


def test_the_serving_page_shows_the_assumptions_of_mapper_serve_for_the_mapped_batch():
    at = start(model="resnet50", rate_per_s=500)
    assert_clean(at, "resnet50")
    sel = state(at).selection
    fresh = mapper.serve_model(sel.source, sel.hw, sel.options, state(at).assessment.question.serve, dict(sel.dims))
    at.switch_page("app_pages/serving.py").run()
    assert_clean(at, "resnet50 / Serving")
    shown_lines = [shown(m.value) for m in at.markdown if m.value.startswith("- arrivals")]
    assert len(shown_lines) == 1
    for line in fresh.result.assumptions:
        assert f"- {line}" in shown_lines[0]
