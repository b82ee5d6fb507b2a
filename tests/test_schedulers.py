"""LLM serving schedulers: prefill-first, decode-first and chunked prefill with preemption, by hand and compared."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

import mapper
from mapper.cli.main import main
from mapper.core.errors import MapperError
from mapper.core.units import format_duration
from mapper.serve.continuous import LLMServingConfig, simulate_llm_serving
from mapper.serve.trace import Trace

PREFILL = lambda b, t: 2e-3 + 1e-5 * b * t  # a weight read (2 ms) plus compute per prompt token
DECODE = lambda b, c: 2e-3 + 1e-4 * b + 1e-8 * b * c
ROOMY = 1_000_000  # KV tokens: never the limit
HW_JSON = ["--hw", "h100-sxm", "--json"]


def two_requests(**kw) -> LLMServingConfig:
    """A (prompt 100, 2 outputs) and B (prompt 50, 2 outputs), both arriving at 0."""
    trace = Trace(np.zeros(2), np.array([100, 50]), np.array([2, 2]), "two")
    return LLMServingConfig(max_batch=4, trace=trace, kv_capacity_tokens=ROOMY, jitter_cv=0.0, **kw)


def test_chunked_prefill_by_hand():
    """Chunks of 50: step 1 and 2 prefill A's halves (A's first token at t2); step 3 decodes A (context 101)
    beside B's whole prompt, sharing one weight read (a 1-token prefill), so A finishes and B's first token
    comes at t3; step 4 decodes B alone (context 51)."""
    r = simulate_llm_serving(PREFILL, DECODE, two_requests(scheduler="chunked", chunk_tokens=50))
    t2 = 2 * PREFILL(1, 50)
    t3 = t2 + DECODE(1, 101) + PREFILL(1, 50) - PREFILL(1, 1)
    t4 = t3 + DECODE(1, 51)
    assert r.ttft_p50_s == pytest.approx((t2 + t3) / 2)
    assert r.latency_p50_s == pytest.approx((t3 + t4) / 2)
    assert r.tpot_mean_s == pytest.approx(((t3 - t2) + (t4 - t3)) / 2)
    assert r.preemptions == 0 and r.scheduler == "chunked"


def test_prefill_first_and_decode_first_by_hand():
    """Both arrive together: one prefill step of 2 at the longest prompt, then decode steps together. B
    arriving after A's prefill shows the difference: prefill-first stalls A's decode for B's prefill,
    decode-first lets A finish first."""
    both = simulate_llm_serving(PREFILL, DECODE, two_requests(scheduler="prefill-first"))
    assert both.ttft_p50_s == pytest.approx(PREFILL(2, 100))
    late = Trace(np.array([0.0, 1e-3]), np.array([100, 50]), np.array([3, 2]), "late")
    first = simulate_llm_serving(PREFILL, DECODE, replace(two_requests(scheduler="prefill-first"), trace=late))
    drain = simulate_llm_serving(PREFILL, DECODE, replace(two_requests(scheduler="decode-first"), trace=late))
    p_a = PREFILL(1, 100)
    a_done_drained = p_a + DECODE(1, 101) + DECODE(1, 102)
    b_first_drained = a_done_drained + PREFILL(1, 50)
    assert drain.ttft_mean_s == pytest.approx((p_a + b_first_drained - 1e-3) / 2)
    b_first = p_a + PREFILL(1, 50)  # prefill-first: B's prefill is the second step
    assert first.ttft_mean_s == pytest.approx((p_a + b_first - 1e-3) / 2)


def loaded(**kw) -> LLMServingConfig:
    return LLMServingConfig(
        max_batch=32, rate_per_s=25, requests=3_000, prompt_tokens=1024, output_tokens=64, seed=3, **kw
    )


def test_schedulers_on_one_trace_order_as_sarathi_reports():
    """Sarathi-Serve (OSDI'24) fig. 1/7: decode-first has the best TPOT and worst TTFT; chunked prefill cuts
    prefill-first's decode stalls (TPOT tail) at a small TTFT cost."""
    runs = {
        s: simulate_llm_serving(PREFILL, DECODE, loaded(scheduler=s, kv_capacity_tokens=ROOMY))
        for s in mapper.SCHEDULERS
    }
    first, drain, chunked = runs["prefill-first"], runs["decode-first"], runs["chunked"]
    assert drain.ttft_p99_s > first.ttft_p99_s and drain.tpot_p99_s < first.tpot_p99_s
    assert chunked.tpot_p99_s < first.tpot_p99_s
    for r in runs.values():
        for m in ("ttft", "tpot", "latency"):
            assert getattr(r, f"{m}_p50_s") <= getattr(r, f"{m}_p90_s") <= getattr(r, f"{m}_p99_s")


TIGHT = 6 * 1024 + 200  # six prompts of 1024 and 200 tokens to decode into: six sequences need 6 x 63


def test_chunked_preempts_when_the_cache_is_full_and_every_request_finishes():
    """A cache for six prompts but 32 slots: on-demand KV admits six, whose decoding overflows the cache,
    and the latest admitted are preempted and recomputed; reserving schedulers never preempt. Every
    request still gets all its tokens (latency >= TTFT > 0)."""
    tight = simulate_llm_serving(PREFILL, DECODE, loaded(scheduler="chunked", kv_capacity_tokens=TIGHT))
    roomy = simulate_llm_serving(PREFILL, DECODE, loaded(scheduler="chunked", kv_capacity_tokens=ROOMY))
    reserved = simulate_llm_serving(PREFILL, DECODE, loaded(scheduler="prefill-first", kv_capacity_tokens=TIGHT))
    assert tight.preemptions > 0 and roomy.preemptions == 0 and reserved.preemptions == 0
    assert tight.ttft_p50_s > 0 and tight.latency_p50_s > tight.ttft_p50_s
    assert tight.latency_p99_s > roomy.latency_p99_s
    again = simulate_llm_serving(PREFILL, DECODE, loaded(scheduler="chunked", kv_capacity_tokens=TIGHT))
    assert again == tight  # deterministic, preemption and all


@pytest.mark.parametrize(
    ("change", "message"), [({"scheduler": "fastest"}, "scheduler"), ({"chunk_tokens": 0}, "chunk tokens")]
)
def test_bad_scheduler_options_are_one_line_errors(change, message):
    with pytest.raises(MapperError, match=message):
        simulate_llm_serving(PREFILL, DECODE, replace(two_requests(), **change))


def test_serve_cli_compares_schedulers(capsys):
    args = ["serve", "gpt2-small", "--max-batch", "4", "--rate", "20", "--requests", "60"]
    args += ["--prompt-tokens", "64", "--output-tokens", "8", "--scheduler", "chunked", "--chunk-tokens", "32"]
    assert main([*args, "--compare-schedulers", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scheduler"] == "chunked" and [row["scheduler"] for row in doc["schedulers"]] == list(mapper.SCHEDULERS)
    chunked = doc["schedulers"][2]
    assert chunked["ttft_p99_s"] == doc["ttft_p99_s"] and chunked["tpot_p50_s"] == doc["tpot_p50_s"]
    assert main(args) == 0  # alone, the chosen scheduler gives the same figures as in the comparison
    assert f"ttft p99                     {format_duration(doc['ttft_p99_s'])}\n" in capsys.readouterr().out
    assert main([*args, "--compare-schedulers"]) == 0
    assert "decode-first" in capsys.readouterr().out


@pytest.mark.slow
def test_serving_page_scheduler_selector_shows_the_clis_chunked_figures_and_keeps_the_link(capsys):
    """The sidebar's scheduler and chunk tokens (from a link, or chosen) serve the decoder as `mapper serve
    --scheduler chunked --chunk-tokens 64` does; the app writes them back into its URL."""
    from app_pages import ui
    from tests.test_app import RATES, SERVE_ARGS, SHOWN, assert_clean, start

    assert main(["serve", *SERVE_ARGS["decoder"], "--scheduler", "chunked", "--chunk-tokens", "64"] + HW_JSON) == 0
    section = json.loads(capsys.readouterr().out)
    at = start(model="gpt2-small", page="serving", scheduler="chunked", chunk_tokens=64, rate_per_s=RATES["decoder"])
    assert_clean(at, "chunked serving")
    assert at.selectbox(key="scheduler").value == "chunked" and at.number_input(key="chunk_tokens").value == 64
    shown = {m.label: m.value for m in at.metric}
    assert {label: shown.get(label) for label in SHOWN["decoder"]} == {
        label: ui.ms(section[key]) for label, key in SHOWN["decoder"].items()
    }
    assert (at.query_params["scheduler"], at.query_params["chunk_tokens"]) == ("chunked", "64")
    at.selectbox(key="scheduler").set_value("decode-first").run()
    assert at.number_input(key="chunk_tokens").disabled and at.query_params["scheduler"] == "decode-first"
    assumptions = " ".join(m.value for m in at.markdown)
    assert ui.md("scheduler decode-first") in assumptions and ui.md("scheduler chunked") not in assumptions


class _Called:
    """A grid's step times as a plain callable: no `grid_row`, so the chunked scheduler takes every step alone."""

    def __init__(self, grid):
        self.grid = grid

    def __call__(self, batch, tokens):
        return self.grid(batch, tokens)


@pytest.mark.parametrize("kv_tokens", [ROOMY, TIGHT])
def test_decode_steps_run_together_give_the_steps_one_by_one(kv_tokens):
    """A grid's decode steps between events run in one loop (`chunked.decode_run`): every request's first token
    and finish, the preemptions and the busy time are the same floats as the steps taken one by one, with the
    cache roomy or tight (preemptions), on a lazy grid whose columns are read as the steps reach them."""
    from mapper.explore.search_steps import LazyGrid
    from mapper.serve.steps import GridTime

    batches, contexts = [1, 8, 32], [1024, 1040, 1060, 1088]
    for grid in (GridTime(DECODE, batches, contexts), LazyGrid(DECODE, batches, contexts)):
        config = loaded(scheduler="chunked", kv_capacity_tokens=kv_tokens)
        together = simulate_llm_serving(PREFILL, grid, config)
        alone = simulate_llm_serving(PREFILL, _Called(GridTime(DECODE, batches, contexts)), config)
        assert together == alone
    assert together.preemptions > 0 if kv_tokens == TIGHT else together.preemptions == 0


def test_a_run_at_once_is_the_run_one_by_one():
    """A long decode run's steps in numpy (`chunked._at_once`) end where, and at the clock and busy time, the loop
    ends: random grid rows (some columns not read yet), contexts, batches, jitter and arrivals."""
    from mapper.serve.chunked import _at_once, _one_by_one, _reach, _Span
    from mapper.serve.scheduler import Jitter

    rng = np.random.default_rng(11)
    for case in range(400):
        xs = sorted({float(x) for x in rng.integers(1, 6000, size=int(rng.integers(2, 6)))})
        if len(xs) < 2:
            continue
        row = [None if rng.uniform() < 0.2 else float(rng.uniform(1e-3, 3e-2)) for _ in xs]
        drawn = rng.lognormal(0.0, 0.1, 5000)
        jitter = Jitter(drawn, lambda n: np.ones(n))
        batch, bound, step = int(rng.integers(1, 300)), int(rng.integers(1, 1500)), int(rng.integers(0, 3000))
        context = int(rng.integers(batch, batch * 6000))
        now = float(rng.uniform(0, 100))
        arrival = math.inf if case % 3 == 0 else now + float(rng.uniform(0, 5))
        span = _Span(row, xs, context, batch, min(bound, 5000 - step), jitter, step, arrival)
        expected = _one_by_one(span, now, 0.5)
        assert _at_once(span, now, 0.5) == expected
        assert _at_once(span._replace(bound=_reach(span, now)), now, 0.5) == expected
