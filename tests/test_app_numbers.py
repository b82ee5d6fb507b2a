"""What a review meeting reads on the dashboard (issue 17): the verdict and KPI tiles in the decision
table's order, percentiles of the batch that was mapped with their load and batching, the overload flag
instead of a runaway p99, a drill-down whose times add up, and numbers formatted for people."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import mapper
from app_pages import session, ui
from tests.test_app import assert_clean, shown, start, state

RAW_NUMBER = re.compile(r"\de[+-]\d|\d\.\d{3,}\s*(mJ|ms|s)\b|\b\d+_\d+\b")  # 8.35e+03, 17,386.82 mJ


def pick(at, kernel: str) -> None:
    """Open a kernel's drill-down as a click in the table or on the chart does (the session's pick)."""
    at.session_state[session.KEY] = replace(state(at), picked_kernel=kernel)


def tiles(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_the_overview_leads_with_capacity_and_marks_every_kpi_unreachable():
    """Llama-2-70B on one H100 at bf16 needs ~139 GB of 80 GB: the verdict says so with the smallest TP
    that fits, before anything else, and every KPI tile says it is unreachable on this device."""
    at = start(model="llama2-70b", dtype="bf16")
    assert_clean(at, "llama2-70b")
    verdict = shown(next(m.value for m in at.markdown if m.value.startswith("**Verdict.**")))
    memory = state(at).doc["memory"]
    assert f"does not fit: short by {mapper.format_bytes(memory['shortfall_bytes'])}; smallest fit TP 2" in verdict
    assert "First failure: capacity; owner: runtime systems engineer" in verdict
    labels = list(tiles(at))
    assert len(labels) == 6 and all(label.endswith("(unreachable)") for label in labels), labels


@pytest.mark.slow  # derives the load a target allows, page by page: ~5 s
def test_the_latency_target_is_the_sidebars_and_comes_before_the_bottleneck():
    at = start(model="resnet50", batch=256, rate_per_s=500, p99_target_ms=1)
    verdict = shown(next(m.value for m in at.markdown if m.value.startswith("**Verdict.**")))
    assert "misses the latency target: request latency p99" in verdict and "First failure: latency target" in verdict
    at.session_state["p99_target_ms"] = 10_000.0
    at.run()
    verdict = shown(next(m.value for m in at.markdown if m.value.startswith("**Verdict.**")))
    assert "First failure: dominant bottleneck" in verdict


@pytest.mark.slow
def test_percentiles_are_the_assessments_at_the_load_it_says():
    """ResNet-50 at batch 1 and 256 at a given rate: the tile shows the assessment's p99 (dynamic batching up to
    the mapped batch), the load in its note; without a rate or target there is no percentile, and it says why."""
    shown_at = {}
    for batch in (1, 256):
        at = start(model="resnet50", batch=batch, rate_per_s=500)
        assert_clean(at, f"batch {batch}")
        doc = state(at).doc
        value = tiles(at)["request latency p99"]
        assert value == mapper.headline(doc)["request latency p99"]
        assert re.fullmatch(r"[\d.,]+ (µs|ms|s)", value), value  # one short value: it does not wrap at 1280x720
        note = next(m.delta for m in at.metric if m.label == "request latency p99")
        assert note == "500 req/s, given", note
        shown_at[batch] = value
    assert shown_at[1] != shown_at[256]
    at = start(model="resnet50", batch=8)
    assert tiles(at)["request latency p99"] == "—"
    assert any("derived: the saturation rate" in shown(c.value) for c in at.caption)


def test_an_overloaded_queue_is_flagged_not_given_a_p99():
    at = start(model="resnet50", batch=1)
    at.session_state["rate_per_s"] = 1_000_000.0
    at.run()
    assert_clean(at, "overload")
    assert tiles(at)["request latency p99"] == "overloaded"
    verdict = shown(next(m.value for m in at.markdown if m.value.startswith("**Verdict.**")))
    assert "is overloaded: offered 1,000,000 req/s" in verdict


def test_a_decoder_shows_ttft_and_tpot_percentiles_of_its_assessment():
    at = start(model="gpt2-small", rate_per_s=1)
    assert_clean(at, "gpt2-small")
    doc = state(at).doc
    serving = doc["serving"]
    shown_tiles = {m.label: (m.value, m.delta) for m in at.metric}
    for kind in ("ttft", "tpot"):
        value, note = shown_tiles[f"{kind.upper()} p99"]
        assert value == ui.duration(serving[f"{kind}_p99_s"]) and note == "1 req/s, given"
    at.switch_page("app_pages/serving.py").run()
    assert {m.label for m in at.metric} >= {f"{k} p{p}" for k in ("TTFT", "TPOT") for p in (50, 95, 99)}


def test_the_drilldown_times_every_tile_on_the_kernels_basis_and_shows_headroom():
    """The chosen tile's row is the kernel's own time; no runner-up is faster than it (launch included in
    all); the kernel's roofline time and its speed-up without its bottleneck are on the page."""
    at = start(model="resnet50", batch=8)
    doc = state(at).doc
    k = max((k for k in doc["kernels"] if k["alternatives"]), key=lambda k: k["time_s"])
    at.switch_page("app_pages/kernels.py").run()
    pick(at, k["name"])
    at.run()
    assert_clean(at, "drill-down")
    table = next(d.value for d in at.dataframe if "runner-up" in set(d.value.iloc[:, 0]))
    assert table.iloc[0, 0] == "chosen" and table["time (µs)"].iloc[0] == pytest.approx(k["time_s"] * 1e6)
    assert (table["time (µs)"].iloc[1:] >= table["time (µs)"].iloc[0] - 1e-9).all()
    assert list(table.columns) == ["", "tile", "split-K", "waves", "wave efficiency", "time (µs)"]
    assert tiles(at)["At its roofline"] == ui.duration(k["roofline_time_s"])
    assert tiles(at)["Speed-up without its bottleneck"] == f"{k['speedup_if_removed']:.2f}×"
    assert k["roofline_time_s"] < k["time_s"] and k["speedup_if_removed"] >= 1.0


@pytest.mark.parametrize("page", ["overview", "serving", "power", "kernels"])
def test_numbers_are_formatted_for_people(page):
    at = start(model="resnet50", batch=64, page=page)
    assert_clean(at, page)
    for m in at.metric:
        assert not RAW_NUMBER.search(m.value), (m.label, m.value)
    for d in at.dataframe:
        assert not [c for c in map(str, d.value.columns) if "_" in c], list(d.value.columns)


@pytest.mark.slow
def test_power_at_tp8_is_per_device_against_the_tdp_and_total_apart():
    at = start(model="llama2-70b", dtype="bf16", page="power")
    at.session_state["tp"] = 8
    at.run()
    assert_clean(at, "power tp 8")
    doc = state(at).doc
    per_device = doc["totals"]["avg_power_w"] / 8
    assert tiles(at)["Power per device"] == ui.num(per_device, "W")
    assert tiles(at)["Total power"] == ui.num(doc["totals"]["avg_power_w"], "W")
    assert per_device <= state(at).selection.hw.tdp_w
    assert any("8 devices" in c.value for c in at.caption)


def test_the_roofline_page_draws_its_chart_once():
    at = start(model="resnet50", page="roofline")
    pick(at, state(at).doc["kernels"][0]["name"])
    at.run()
    assert_clean(at, "roofline")
    assert len(at.get("plotly_chart")) == 1


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(8.35, "8.35 s"), (216.0, "3 min 36 s"), (0.0123, "12.3 ms"), (3.2e-6, "3.20 µs"), (None, "—")],
)
def test_one_duration_formatter(seconds, text):
    assert ui.duration(seconds) == mapper.format_duration(seconds) == text


def test_energy_is_never_thousands_of_millijoules():
    assert mapper.format_energy(17.38682) == "17.4 J" and mapper.format_energy(0.00123) == "1.23 mJ"
