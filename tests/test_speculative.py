"""Speculative decoding (mapper/serve/speculative.py): the expected-tokens formula, the round mapped from the two
models' steps, its batch effect, the serving it feeds, the Review's lever, and bad inputs refused in one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import mapper
from mapper.cli.main import main
from mapper.serve.llm import KV_MEMORY_FRACTION, kv_budget, simulate_model_llm_serving
from mapper.serve.speculative import acceptance_to_break_even, expected_tokens, validate_speculative
from mapper.serve.steps import mapped_round, speculative_step_times

H100 = mapper.load_hardware("h100-sxm")
TP4 = mapper.PlanOptions(tp=4)
K = 4


@pytest.fixture(scope="module")
def target():
    return mapper.open_model("llama2-70b")


@pytest.fixture(scope="module")
def spec():
    return mapper.SpeculativeConfig(mapper.open_model("llama2-7b"), 0.8, K)


def step(model, batch: int, seq: int, past: int) -> float:
    return mapper.map_workload(model.bind({"past": past}, batch=batch, seq=seq), H100, TP4).totals.latency_s


def test_expected_tokens_by_hand():
    assert expected_tokens(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096) == pytest.approx(3.3616)
    assert expected_tokens(0.0, 4) == 1.0  # every draft rejected: the target's own token
    assert expected_tokens(0.999999, 4) == pytest.approx(5.0, rel=1e-5)  # every draft accepted: k + 1
    assert mapper.SpeculativeConfig("llama2-7b", 0.8, 4).tokens_per_round == pytest.approx(3.3616)


def test_the_round_is_the_two_models_mapped_steps(target, spec):
    """Verification = the target mapped at seq k + 1 over the context; the draft = k decode steps over a context
    one token longer each; TPOT = round / (1 - a^(k+1)) / (1 - a), all by hand."""
    batch, context = 2, 1024
    rnd = mapped_round(target, spec, H100, TP4, batch, context)
    verify = step(target, batch, K + 1, context)
    draft = sum(step(spec.draft, batch, 1, context + i) for i in range(K))
    assert rnd.verify_s == verify and rnd.draft_s == pytest.approx(draft, rel=1e-12)
    assert rnd.tpot_s == pytest.approx((draft + verify) / 3.3616, rel=1e-12)
    assert verify > step(target, batch, 1, context)  # k + 1 tokens cost more than one, but far less than k + 1 steps
    assert verify < 2 * step(target, batch, 1, context)


def test_speculation_pays_at_batch_1_and_the_gain_shrinks_with_batch(target, spec):
    """A memory-bound decode reads the weights once for k + 1 verified tokens; at a large batch the (k + 1) x b
    rows make the verification compute-bound and the round no longer pays."""
    speedups, needed = [], []
    for batch in (1, 16, 64, 256):
        rnd, plain = mapped_round(target, spec, H100, TP4, batch, 1024), step(target, batch, 1, 1024)
        speedups.append(plain / rnd.tpot_s)
        needed.append(acceptance_to_break_even(rnd.round_s, plain, K))
    assert speedups[0] > 1.5 and speedups == sorted(speedups, reverse=True) and speedups[-1] < 1
    assert needed[0] < needed[1] < needed[2] < 0.85 < (needed[3] or 1.0)  # the acceptance it takes to break even


def test_break_even_solves_the_formula():
    a = acceptance_to_break_even(3.0, 1.0, 4)
    assert a is not None and expected_tokens(a, 4) == pytest.approx(3.0)
    assert acceptance_to_break_even(0.9, 1.0, 4) == 0.0 and acceptance_to_break_even(5.0, 1.0, 4) is None


@pytest.mark.slow  # two serving runs: several seconds
def test_serving_runs_the_round_per_token_and_holds_the_draft_in_memory(target, spec):
    config = mapper.LLMServingConfig(
        max_batch=1, rate_per_s=0.05, requests=40, prompt_tokens=512, output_tokens=128, jitter_cv=0.0
    )
    plain = simulate_model_llm_serving(target, H100, TP4, config)
    fast = simulate_model_llm_serving(target, H100, TP4, replace(config, speculative=spec))
    steps = speculative_step_times(target, spec, H100, TP4, 1, 512, 640)
    lo, hi = steps.decode(1, 512), steps.decode(1, 640)  # a round per token over the request's contexts
    assert lo <= fast.tpot_p50_s <= hi and fast.tpot_p50_s < 0.7 * plain.tpot_p50_s
    assert fast.ttft_p50_s > plain.ttft_p50_s  # a prompt prefills the draft too
    assert steps.prefill(1, 512) == pytest.approx(step(target, 1, 512, 0) + step(spec.draft, 1, 512, 0))
    assert any("(1 - 0.8^5) / (1 - 0.8) = 3.362 tokens per round" in a for a in fast.assumptions)
    assert fast.speculative is not None and fast.speculative["tokens_per_round"] == pytest.approx(3.3616)
    # the draft's weights and cache share the device: fewer KV tokens than the target alone
    alone, both = kv_budget(target, H100, TP4, 512), kv_budget(target, H100, TP4, 512, spec.draft)
    assert both.tokens < alone.tokens and fast.kv_capacity_tokens == both.tokens
    free = KV_MEMORY_FRACTION * H100.dram_bytes - both.weight_bytes - both.draft_weight_bytes - both.activation_bytes
    room = int(free // (both.kv_bytes_per_token + both.draft_kv_bytes_per_token))
    assert both.tokens == room // 16 * 16  # whole 16-token pages (vLLM's block)
    assert both.draft_weight_bytes > 3e9 and both.draft_kv_bytes_per_token > both.kv_bytes_per_token  # 7B: no GQA


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"acceptance_rate": 1.0}, "acceptance rate 1.0 must be at least 0 and below 1"),
        ({"acceptance_rate": -0.1}, "acceptance rate -0.1 must be"),
        ({"acceptance_rate": float("nan")}, "acceptance rate nan must be"),
        ({"draft_tokens": 0}, "draft tokens 0 must be an integer from 1 to 16"),
        ({"draft_tokens": 17}, "draft tokens 17 must be"),
        ({"draft_tokens": 2.5}, "draft tokens 2.5 must be"),
        ({"draft": " "}, "needs a draft model"),
    ],
)
def test_bad_inputs_are_one_line(changes, words):
    with pytest.raises(mapper.MapperError, match=words) as e:
        validate_speculative(replace(mapper.SpeculativeConfig("llama2-7b", 0.8, 4), **changes))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--speculative-draft", "llama2-7b", "--acceptance-rate", "1"], "acceptance rate 1.0 must be"),
        (["--speculative-draft", "llama2-7b", "--acceptance-rate", "0.8", "--draft-tokens", "0"], "draft tokens 0"),
        (["--speculative-draft", "llama2-7b"], "--speculative-draft needs --acceptance-rate"),
        (["--acceptance-rate", "0.8"], "--acceptance-rate applies to speculative decoding"),
        (["--speculative-draft", "resnet50", "--acceptance-rate", "0.8"], "draft model resnet50 has no KV cache"),
        (["--speculative-draft", "llama2-7b", "--acceptance-rate", "0.8", "--scheduler", "chunked"], "chunked"),
        (["--speculative-draft", "llama2-7b", "--acceptance-rate", "0.8", "--compare-schedulers"], "chunked"),
    ],
)
def test_the_cli_refuses_bad_inputs_in_one_line(capsys, flags, words):
    assert main(["serve", "gpt2-small", "--rate", "1", "--requests", "20", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1


def test_a_request_queue_is_not_served_speculatively(capsys):
    flags = ["--speculative-draft", "llama2-7b", "--acceptance-rate", "0.8"]
    assert main(["serve", "resnet50", "--rate", "10", "--requests", "100", *flags]) == 2
    assert "applies to a decoder served by continuous batching" in capsys.readouterr().err


def test_off_by_default_the_serving_has_no_speculation(capsys):
    argv = ["serve", "gpt2-small", "--rate", "2", "--requests", "50", "--json"]
    assert main(argv) == 0
    section = json.loads(capsys.readouterr().out)
    assert "speculative" not in section and not any("speculative" in a for a in section["assumptions"])
    assert not any("speculative" in f for f in section["assessment"]["question"]["flags"])


@pytest.mark.slow  # a review or serving run of a 70B or at load: several seconds
def test_serve_with_a_draft_prints_the_round_and_asks_again_with_its_flags(capsys):
    flags = ["--speculative-draft", "llama2-7b", "--draft-tokens", "4", "--acceptance-rate", "0.8"]
    argv = ["serve", "llama2-70b", "--tp", "4", "--max-batch", "1", "--seq", "1", "--dim", "past=512"]
    assert main([*argv, "--rate", "0.2", "--requests", "50", "--json", *flags]) == 0
    section = json.loads(capsys.readouterr().out)
    row = section["speculative"]
    assert row["draft"] == "llama2-7b" and row["draft_tokens"] == 4 and row["acceptance_rate"] == 0.8
    assert row["per_token_s"] == pytest.approx(row["round_s"] / 3.3616) and row["speedup"] > 1.5
    assert section["tpot_p50_s"] < row["decode_step_s"]
    asked = section["assessment"]["question"]["flags"]
    assert asked[-3:] == ["--speculative-draft=llama2-7b", "--draft-tokens=4", "--acceptance-rate=0.8"]
    names = [c["label"] for c in section["assessment"]["candidates"]]
    assert not any(n.startswith("speculative decoding") for n in names)  # already served with it: not offered
    assert main([*argv, "--rate", "0.2", "--requests", "50", *flags]) == 0
    text = capsys.readouterr().out
    assert "speculative round at batch 1, context 576: 4 draft steps" in text and "tokens per round" in text


@pytest.mark.slow  # a review or serving run of a 70B or at load: several seconds
def test_the_review_offers_speculation_at_a_small_batch_with_its_owner_and_caveat(target):
    a = mapper.assess_slice(target, {"batch": 1, "seq": 1, "past": 1024}, H100, TP4)
    c = next(c for c in a.candidates if c.kind == "serving")
    assert c.owner == "runtime systems engineer" and c.kpi == "TPOT" and not c.rejected and c.fits
    assert "acceptance rate measured" in c.evidence and "fallback: plain decoding" in c.evidence
    assert c.cost.startswith("the gain depends on the acceptance rate: it breaks even at 0.5")
    assert c.option_text() == "speculative_draft=llama2-7b,draft_tokens=4,acceptance_rate=0.7"
    spec = mapper.SpeculativeConfig(mapper.open_model("llama2-7b"), 0.7, 4)
    rnd = mapped_round(target, spec, H100, TP4, 1, 1024)
    assert c.latency_s == pytest.approx(rnd.tpot_s) and c.gain == pytest.approx(
        a.result.totals.latency_s / rnd.tpot_s - 1
    )
    assert a.chosen is not None and a.chosen.kind == "plan"  # offered for the serving owner, never the default
    big = mapper.assess_slice(target, {"batch": 64, "seq": 1, "past": 1024}, H100, TP4)
    c64 = next(c for c in big.candidates if c.kind == "serving")
    assert c64.gain < c.gain and c64.rejected  # at batch 64 the verification no longer pays at 0.7


def test_no_draft_known_no_row():
    a = mapper.assess_slice(mapper.open_model("llama2-7b"), {"batch": 1, "seq": 1, "past": 1024}, H100)
    assert not any(c.kind == "serving" for c in a.candidates)


@pytest.mark.slow  # a review or serving run of a 70B or at load: several seconds
def test_a_missed_tpot_target_serves_the_speculation_row_with_its_draft(target):
    """Under a latency target the row is served at the assessment's load with the draft, like a plan change (14 ms:
    the round's 13.5 ms a token at 0.7 since H100's matrix DRAM curve, 12.6 ms before it, when the target was 13,
    and 11.7 ms before the paged decode latency and the GEMM floor, when it was 12)."""
    serve = mapper.ServeRequest(mapper.ServingConfig(max_batch=1, rate_per_s=0.1, requests=100))
    question = mapper.Question(serve, True, mapper.Targets(tpot_p99_s=0.014))
    a = mapper.assess_slice(target, {"batch": 1, "seq": 1, "past": 1024}, H100, TP4, question)
    c = next(c for c in a.candidates if c.kind == "serving")
    assert a.failure.check == "latency target" and [t.met for t in c.target_checks] == [True]
    assert c.target_checks[0].value_s == pytest.approx(c.latency_s, rel=0.05)  # the served TPOT p99: the round's
