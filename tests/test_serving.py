"""The serving simulator against queueing theory, a per-request reference, and its own properties."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

import mapper
from mapper.cli.main import main
from mapper.core.errors import MapperError
from mapper.serve.continuous import LLMServingConfig, simulate_llm_serving
from mapper.serve.load_curve import load_curve, serving_section
from mapper.serve.serving import ServingConfig, simulate_serving
from mapper.serve.trace import load_trace

D = 1e-3  # a fixed batch-1 service time: the queue itself, checked against closed forms


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho):
    """M/D/1: mean wait rho*D / (2(1-rho)) (PRIMER s8)."""
    r = simulate_serving(D, ServingConfig(max_batch=1, rate_per_s=rho / D, requests=400_000, seed=1))
    expected = rho * D / (2 * (1 - rho))
    assert r.mean_wait_s == pytest.approx(expected, rel=0.02)
    assert r.utilization == pytest.approx(rho, rel=0.01)
    assert r.mean_queue_length == pytest.approx(rho / D * expected, rel=0.03)  # Little's law


def test_mm1_p99_sojourn():
    """M/M/1: the sojourn time is exponential with rate mu - lambda, so p99 = ln(100)/(mu - lambda)."""
    mu, lam = 1 / D, 0.5 / D
    r = simulate_serving(
        D,
        ServingConfig(max_batch=1, rate_per_s=lam, requests=400_000, seed=2, jitter_cv=1.0, jitter_dist="exponential"),
    )
    assert r.p99_s == pytest.approx(math.log(100) / (mu - lam), rel=0.03)
    assert r.mean_s == pytest.approx(1 / (mu - lam), rel=0.03)


def reference_dynamic(arrival, service, max_batch, max_wait_s):
    """A plain per-request simulation of the same dynamic-batching rule (the vectorized one's oracle)."""
    end = np.empty(len(arrival))
    free, i, n = -math.inf, 0, len(arrival)
    while i < n:
        leave = arrival[i] + max_wait_s
        if i + max_batch - 1 < n:
            leave = min(leave, arrival[i + max_batch - 1])
        leave = max(leave, free)
        j = i
        while j < n and j - i < max_batch and arrival[j] <= leave:
            j += 1
        free = leave + service(j - i)
        end[i:j] = free
        i = j
    return end - arrival


@pytest.mark.parametrize(
    "rate,max_batch,max_wait_s", [(300, 8, 2e-3), (2000, 8, 1e-3), (5000, 16, 5e-3), (900, 4, 0.0)]
)
def test_dynamic_batching_matches_a_per_request_reference(rate, max_batch, max_wait_s):
    service = lambda b: 1e-3 + 2e-4 * b
    config = ServingConfig(max_batch=max_batch, max_wait_s=max_wait_s, rate_per_s=rate, requests=5_000, seed=3)
    r = simulate_serving(service, config)
    arrival = np.cumsum(np.random.default_rng(np.random.SeedSequence(3).spawn(2)[0]).standard_exponential(5_000)) / rate
    sojourn = reference_dynamic(arrival, service, max_batch, max_wait_s)
    assert r.mean_s == pytest.approx(sojourn.mean(), rel=1e-9)
    assert r.p99_s == pytest.approx(np.percentile(sojourn, 99), rel=1e-9)


def test_dynamic_batching_trades_latency_for_throughput():
    service = lambda b: 1e-3 + 1e-4 * b
    one = ServingConfig(max_batch=1, requests=50_000, seed=4)
    dyn = ServingConfig(max_batch=16, max_wait_s=2e-3, requests=50_000, seed=4)
    high, low = 3_000.0, 50.0
    assert (
        simulate_serving(service, replace(dyn, rate_per_s=high)).throughput_per_s
        > 1.5 * simulate_serving(service, replace(one, rate_per_s=high)).throughput_per_s
    )
    assert simulate_serving(service, replace(dyn, rate_per_s=high)).p99_s < 0.05
    assert (
        simulate_serving(service, replace(dyn, rate_per_s=low)).p50_s
        > simulate_serving(service, replace(one, rate_per_s=low)).p50_s + 0.5e-3
    )  # it waits for company


@pytest.mark.parametrize(
    "config",
    [
        ServingConfig(max_batch=1, jitter_cv=0.1, jitter_dist="lognormal"),
        ServingConfig(max_batch=4, jitter_cv=0.3, jitter_dist="exponential"),
        ServingConfig(max_batch=8, max_wait_s=1e-3, jitter_cv=0.05),
    ],
)
def test_percentiles_ordered_and_rising_with_load(config):
    service = lambda b: 1e-3 + 1e-4 * b
    curve = load_curve(service, replace(config, requests=20_000, seed=5), loads=(0.2, 0.5, 0.8, 0.95))
    for p in curve.points:
        assert p.p50_s <= p.p95_s <= p.p99_s
    for key in ("p50_s", "p95_s", "p99_s", "mean_s"):
        values = [getattr(p, key) for p in curve.points]
        assert values == sorted(values), key
    assert curve.points[-1].p99_s > 2 * curve.points[0].p99_s


def test_static_batching_waits_to_fill_at_low_load():
    """Static batches leave only when full: at light load the wait to fill dominates (latency falls as load rises)."""
    config = ServingConfig(policy="static", max_batch=8, requests=20_000, seed=5)
    light, busy = (simulate_serving(D, replace(config, rate_per_s=rate)) for rate in (100, 4_000))
    assert light.mean_wait_s == pytest.approx(3.5 / 100, rel=0.05)  # (8 - 1) / 2 interarrival times to fill
    assert busy.p50_s < 0.01 < light.p50_s
    assert light.mean_batch == pytest.approx(8, rel=1e-3)


def test_load_curve_knee_and_target():
    curve = load_curve(D, ServingConfig(max_batch=1, requests=50_000, seed=6), p99_target_s=5e-3)
    assert curve.saturation_rate_per_s == pytest.approx(1 / D)
    assert curve.knee_index is not None and 0 < curve.knee_index < len(curve.points)
    best = curve.max_rate_meeting_target_per_s
    assert best is not None and 300 < best < 900
    assert simulate_serving(D, ServingConfig(max_batch=1, rate_per_s=best, requests=50_000, seed=6)).p99_s <= 5e-3


def test_seeded_and_reproducible():
    config = ServingConfig(max_batch=8, max_wait_s=1e-3, rate_per_s=2_000, requests=10_000, seed=7, jitter_cv=0.1)
    a, b = simulate_serving(D, config), simulate_serving(D, config)
    assert a == b
    assert simulate_serving(D, replace(config, seed=8)).p99_s != a.p99_s


def test_engine_service_time_called_once_per_batch_size():
    calls = []

    def service(b):
        calls.append(b)
        return 1e-3 + 1e-4 * b

    simulate_serving(service, ServingConfig(max_batch=16, max_wait_s=2e-3, rate_per_s=3_000, requests=20_000))
    assert len(calls) == len(set(calls)) and set(calls) <= set(range(1, 17))


@pytest.mark.parametrize(
    "config,message",
    [
        (ServingConfig(rate_per_s=0), "arrival rate"),
        (ServingConfig(requests=0), "requests"),
        (ServingConfig(requests=10**8 + 1), "requests"),
        (ServingConfig(max_batch=0), "max batch"),
        (ServingConfig(jitter_cv=-0.1), "coefficient"),
        (ServingConfig(jitter_cv=0.1, jitter_dist="gamma"), "gamma"),
        (ServingConfig(policy="greedy"), "greedy"),
        (ServingConfig(max_wait_s=-1), "max wait"),
    ],
)
def test_bad_config_is_a_mapper_error(config, message):
    with pytest.raises(MapperError, match=message):
        simulate_serving(D, config)


def test_trace_file(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n0.0005,20,5\n0.002,30,6\n")
    trace = load_trace(path)
    r = simulate_serving(D, ServingConfig(max_batch=1, trace=trace))
    assert r.requests == 3 and r.mean_wait_s == pytest.approx(0.5e-3 / 3)
    assert list(trace.prompt_tokens) == [10, 20, 30]


@pytest.mark.parametrize(
    "text,message",
    [
        ("arrival_s\n0.1\n0.05\n", "row 2 .*arrival_s"),
        ("arrival_s\n0.1\nnan\n", "row 2 .*arrival_s"),
        ("arrival_s\n-1\n", "row 1"),
        ("arrival_s\n0.1\nabc\n", "'abc'"),
        ("time\n0.1\n", "columns"),
        ("arrival_s,output_tokens\n0.1,2.5\n", "output_tokens"),
        ("arrival_s\n", "no rows"),
    ],
)
def test_bad_trace_names_row_and_column(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(MapperError, match=message):
        load_trace(path)


def test_serving_section_is_json_ready():
    config = ServingConfig(max_batch=4, max_wait_s=1e-3, rate_per_s=500, requests=2_000)
    section = serving_section(simulate_serving(D, config), config, load_curve(D, config, loads=(0.2, 0.6)))
    text = json.dumps(section, allow_nan=False)
    assert {"p50_s", "p99_s", "p999_s", "assumptions", "load_curve"} <= set(json.loads(text))


def test_cli_serve_json(capsys):
    assert (
        main(
            [
                "serve",
                "bert-base",
                "--hw",
                "h100-sxm",
                "--batch-policy",
                "dynamic",
                "--max-batch",
                "8",
                "--max-wait-ms",
                "2",
                "--rate",
                "500",
                "--requests",
                "2000",
                "--seed",
                "1",
                "--jitter-cv",
                "0.05",
                "--jitter-dist",
                "lognormal",
                "--service-time-s",
                "0.002",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    for key in (
        "p50_s",
        "p90_s",
        "p95_s",
        "p99_s",
        "p999_s",
        "mean_s",
        "mean_wait_s",
        "throughput_per_s",
        "utilization",
        "assumptions",
    ):
        assert key in doc
    assert doc["p50_s"] <= doc["p99_s"] and any("fixed 0.002 s" in a for a in doc["assumptions"])
    assert main(["serve", "bert-base", "--rate", "-5"]) == 2


def test_engine_batch_time_drives_the_queue():
    hw = mapper.load_hardware("h100-sxm")
    options = mapper.PlanOptions(dtype="bf16")
    batch8 = mapper.map_workload(mapper.load_workload("bert-base", {"batch": 8, "seq": 128}), hw, options)
    config = ServingConfig(policy="static", max_batch=8, rate_per_s=100, requests=800, jitter_cv=0.0)
    r = mapper.simulate_model_serving("bert-base", {"seq": 128}, hw, options, config)
    assert r.p50_s >= batch8.totals.latency_s and r.mean_batch == 8


# ---- decoder LLMs: prefill, decode, continuous batching, KV capacity -------------------------------

PREFILL = lambda b, t: 2e-3 + 1e-5 * b * t
DECODE = lambda b, c: 5e-3 + 1e-4 * b + 1e-8 * b * c


def test_llm_single_request_ttft_and_tpot():
    config = LLMServingConfig(
        max_batch=4, rate_per_s=0.01, requests=3, prompt_tokens=100, output_tokens=11, kv_capacity_tokens=10_000
    )
    r = simulate_llm_serving(PREFILL, DECODE, config)
    assert r.ttft_p50_s == pytest.approx(PREFILL(1, 100))
    assert r.tpot_p50_s == pytest.approx(np.mean([DECODE(1, 101 + k) for k in range(10)]))


def test_llm_kv_capacity_limits_concurrency_and_raises_ttft():
    base = LLMServingConfig(max_batch=32, rate_per_s=40, requests=400, prompt_tokens=200, output_tokens=50, seed=9)
    roomy = simulate_llm_serving(PREFILL, DECODE, replace(base, kv_capacity_tokens=100_000))
    tight = simulate_llm_serving(PREFILL, DECODE, replace(base, kv_capacity_tokens=750))  # three at a time
    assert tight.mean_running <= 3 + 1e-9 < roomy.mean_running
    assert tight.ttft_p99_s > roomy.ttft_p99_s
    assert roomy.ttft_p50_s <= roomy.ttft_p90_s <= roomy.ttft_p99_s
    with pytest.raises(MapperError, match="KV"):
        simulate_llm_serving(PREFILL, DECODE, replace(base, kv_capacity_tokens=100))


def test_llm_cli_with_built_in_decoder(capsys):
    assert (
        main(
            [
                "serve",
                "gpt2-small",
                "--max-batch",
                "4",
                "--rate",
                "5",
                "--requests",
                "20",
                "--prompt-tokens",
                "64",
                "--output-tokens",
                "8",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["ttft_p50_s"] > 0 and doc["tpot_p50_s"] > 0 and doc["kv_capacity_tokens"] > 10_000


@pytest.mark.parametrize(
    "stem",
    ["optimum_gpt2_tiny_with_past", "optimum_llama_tiny_with_past", "optimum_gpt2_tiny_merged", "hf_llama_tiny_decode"],
)
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_llm_serving_of_exported_decoders(stem):
    """Exported decoders name their dims their own way (past_sequence_length, past_seq with a separate
    total_seq, a merged decoder's use_cache_branch): each step binds them, the decode step slows as the
    cache grows, and the KV capacity comes from the past inputs."""
    from mapper.serve.llm import decoder_dims, engine_step_times, kv_capacity_tokens
    from tests.conftest import MODELS_DIR

    source = str(MODELS_DIR / f"{stem}.onnx")
    hw, options = mapper.load_hardware("h100-sxm"), mapper.PlanOptions()
    dims = decoder_dims(source)(1, 100)
    assert 100 in dims.values() and all(v in (1, 100, 101) for v in dims.values())
    prefill, decode = engine_step_times(source, hw, options, 4, 64, 2048)
    assert decode(1, 2048) > decode(1, 16) > 0 and prefill(4, 64) > prefill(1, 64) > 0
    assert kv_capacity_tokens(source, hw, options, 64) > 1_000_000  # a tiny model's cache fills 80 GB slowly


def test_serve_cli_serves_an_exported_decoder_as_an_llm(capsys):
    """A file with a KV-cache input gets prefill/decode serving without --llm, as a built-in decoder does."""
    from tests.conftest import MODELS_DIR

    assert (
        main(
            [
                "serve",
                str(MODELS_DIR / "optimum_llama_tiny_with_past.onnx"),
                "--max-batch",
                "4",
                "--rate",
                "5",
                "--requests",
                "20",
                "--prompt-tokens",
                "32",
                "--output-tokens",
                "8",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"] == "continuous" and doc["tpot_p50_s"] > 0


def test_engine_batch_time_varies_a_batch_dim_named_batch_size():
    """`mapper serve FILE --dim batch_size=1` must not pin every batch the simulation forms to batch 1."""
    from mapper.serve.engine import engine_batch_time
    from tests.conftest import MODELS_DIR

    time_of = engine_batch_time(
        str(MODELS_DIR / "optimum_gpt2_tiny_with_past.onnx"),
        {"batch_size": 1, "sequence_length": 64, "past_sequence_length": 0},
        mapper.load_hardware("h100-sxm"),
        mapper.PlanOptions(),
    )
    assert time_of(64) > time_of(1)


def test_serve_cli_seq_binds_a_file_whose_sequence_dim_has_its_own_name(tmp_path, capsys):
    """`mapper serve FILE --seq N` passed N as a dim named seq, so an export whose dims are batch_size and
    sequence_length (Optimum's) failed where `mapper map --seq` worked; both now bind the model's own name."""
    import onnx

    from tests.conftest import MODELS_DIR

    m = onnx.load(MODELS_DIR / "hf_bert_tiny.onnx", load_external_data=False)
    for vi in [*m.graph.input, *m.graph.output, *m.graph.value_info]:
        for d in vi.type.tensor_type.shape.dim:
            d.dim_param = {"batch": "batch_size", "seq": "sequence_length"}.get(d.dim_param, d.dim_param)
    path = tmp_path / "bert_named.onnx"
    onnx.save(m, path)
    assert (
        main(["serve", str(path), "--seq", "16", "--max-batch", "4", "--rate", "100", "--requests", "50", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["p99_s"] > 0


def test_an_llm_queue_offered_more_than_its_capacity_is_flagged_not_given_a_percentile():
    """Llama-2-7B served one sequence at a time: a request costs its prefill plus 128 decode steps, so the engine
    sustains ~0.5 req/s; at 2 req/s TTFT grows with the run (p99 of days), and the result says overloaded."""
    from mapper.serve.llm import ServeRequest, serve_model
    from mapper.serve.serving import ServingConfig

    def served(rate: float):
        config = ServingConfig(max_batch=1, rate_per_s=rate, requests=300)
        request = ServeRequest(config, prompt_tokens=512, output_tokens=128)
        return serve_model(
            "llama2-7b", mapper.load_hardware("h100-sxm"), mapper.PlanOptions(dtype="bf16"), request
        ).result

    over, under = served(2.0), served(0.1)
    assert 0.1 < over.capacity_per_s < 2.0
    assert over.overload.startswith("offered 2 req/s > capacity") and over.ttft_p99_s > 60
    assert under.overload == "" and under.capacity_per_s == over.capacity_per_s
    doc_verdict = mapper.first_failure({"serving": serve_section(over), "memory": {"fits": True}, "kernels": []})
    assert doc_verdict.check == "latency target" and "overloaded" in doc_verdict.sentence


def serve_section(result) -> dict:
    return {"requests": result.requests, "offered_rate_per_s": result.offered_rate_per_s,
            "capacity_per_s": result.capacity_per_s, "p99_s": result.latency_p99_s}  # fmt: skip


# ---- serving over devices: the KV cache each device holds under TP (issue 34, item 1) ---------------

# Llama-2-70B (meta-llama/Llama-2-70b-hf config.json): 80 layers of hidden 8192, 64 query and 8 KV heads of 128,
# an MLP of 28672, a vocabulary of 32000, untied embeddings
L70_LAYER_LINEAR = 8192 * (8192 + 1024 + 1024 + 8192) + 3 * 8192 * 28672  # q, k, v, o; gate, up, down
L70_LM_HEAD = L70_EMBED = 32000 * 8192
L70_NORMS = 8192 * (2 * 80 + 1)


@pytest.mark.slow
def test_70b_serves_at_tp8_on_h100_with_the_kv_capacity_written_out():
    """The KV cache of one TP 8 replica from three stated inputs: 0.9 of each H100's 80 GB (vLLM's
    gpu_memory_utilization default), the weights one device holds (Megatron: every linear layer split 8 ways,
    the embedding and norms whole on each) and the activation reserve of a 512-token profile run; over the
    40,960 B a token's K and V take on one device (80 layers x 2 x 8 heads x 128 x 2 B / 8), in whole pages of
    vLLM's 16-token blocks."""
    from mapper.serve.llm import KV_MEMORY_FRACTION, kv_budget, simulate_model_llm_serving

    h100, options = mapper.load_hardware("h100-sxm"), mapper.PlanOptions(dtype="bf16", tp=8)
    budget = kv_budget("llama2-70b", h100, options, 512)
    weights = 2 * ((80 * L70_LAYER_LINEAR + L70_LM_HEAD) / 8 + L70_EMBED + L70_NORMS)  # bf16, per device
    assert budget.weight_bytes == pytest.approx(weights, rel=1e-4)  # 17.71 GB (the rotary tables: the rest)
    assert KV_MEMORY_FRACTION == 0.9 and budget.usable_bytes == 0.9 * 80e9
    assert budget.kv_bytes_per_token == 80 * 2 * 8 * 128 * 2 / 8
    assert 0 < budget.activation_bytes < 0.1e9
    by_hand = int((0.9 * 80e9 - budget.weight_bytes - budget.activation_bytes) // 40_960) // 16 * 16
    assert budget.page_tokens == 16 and budget.tokens == by_hand and 1_300_000 < by_hand < 1_350_000
    config = LLMServingConfig(max_batch=8, rate_per_s=1.0, requests=20, prompt_tokens=512, output_tokens=16)
    served = simulate_model_llm_serving("llama2-70b", h100, options, config)
    assert served.kv_capacity_tokens == by_hand and served.tpot_p50_s > 0
    assert any("KV cache per device: 0.9 x memory 80.0 GB" in a for a in served.assumptions)


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_kv_capacity_grows_with_tp_and_pp():
    """More devices hold the weights and the cache between them: the capacity of one replica grows with TP."""
    from mapper.serve.llm import kv_capacity_tokens

    h100 = mapper.load_hardware("h100-sxm")
    tokens = [kv_capacity_tokens("llama2-7b", h100, mapper.PlanOptions(dtype="bf16", tp=tp), 512) for tp in (1, 2, 4)]
    assert tokens[0] < tokens[1] < tokens[2]
    assert kv_capacity_tokens("llama2-7b", h100, mapper.PlanOptions(dtype="bf16", pp=2), 512) > tokens[0]
    with pytest.raises(MapperError, match="leave no room for a KV cache.*raise --tp or --pp"):
        kv_capacity_tokens("llama2-70b", h100, mapper.PlanOptions(dtype="bf16"), 512)


# ---- KV-cache precision (issue 34, item 2) -------------------------------------------------------------

# Llama-2-7B: 32 layers of 32 KV heads of 128; a decode step at batch 32 over 2,048 cached tokens writes 2,049
L7_KV_ELEMENTS_PER_TOKEN = 32 * 2 * 32 * 128  # layers x (K, V) x heads x head dim


@pytest.mark.parametrize(("kv_dtype", "per_element"), [("same", 2), ("fp8", 1), ("int8", 1), ("int4", 0.5)])
def test_kv_dtype_sizes_the_cache_and_what_a_decode_step_reads(kv_dtype, per_element):
    """fp16 compute on A100, the cache stored at --kv-dtype: its bytes, and the step's DRAM bytes less the
    attention's read of it, by hand; a narrower cache says what it needs (quality evidence, a fallback)."""
    a100, dims = mapper.load_hardware("a100-sxm-80gb"), {"batch": 32, "seq": 1, "past": 2048}
    workload = mapper.load_workload("llama2-7b", dims)
    same = mapper.map_workload(workload, a100, mapper.PlanOptions(dtype="fp16"))
    result = mapper.map_workload(workload, a100, mapper.PlanOptions(dtype="fp16", kv_dtype=kv_dtype))
    cache = L7_KV_ELEMENTS_PER_TOKEN * 2049 * 32  # the present cache after the step
    written = L7_KV_ELEMENTS_PER_TOKEN * 32  # the update writes each sequence's new token into it
    assert result.memory.kv_cache_bytes == cache * per_element
    saved = (cache + written) * (2 - per_element)  # the attention's read of the cache and the update's write
    assert same.totals.dram_bytes - result.totals.dram_bytes == pytest.approx(saved, rel=1e-9)
    assert any("KV cache stored in" in c and "fallback" in c for c in result.caveats) == (kv_dtype != "same")


def test_kv_dtype_doubles_the_cache_a_device_holds():
    from mapper.serve.llm import kv_budget

    h100 = mapper.load_hardware("h100-sxm")
    same = kv_budget("llama2-7b", h100, mapper.PlanOptions(dtype="bf16"), 512)
    fp8 = kv_budget("llama2-7b", h100, mapper.PlanOptions(dtype="bf16", kv_dtype="fp8"), 512)
    assert (
        same.kv_bytes_per_token == L7_KV_ELEMENTS_PER_TOKEN * 2 and fp8.kv_bytes_per_token == L7_KV_ELEMENTS_PER_TOKEN
    )
    room = int((0.9 * 80e9 - fp8.weight_bytes - fp8.activation_bytes) // L7_KV_ELEMENTS_PER_TOKEN)
    assert fp8.tokens == room // 16 * 16  # in whole 16-token pages
    assert fp8.tokens > 1.99 * same.tokens


def test_the_review_offers_an_fp8_kv_cache_where_the_cache_dominates_a_step():
    """Llama-2-7B fp16 decode on A100 at batch 32 over 2,048 tokens: the cache is 34 of the 48 GB a step reads;
    the review chooses the fp8 cache (1.37x; 1.38x before A100's matrix DRAM curve slowed the weight streams it
    does not shrink, 1.40x before the paged decode latency) over int4 weights, owned by the runtime, with its
    evidence."""
    model, a100 = mapper.open_model("llama2-7b"), mapper.load_hardware("a100-sxm-80gb")
    answer = mapper.assess_slice(model, {"batch": 32, "seq": 1, "past": 2048}, a100, mapper.PlanOptions(dtype="fp16"))
    chosen = answer.document()["assessment"]["chosen"]
    assert chosen["changes"] == "kv_dtype=fp8" and chosen["owner"] == "runtime systems engineer"
    assert chosen["gain_text"] == "1.37x faster: TPOT -27%" and "fallback" in chosen["evidence"]


def test_a_kept_jitter_draw_is_the_draw_and_leaves_the_generator_where_the_draw_did():
    from mapper.serve.serving import draw_jitter, kept_jitter_draw

    def fresh(seed: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])

    for seed, cv, dist in ((0, 0.05, "lognormal"), (0, 0.3, "exponential"), (7, 0.05, "lognormal")):
        plain, first, again = fresh(seed), fresh(seed), fresh(seed)
        expected = draw_jitter(5000, cv, dist, plain)
        kept, kept_again = kept_jitter_draw(5000, cv, dist, first), kept_jitter_draw(5000, cv, dist, again)
        assert np.array_equal(kept, expected) and np.array_equal(kept_again, expected)
        assert not kept_again.flags.writeable  # shared between runs: read-only
        more = draw_jitter(100, cv, dist, plain)  # what a run draws after it: the same from a kept draw's state
        assert np.array_equal(draw_jitter(100, cv, dist, again), more)
    # another seed, size or spread is another draw, never a kept one
    assert not np.array_equal(
        kept_jitter_draw(5000, 0.05, "lognormal", fresh(1)), draw_jitter(5000, 0.05, "lognormal", fresh(0))
    )
    assert len(kept_jitter_draw(4000, 0.05, "lognormal", fresh(0))) == 4000
