"""The deployment search (mapper/explore/search.py): answers known by hand, a ranking that survives re-mapping,
infeasible points never chosen and saying why, bad inputs one line and exit 2."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import mapper
from mapper.cli.main import main
from mapper.core.targets import Targets
from mapper.explore.search import run_search
from mapper.explore.search_eval import requests_at
from mapper.explore.search_space import PRUNE_REASONS, SearchSpec, plan_options
from mapper.serve.continuous import LLMServingConfig
from mapper.serve.llm import simulate_model_llm_serving

# A small space: one chunk, KV at the activations' precision, short requests.
SMALL = SearchSpec(
    2,
    prompt_tokens=256,
    output_tokens=32,
    requests=64,
    kv_dtypes=("same",),
    chunks=(512,),
    pps=(1,),
    targets=Targets(ttft_p99_s=5.0),
)


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "gpt2-small", "--devices", "0", "--tpot-p99-ms", "30"],
        ["search", "gpt2-small", "--devices", "2"],  # neither a target nor a rate
        ["search", "resnet50", "--devices", "2", "--tpot-p99-ms", "5"],  # no KV cache: no TPOT
        ["search", "gpt2-small", "--devices", "2", "--tpot-p99-ms", "-1"],
        ["search", "gpt2-small", "--devices", "2", "--tpot-p99-ms", "30", "--tps", "1,x"],
        ["search", "gpt2-small", "--devices", "2", "--tpot-p99-ms", "30", "--kv-dtypes", "fp9"],
        ["search", "gpt2-small", "--tpot-p99-ms", "30"],  # --devices is required
    ],
)
def test_bad_inputs_are_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in err


def test_expert_plans_are_the_ones_runtimes_deploy():
    """EP rides the TP ranks (--tp N --ep N) or, at TP 1, the ranks of attention DP; EP beside replicated attention
    (--tp 1 --ep N alone) is not in the space: no runtime runs it."""
    plans = {(o.tp, o.ep, o.attention_dp) for o in plan_options(SearchSpec(8, pps=(1,), kv_dtypes=("same",)), (8,))}
    assert plans == {(1, 1, False), (2, 1, False), (4, 1, False), (8, 1, False)} | {
        (1, 2, True),
        (1, 4, True),
        (1, 8, True),
        (2, 2, False),
        (4, 4, False),
        (8, 8, False),
    }
    assert {(o.tp, o.ep) for o in plan_options(SMALL, ())} == {(1, 1), (2, 1), (4, 1), (8, 1)}  # a dense model


def test_json_answer_has_best_frontier_and_counts(capsys):
    argv = ["search", "gpt2-small", "--hw", "h100-sxm", "--devices", "2", "--tps", "1,2", "--pps", "1"]
    argv += ["--prompt-tokens", "128", "--output-tokens", "16", "--requests", "32", "--chunks", "512"]
    argv += ["--kv-dtypes", "same", "--max-batch", "8", "--tpot-p99-ms", "50", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    best = doc["best"]
    for key in ("tp", "pp", "dtype", "kv_dtype", "max_batch", "tokens_per_s_per_device", "ttft_p99_s", "tpot_p99_s"):
        assert key in best
    assert best["meets_sla"] and best["command"].startswith("mapper serve gpt2-small")
    assert doc["frontier"] and doc["evaluated"]["configurations"] >= len(doc["frontier"])
    assert set(doc["evaluated"]["pruned"]) == set(PRUNE_REASONS)


def test_infeasible_points_are_never_chosen_and_say_why():
    spec = replace(SMALL, caps=(1, 2, 4, 8, 16, 32), targets=Targets(ttft_p99_s=0.02, tpot_p99_s=0.004))
    result = run_search("gpt2-small", mapper.load_hardware("l4"), spec)
    best = result.best
    misses = [p for p in result.points if not p.feasible]
    assert misses, "the tight targets leave some configuration infeasible"
    for p in misses:
        assert p is not best and p.failure.startswith(("misses", "overloaded")) and "ms" in p.failure
    assert best is None or best.feasible
    assert all(p.reason in PRUNE_REASONS and p.detail for p in result.pruned)


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_capacity_forces_tp_2():
    """Llama-2-70B in bf16 (138 GB of weights) cannot sit on one H200 (0.9 x 141 GB): TP 2 is the answer."""
    spec = replace(SMALL, caps=(1, 2, 4), tps=(1, 2), requests=32, output_tokens=16)
    result = run_search("llama2-70b", mapper.load_hardware("h200-sxm"), replace(spec, dtypes=("bf16",)))
    assert result.best is not None and result.best.plan.options.tp == 2
    capacity = [p for p in result.pruned if p.reason == "capacity"]
    assert capacity and capacity[0].what.startswith("TP 1") and "GB of weights" in capacity[0].detail


def test_a_tpot_target_met_only_below_a_batch_cap():
    """One plan: TPOT rises with the cap; a target between two caps' TPOT picks the cap below it."""
    hw = mapper.load_hardware("h100-sxm")
    spec = replace(SMALL, devices=1, tps=(1,), caps=(1, 2, 4, 8, 16, 32, 64), prompt_tokens=512, output_tokens=64)
    loose = run_search("llama2-7b", hw, spec)
    tpot = {p.max_batch: p.tpot_p99_s for p in loose.points}
    assert tpot[32] > tpot[8], "a larger batch slows the decode step"
    target = (tpot[8] + tpot[16]) / 2
    assert tpot[16] > target
    tight = run_search("llama2-7b", hw, replace(spec, targets=Targets(ttft_p99_s=5.0, tpot_p99_s=target)))
    assert tight.best is not None and tight.best.max_batch == 8
    over = [p for p in tight.points if p.max_batch == 16]
    assert over and over[0].failure.startswith("misses TPOT p99")
    assert any(p.reason == "tpot-rises" for p in tight.pruned), "larger caps are not served after a TPOT miss"


@pytest.mark.slow
def test_top_three_remapped_independently_keep_their_order():
    """Each of the three best configurations served directly (`simulate_model_llm_serving`, its own grids and KV
    budget from scratch, as its `mapper serve` command does) gives the same figures, so the same order."""
    hw = mapper.load_hardware("h100-sxm")
    spec = replace(
        SMALL, devices=4, tps=(1, 2, 4), caps=(4, 16, 64), targets=Targets(tpot_p99_s=0.05), disaggregated=False
    )
    result = run_search("llama2-7b", hw, spec)
    top = sorted((p for p in result.points if p.feasible), key=lambda p: -p.tokens_per_s_per_device)[:3]
    assert len(top) == 3
    again = []
    for p in top:
        config = served_as(spec, p, scheduler="chunked", chunk_tokens=p.chunk_tokens)
        served = simulate_model_llm_serving("llama2-7b", hw, p.plan.options, config)
        again.append(served.throughput_tokens_per_s / p.plan.devices_per_replica)
        assert served.tpot_p99_s == pytest.approx(p.tpot_p99_s, rel=1e-9)
    assert again == pytest.approx([p.tokens_per_s_per_device for p in top], rel=1e-9)
    assert again == sorted(again, reverse=True)


@pytest.mark.slow
def test_a_process_pool_gives_the_same_answer(capsys):
    """The plans handed to two worker processes come back with the answer one process gives."""
    args = ["search", "llama2-7b", "--hw", "h100-sxm", "--devices", "2", "--dtype", "bf16", "--prompt-tokens", "512"]
    args += ["--output-tokens", "64", "--tpot-p99-ms", "30", "--json", "--aggregated-only"]
    answers = []
    for workers in ("1", "2"):
        assert main([*args, "--workers", workers]) == 0
        doc = json.loads(capsys.readouterr().out)
        answers.append((doc["best"], doc["frontier"]))
    assert answers[0] == answers[1]


@pytest.mark.slow
def test_a_dask_cluster_gives_the_same_answer(capsys):
    """`--dask ADDRESS`: the plans served on a running Dask cluster's two worker processes come back with the
    answer one process gives."""
    distributed = pytest.importorskip("distributed")
    args = ["search", "llama2-7b", "--hw", "h100-sxm", "--devices", "2", "--dtype", "bf16", "--prompt-tokens", "512"]
    args += ["--output-tokens", "64", "--tpot-p99-ms", "30", "--json", "--aggregated-only"]
    assert main(args) == 0
    alone = json.loads(capsys.readouterr().out)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        assert main([*args, "--dask", cluster.scheduler_address]) == 0
    clustered = json.loads(capsys.readouterr().out)
    assert (clustered["best"], clustered["frontier"]) == (alone["best"], alone["frontier"])
    assert clustered["evaluated"] == alone["evaluated"]


def test_the_sheet_and_the_store_record_the_chosen_plan(tmp_path, capsys):
    """`--out` writes the search's workbook (numbers, every configuration); `--store` records the chosen plan's
    TTFT/TPOT as the run's KPIs, with the sheet beside them."""
    import pandas as pd

    from mapper.store.trend import load_trends

    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    out = tmp_path / "search.xlsx"
    argv = ["search", "gpt2-small", "--devices", "2", "--tps", "1,2", "--pps", "1", "--prompt-tokens", "128"]
    argv += ["--output-tokens", "16", "--requests", "32", "--chunks", "512", "--kv-dtypes", "same", "--max-batch", "4"]
    argv += ["--tpot-p99-ms", "50", "--json", "--out", str(out), "--store", url, "--revision", "r1"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    sheets = pd.read_excel(out, sheet_name=None)
    assert len(sheets["Configurations"]) == doc["evaluated"]["configurations"]
    assert sheets["Configurations"]["tpot_p99_s"].max() > 0
    trend = next(t for t in load_trends(url) if t.command == "search")
    assert trend.points[0].kpis["tpot_p99_s"] == pytest.approx(doc["best"]["tpot_p99_s"])
    assert trend.points[0].has_sheet


def served_as(spec: SearchSpec, p, **options) -> LLMServingConfig:
    """The serving config a searched point's `mapper serve` command sets, built here from its cap and rate and the
    spec's workload (not by the search's own code), with `options` added."""
    return LLMServingConfig(
        p.max_batch,
        p.rate_per_s,
        requests_at(spec, p.max_batch),
        spec.seed,
        spec.prompt_tokens,
        spec.output_tokens,
        **options,
    )


def _only(result, deployment: str):
    return [p for p in result.points if str(p.plan.deployment) == deployment]


def test_disaggregated_pools_are_searched_and_match_mapper_serve():
    """Prefill:decode splits of the fleet (1:3, 2:2, 3:1 on four devices) are configurations; one re-served by
    `simulate_disaggregated` (what its `mapper serve --prefill-tp` command runs) gives the same figures."""
    hw = mapper.load_hardware("h100-sxm")
    spec = replace(SMALL, devices=4, tps=(1, 2), caps=(2, 8), requests=32, output_tokens=16, prompt_tokens=128)
    spec = replace(spec, rate_per_s=200.0)  # at a rate: every split served (no saturation bound, `bound_cut`)
    result = run_search("gpt2-small", hw, spec)
    pools = _only(result, "disaggregated")
    assert {p.plan.pools[0] * p.plan.prefill.tp for p in pools} == {1, 2, 3}  # prefill devices of the four
    assert all(p.plan.devices_per_replica == 4 and "--prefill-tp" in result.command(p) for p in pools)
    p = max(pools, key=lambda p: p.tokens_per_s_per_device)
    config = served_as(spec, p, jitter_cv=hw.jitter_cv, jitter_dist=hw.jitter_dist)  # the profile's, as serve fills it
    setup = mapper.Disaggregation(
        mapper.Pool(p.plan.prefill, p.plan.pools[0]), mapper.Pool(p.plan.options, p.plan.pools[1])
    )
    run = mapper.simulate_disaggregated("gpt2-small", hw, p.plan.options, config, setup)
    assert run.disaggregated.tpot_p99_s == pytest.approx(p.tpot_p99_s, rel=1e-9)
    assert run.disaggregated.throughput_tokens_per_s / 4 == pytest.approx(p.tokens_per_s_per_device, rel=1e-9)


def test_speculative_decoding_is_searched_where_a_draft_is_given():
    """With a draft, each plan is also served with it (prefill-first), as its `mapper serve --speculative-draft`
    command serves it; without one, no speculative configuration. (GPT-2 drafting for itself: the mechanism, not a
    pairing anyone deploys.)"""
    hw = mapper.load_hardware("h100-sxm")
    spec = replace(SMALL, devices=1, tps=(1,), caps=(4,), requests=32, output_tokens=16, disaggregated=False)
    spec = replace(spec, rate_per_s=20.0)  # at a rate: no bound from the plain plan's saturation (`bound_cut`)
    draft = mapper.SpeculativeConfig("gpt2-small", 0.7, 3)
    result = run_search("gpt2-small", hw, replace(spec, speculative=draft))
    (p,) = _only(result, "speculative")
    assert "--speculative-draft=gpt2-small" in result.command(p) and "prefill-first" in result.command(p)
    config = served_as(spec, p, speculative=draft)
    served = simulate_model_llm_serving("gpt2-small", hw, p.plan.options, config)
    assert served.tpot_p99_s == pytest.approx(p.tpot_p99_s, rel=1e-9)
    assert served.throughput_tokens_per_s == pytest.approx(p.tokens_per_s_per_device, rel=1e-9)
    assert not _only(run_search("gpt2-small", hw, spec), "speculative")


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_a_cnn_searches_batch_precision_and_replicas_under_a_p99_target():
    """ResNet-50 on two devices under a request p99: each precision's caps served on replicas of one device at
    the highest rate meeting the target; the chosen one re-served as its `mapper serve` command serves it gives
    the same p99, and a cap whose batch alone takes longer than the target is pruned, not chosen."""
    from mapper.explore.search_queue import QUEUE_REQUESTS
    from mapper.serve.engine import simulate_model_serving

    hw = mapper.load_hardware("h100-sxm")
    spec = SearchSpec(2, targets=Targets(p99_s=0.004), dtypes=("bf16", "fp8"), caps=(1, 2, 8, 256))
    result = run_search("resnet50", hw, spec)
    best = result.best
    assert result.queue and best is not None and best.latency_p99_s <= 0.004
    assert {str(p.plan.options.dtype) for p in result.points} == {"bf16", "fp8"}
    assert any(p.reason == "batch-latency" for p in result.pruned)  # 256 images at once take over 4 ms
    config = mapper.ServingConfig(max_batch=best.max_batch, rate_per_s=best.rate_per_s, requests=QUEUE_REQUESTS)
    served = simulate_model_serving("resnet50", None, hw, best.plan.options, config)
    assert served.p99_s == pytest.approx(best.latency_p99_s, rel=1e-9)
    assert "--max-batch" in result.command(best) and f"--requests {QUEUE_REQUESTS}" in result.command(best)
    sensitivity = result.document()["sensitivity"]  # its figures are requests, not tokens
    assert sensitivity and all("requests/s/device" in line and "tok/s" not in line for line in sensitivity)


def test_the_bound_prunes_only_configurations_that_cannot_be_chosen():
    """Without a rate, a pool setup whose saturation throughput is under the best aggregated configuration is
    pruned ('bound'); served anyway, it indeed serves fewer tokens/s per device than the choice."""
    from mapper.explore.search import SharedSteps
    from mapper.explore.search_pools import pool_plans

    hw = mapper.load_hardware("h100-sxm")
    spec = replace(SMALL, devices=4, tps=(1, 2), caps=(2, 8), requests=32, output_tokens=16, prompt_tokens=128)
    result = run_search("gpt2-small", hw, spec)
    cut = [p for p in result.pruned if p.reason == "bound"]
    assert cut and "under the aggregated choice" in cut[0].detail
    flat = list({p.plan.options: p.plan for p in result.points if str(p.plan.deployment) == "aggregated"}.values())
    pools = {f"{plan.text()} batch {cap}": (plan, cap) for plan in pool_plans(spec, hw, flat)[0] for cap in spec.caps}
    plan, cap = pools[cut[0].what]
    served = SharedSteps(mapper.open_model("gpt2-small"), hw).server(plan, spec).at_load(cap, 0)
    assert served.tokens_per_s_per_device < result.best.tokens_per_s_per_device


def test_one_mapped_prefill_bounds_every_caps_saturation_rate():
    """The bound that prunes a plan's caps before their decode steps are mapped: a request costs its prompt's
    prefill at least, so one prefill bounds the saturation rate of every cap and chunk (else a cut would drop a
    configuration the exact bound serves), and it is that prefill's rate."""
    from mapper.explore.search import SharedSteps
    from mapper.explore.search_space import Plan

    hw = mapper.load_hardware("h100-sxm")
    spec = replace(SMALL, caps=(1, 4, 16, 64), chunks=(64, 512))
    steps = SharedSteps(mapper.open_model("gpt2-small"), hw)
    for options in (mapper.PlanOptions(), mapper.PlanOptions(tp=2, kv_dtype="fp8")):
        server = steps.server(Plan(options, 1), spec)
        ceiling = server.capacity_ceiling_per_s()
        assert ceiling == 1.0 / steps.of(options).latency(1, spec.prompt_tokens, 0)
        rates = [server.capacity_per_s(cap, chunk) for cap in spec.caps for chunk in spec.chunks]
        assert all(0 < rate <= ceiling for rate in rates)


def test_a_plans_steps_keep_the_figures_mapper_map_gives():
    """A search keeps what it reads of each mapped step (latency, energy, memory plan), not the timeline: the
    figures of the step mapped on its own."""
    from mapper.explore.search import SharedSteps

    hw, options = mapper.load_hardware("h100-sxm"), mapper.PlanOptions(tp=2)
    model = mapper.open_model("gpt2-small")
    steps = SharedSteps(model, hw).of(options)
    kept = steps.figures(4, 1, 100)
    alone = mapper.map_workload(mapper.open_model("gpt2-small").bind({"batch": 4, "seq": 1, "past": 100}), hw, options)
    assert (kept.latency_s, kept.energy_j, kept.memory) == (alone.totals.latency_s, alone.totals.energy_j, alone.memory)
    assert steps.latency(4, 1, 100) == kept.latency_s and steps.mapped == 1
    # a step a KV budget alone reads is mapped to its memory plan (the stages before the cost): the same plan, one
    # step mapped however many of its figures are read after
    workload = mapper.open_model("gpt2-small").bind({"batch": 1, "seq": 64, "past": 0})
    assert steps.memory(1, 64, 0) == mapper.map_workload(workload, hw, options).memory and steps.mapped == 2
    assert steps.figures(1, 64, 0).memory == steps.memory(1, 64, 0) and steps.mapped == 2
