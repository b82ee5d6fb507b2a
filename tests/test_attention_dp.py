"""Attention data parallelism for mixture-of-experts serving (PlanOptions.attention_dp): one rank's step checked
by hand (its KV cache, its all-to-all, its experts at every rank's tokens), serving one rank at its share, the
search offering it for an MoE model only."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import mapper
from mapper.cli.main import main
from mapper.core.errors import MapperError
from mapper.explore.search import run_search
from mapper.explore.search_space import SearchSpec, plan_options
from mapper.serve.continuous import LLMServingConfig
from mapper.serve.llm import kv_budget, simulate_model_llm_serving
from mapper.serve.ranks import over_ranks, rank_config
from mapper.serve.trace import Trace
from mapper.zoo.mixtral import MIXTRAL_8X7B as C
from tests.test_search import SMALL, served_as

HW = mapper.load_hardware("h200-sxm")
RANKS = 8
DP = mapper.PlanOptions(dtype="bf16", ep=RANKS, attention_dp=True)
REPLICATED = mapper.PlanOptions(dtype="bf16", ep=RANKS)  # EP 8 at TP 1, attention replicated on every device


def _step(batch: int, options: mapper.PlanOptions):
    workload = mapper.load_workload("mixtral-8x7b", {"batch": batch, "seq": 1, "past": 1000})
    return mapper.map_workload(workload, HW, options)


def _kernels(result, experts: bool) -> list[tuple]:
    return [
        (k.name, k.flops, k.dram_bytes, k.weight_bytes, k.matrix)
        for k in result.kernels.kernels
        if (".experts." in k.name) == experts and not k.collective
    ]


def test_a_rank_runs_its_own_attention_and_the_experts_of_every_ranks_tokens():
    """Batch 4 a rank on 8 ranks: attention and the dense layers are batch 4's, each expert kernel is the one
    replicated-attention EP 8 runs at batch 32 (the MoE layer sees 8 x 4 tokens), and each MoE layer dispatches
    and combines the rank's own 4 tokens x top-2 x 4,096 hidden x 2 bytes = 65,536 bytes."""
    dp = _step(4, DP)
    assert _kernels(dp, experts=False) == _kernels(_step(4, REPLICATED), experts=False)
    assert _kernels(dp, experts=True) == _kernels(_step(32, REPLICATED), experts=True)
    moves = [k for k in dp.kernels.kernels if k.collective == "all-to-all"]
    assert len(moves) == 2 * C.layers
    assert {k.dram_bytes for k in moves} == {4 * 2 * C.hidden * 2} == {65_536}
    assert {k.devices for k in moves} == {RANKS}


def test_expert_tp_slices_every_expert_and_gathers_the_ranks_tokens():
    """Expert TP beside attention DP (TensorRT-LLM's moe_tp_size, AIConfigurator's decode pools): batch 4 a rank on
    8 ranks, each rank runs all 8 experts on the 32 tokens of every rank with 1/8 of each expert's width (w1 and w3
    keep 14,336 / 8 = 1,792 columns, w2 as many rows): the work and weights EP 8 gives a rank; each MoE layer gathers
    8 x 4 tokens x 4,096 x 2 bytes = 262,144 bytes to every rank and reduce-scatters as many back, no all-to-all."""
    sliced = _step(4, replace(DP, expert_tp=True))
    whole = _step(4, DP)
    assert _kernels(sliced, experts=False) == _kernels(whole, experts=False)
    for (name, flops, dram, weight, matrix), (_, flops_ep, dram_ep, weight_ep, _) in zip(
        _kernels(sliced, experts=True), _kernels(whole, experts=True), strict=True
    ):
        assert (flops, dram, weight) == pytest.approx((flops_ep, dram_ep, weight_ep))
        if matrix is not None:
            assert (matrix.n, matrix.k) == ((C.ffn // 8, C.hidden) if ".w2 " not in name else (C.hidden, C.ffn // 8))
    moves = [k for k in sliced.kernels.kernels if k.collective]
    assert sorted({str(k.collective) for k in moves}) == ["all-gather", "reduce-scatter"]
    assert len(moves) == 2 * C.layers and {k.dram_bytes for k in moves} == {8 * 4 * C.hidden * 2} == {262_144}
    assert _step(4, replace(DP, ep=3, expert_tp=True)).parallel.devices == 3  # slices need not divide E
    with pytest.raises(MapperError, match="must divide the expert count"):
        _step(4, replace(DP, ep=3))


def test_expert_tp_needs_attention_dp(capsys):
    with pytest.raises(MapperError, match="--attention-dp"):
        _step(1, mapper.PlanOptions(dtype="bf16", ep=2, expert_tp=True))
    assert main(["map", "mixtral-8x7b", "--ep", "2", "--expert-tp"]) == 2
    assert "--expert-tp slices every expert" in capsys.readouterr().err


def test_the_kv_cache_a_rank_holds_is_its_own_at_every_head():
    """Per rank: every K/V head of every layer, 32 x 2 x 8 heads x 128 x 2 bytes = 131,072 bytes a token, beside
    the dense weights whole and 1/8 of the experts' (the 2 x (1.61 G + 45.10 G / 8) bytes of bf16)."""
    budget = kv_budget("mixtral-8x7b", HW, DP, 512)
    assert budget.kv_bytes_per_token == C.layers * 2 * C.kv_heads * (C.hidden // C.heads) * 2 == 131_072
    experts = C.layers * 8 * 3 * C.hidden * C.ffn
    dense = 46_702_792_704 - experts  # HF Mixtral-8x7B-v0.1's parameters less its experts'
    assert budget.weight_bytes == pytest.approx(2 * (dense + experts / RANKS), rel=1e-4)
    free = budget.usable_bytes - budget.weight_bytes - budget.activation_bytes
    assert budget.tokens == int(free // 131_072) // budget.page_tokens * budget.page_tokens
    assert budget.tokens == kv_budget("mixtral-8x7b", HW, REPLICATED, 512).tokens  # the same room a device


def test_attention_dp_needs_experts_over_devices_of_their_own(capsys):
    with pytest.raises(MapperError, match="--tp 1 --ep N"):
        _step(1, mapper.PlanOptions(dtype="bf16", tp=2, ep=2, attention_dp=True))
    with pytest.raises(MapperError, match="--tp 1 --ep N"):
        _step(1, mapper.PlanOptions(dtype="bf16", attention_dp=True))
    with pytest.raises(MapperError, match="true or false"):
        mapper.PlanOptions(attention_dp="yes")  # type: ignore[arg-type]
    assert main(["map", "gpt2-small", "--attention-dp", "--ep", "2"]) == 2
    assert "routed experts" in capsys.readouterr().err


def test_one_rank_serves_its_share_and_the_replica_the_sum():
    """A trace is dealt round robin (every ranks-th request), a rate split evenly; the replica's throughput,
    offered rate and capacity are the ranks' sum, its latencies the rank's."""
    trace = Trace(np.arange(10.0), np.arange(10) + 100, np.arange(10) + 5)
    config = rank_config(LLMServingConfig(rate_per_s=8.0, trace=trace), 4)
    assert config.rate_per_s == 2.0 and config.trace is not None
    assert config.trace.arrival_s.tolist() == [0.0, 4.0, 8.0] and config.trace.output_tokens.tolist() == [5, 9, 13]
    config = LLMServingConfig(4, 20.0, 32, 0, 128, 8, scheduler="chunked")
    one = simulate_model_llm_serving("gpt2-small", HW, mapper.PlanOptions(), rank_config(config, 4))
    whole = over_ranks(one, 4)
    assert whole.throughput_tokens_per_s == 4 * one.throughput_tokens_per_s
    assert whole.capacity_per_s == 4 * one.capacity_per_s and whole.tpot_p99_s == one.tpot_p99_s
    assert "attention data parallelism: 4 ranks" in whole.assumptions[-1]


def test_the_search_offers_attention_dp_only_where_the_model_has_experts():
    spec = SearchSpec(8, kv_dtypes=("same",))
    dense = plan_options(spec, ())
    assert dense and not any(o.attention_dp or o.ep > 1 for o in dense)
    moe = plan_options(spec, (8,))
    dp = [o for o in moe if o.attention_dp]
    assert {(o.tp, o.ep, o.expert_tp) for o in dp} == {(1, e, s) for e in (2, 4, 8) for s in (False, True)}
    assert not [o for o in moe if not o.attention_dp and o.tp == 1 and o.ep > 1]  # EP beside replicated attention


@pytest.mark.slow
def test_a_searched_attention_dp_plan_is_what_its_serve_command_serves(capsys):
    """Mixtral on two H200s: the attention-DP plan is a configuration of its own, labelled and in the JSON, and
    served again as its `mapper serve --attention-dp` command serves it (one rank at half the replica's rate,
    the throughput of both) it gives the same figures."""
    spec = replace(SMALL, output_tokens=16, requests=32, caps=(4,), tps=(1,), dtypes=("bf16",), disaggregated=False)
    result = run_search("mixtral-8x7b", HW, spec)
    (p,) = [p for p in result.points if p.plan.options.attention_dp and not p.plan.options.expert_tp]
    assert "EP 2 attention DP" in p.label and p.row()["attention_dp"] is True
    assert "--attention-dp" in result.command(p) and p.plan.devices_per_replica == 2
    served = simulate_model_llm_serving(
        "mixtral-8x7b", HW, p.plan.options, served_as(spec, p, scheduler="chunked", chunk_tokens=512)
    )
    assert served.tpot_p99_s == pytest.approx(p.tpot_p99_s, rel=1e-9)
    assert served.throughput_tokens_per_s / 2 == pytest.approx(p.tokens_per_s_per_device, rel=1e-9)
    (sliced,) = [q for q in result.points if q.plan.options == replace(p.plan.options, expert_tp=True)]
    assert "EP 2 attention DP expert TP" in sliced.label and "--expert-tp" in result.command(sliced)
    assert p.kv_capacity_tokens == sliced.kv_capacity_tokens  # the same weights a rank: E/2 whole or 1/2 of each


def test_an_attention_dp_pool_deals_requests_to_its_ranks():
    assert mapper.Pool(DP, 2).servers == 2 * RANKS and mapper.Pool(REPLICATED, 2).servers == 2
    assert mapper.Pool(DP, 2).devices == 2 * RANKS and "attention DP" in mapper.Pool(DP).text()


@pytest.mark.slow
def test_a_searched_attention_dp_decode_pool_is_what_its_serve_command_serves():
    """Mixtral on three H200s at a rate: prompts prefill on one TP 1 device and decode on an attention-DP pool of
    two ranks (AIConfigurator's wide-EP decode), a configuration of its own; served again as its `mapper serve
    --attention-dp --prefill-tp 1` command serves it (the prefill pool without EP) it gives the same figures."""
    spec = replace(SMALL, devices=3, output_tokens=16, requests=32, caps=(4,), tps=(1,), dtypes=("bf16",))
    result = run_search("mixtral-8x7b", HW, replace(spec, rate_per_s=20.0))
    (p,) = [
        p
        for p in result.points
        if p.plan.prefill is not None and p.plan.options.attention_dp and not p.plan.options.expert_tp
    ]
    assert "prefill TP 1 x1 + decode TP 1 x EP 2 attention DP x1" in p.label
    command = result.command(p)
    assert "--attention-dp" in command and "--prefill-tp 1" in command and p.plan.devices_per_replica == 3
    prefill = replace(p.plan.options, ep=1, attention_dp=False)  # the pool the command's --prefill-tp 1 builds
    assert prefill == p.plan.prefill
    setup = mapper.Disaggregation(mapper.Pool(prefill, 1), mapper.Pool(p.plan.options, 1))
    config = served_as(replace(spec, rate_per_s=20.0), p, jitter_cv=HW.jitter_cv, jitter_dist=HW.jitter_dist)
    run = mapper.simulate_disaggregated("mixtral-8x7b", HW, p.plan.options, config, setup)
    assert run.disaggregated.tpot_p99_s == pytest.approx(p.tpot_p99_s, rel=1e-9)
    assert run.disaggregated.throughput_tokens_per_s / 3 == pytest.approx(p.tokens_per_s_per_device, rel=1e-9)
