"""`mapper serve`: its flags, the serving question it asks the assessment, and its text form; with
--prefill-tp/--decode-tp, disaggregated prefill and decode against aggregated chunked serving instead."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import mapper
from mapper.cli import store as store_cli
from mapper.cli.args import add_load_args, add_model_args, options_from, question_from, slice_from
from mapper.cli.text import print_answer
from mapper.core.errors import MapperError
from mapper.core.units import field_label, format_duration, format_field, format_number
from mapper.serve.serving import ServingConfig
from mapper.serve.trace import load_trace


def add_serve_args(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    add_load_args(p)
    p.add_argument(
        "--batch-policy",
        choices=("static", "dynamic"),
        default="dynamic",
        help="static: full batches only; dynamic: full or the oldest has waited --max-wait-ms",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", help="CSV of arrivals: arrival_s[, prompt_tokens, output_tokens] (replaces --rate)")
    p.add_argument("--jitter-cv", type=float, help="run-to-run coefficient of variation (default: the profile's)")
    p.add_argument("--jitter-dist", choices=("none", "lognormal", "exponential"), help="default: the profile's")
    p.add_argument("--service-time-s", type=float, help="a fixed batch time instead of the engine's (what-if)")
    p.add_argument(
        "--llm", action="store_true", help="prefill/decode serving (default for a model with a KV-cache input)"
    )
    p.add_argument(
        "--scheduler",
        choices=mapper.SCHEDULERS,
        default="prefill-first",
        help="LLM: which work each step runs (chunked: decodes plus a prompt chunk, Sarathi-Serve/vLLM)",
    )
    p.add_argument(
        "--chunk-tokens", type=int, default=512, help="LLM, chunked: prompt tokens prefilled per step (default 512)"
    )
    p.add_argument(
        "--compare-schedulers", action="store_true", help="LLM: also serve the same requests by every scheduler"
    )
    d = p.add_argument_group("disaggregated prefill and decode (LLM): compared with aggregated chunked serving")
    d.add_argument("--prefill-tp", type=int, help="the prefill pool's TP degree (turns disaggregation on)")
    d.add_argument("--prefill-replicas", type=int, default=1, help="replicas of the prefill pool's plan")
    d.add_argument("--decode-tp", type=int, help="the decode pool's TP degree (default: --tp)")
    d.add_argument("--decode-replicas", type=int, default=1, help="replicas of the decode pool's plan")
    d.add_argument(
        "--kv-link-gbps", type=float, help="GB/s a device between the pools (default: the device link, one node)"
    )


def cmd_serve(args) -> int:
    if args.batch is not None:
        raise MapperError("serve forms its own batches: use --max-batch (and --batch-policy), not --batch")
    hw, options = mapper.load_hardware(args.hw), options_from(args)
    model, dims = slice_from(args, served=True)  # parsed once: every batch size and step binds this handle
    trace = load_trace(args.trace) if args.trace else None
    config = ServingConfig(
        args.batch_policy,
        seed=args.seed,
        jitter_cv=args.jitter_cv,
        jitter_dist=args.jitter_dist,
        trace=trace,
    )  # jitter None: the profile's
    question = question_from(
        args,
        config,
        decoder=True if args.llm else None,
        service_time_s=args.service_time_s,
        scheduler=args.scheduler,
        chunk_tokens=args.chunk_tokens,
        compare_schedulers=args.compare_schedulers,
    )
    if args.prefill_tp is not None or args.decode_tp is not None:
        return serve_disaggregated(args, model, hw, options, question)
    assessment = mapper.assess_slice(model, dims, hw, options, question)
    if assessment.load.source == mapper.LoadSource.REFUSED:
        raise MapperError(assessment.load.refusal)
    doc = assessment.document()
    section = doc["serving"] | {"assessment": doc["assessment"]}
    store_cli.record_from_args(args, store_cli.serving_document(model, hw, options, dims, doc["serving"]), "serve")
    if args.json:
        print(json.dumps(section, indent=1, allow_nan=False))
    else:
        print_answer(doc)
        print_serving(doc["serving"])
    return 0


DISAGGREGATED_REQUESTS = 1_000  # requests served each way where --requests gives none (a decoder's default)
DISAGGREGATED_BATCH = 32  # sequences a replica runs at most where --max-batch gives none (LLMServingConfig's)


def serve_disaggregated(args, model, hw, options, question) -> int:
    """`mapper serve --prefill-tp/--decode-tp`: the same requests served disaggregated and aggregated."""
    if args.rate is None:
        raise MapperError("disaggregated serving compares two ways at one load: give --rate (requests per second)")
    # under --attention-dp the decode pool runs it (each rank its own sequences) and prompts prefill on TP alone
    prefill = replace(options, ep=1, attention_dp=False, expert_tp=False) if options.attention_dp else options
    setup = mapper.Disaggregation(
        mapper.Pool(replace(prefill, tp=args.prefill_tp or options.tp, dp=1), args.prefill_replicas),
        mapper.Pool(replace(options, tp=args.decode_tp or options.tp, dp=1), args.decode_replicas),
        None if args.kv_link_gbps is None else args.kv_link_gbps * 1e9,
    )
    serve, s = question.serve, question.serve.serving
    config = mapper.LLMServingConfig(
        args.max_batch or DISAGGREGATED_BATCH,
        args.rate,
        args.requests or DISAGGREGATED_REQUESTS,
        s.seed,
        args.prompt_tokens or serve.prompt_tokens,
        serve.output_tokens,
        None,
        hw.jitter_cv if s.jitter_cv is None else s.jitter_cv,
        s.jitter_dist or hw.jitter_dist,
        s.trace,
        chunk_tokens=serve.chunk_tokens,
    )
    section = mapper.simulate_disaggregated(model, hw, replace(options, dp=1), config, setup).section()
    if args.json:
        print(json.dumps(section, indent=1, allow_nan=False))
        return 0
    head = f"{'TTFT p50/p99 ms':>16s} {'TPOT p50/p99 ms':>16s} {'tok/s':>8s} {'tok/s/device':>12s}"
    print(f"{'':14s} {'devices':>7s} {head}")
    for name in ("disaggregated", "aggregated"):
        r = section[name]
        ttft, tpot = (f"{r[f'{m}_p50_s'] * 1e3:.1f}/{r[f'{m}_p99_s'] * 1e3:.1f}" for m in ("ttft", "tpot"))
        print(
            f"{name:14s} {r['devices']:7d} {ttft:>16s} {tpot:>16s} {r['throughput_tokens_per_s']:8,.0f}"
            f" {r['tokens_per_s_per_device']:12,.1f}  {r['pools']}"
        )
    for line in section["assumptions"]:
        print(f"assumption: {line}")
    return 0


def print_serving(section: dict) -> None:
    """`mapper serve`'s text form: each field in people's units, the load curve and its knee, the assumptions."""
    for key, value in section.items():
        if key not in ("assumptions", "load_curve", "schedulers", "load", "speculative"):
            print(f"{field_label(key):28s} {format_field(key, value)}")
    print_speculative(section.get("speculative"))
    for point in section.get("load_curve", {}).get("points", []):
        print(
            f"load {point['load']:5.2f}  {format_number(point['offered_rate_per_s'], '/s'):>12s}"
            f"  p50 {format_duration(point['p50_s']):>9s}  p99 {format_duration(point['p99_s']):>9s}"
            f"  utilization {point['utilization']:.1%}"
        )
    if "load_curve" in section:
        curve = section["load_curve"]
        knee = curve["knee_index"]
        at_knee = None if knee is None else curve["points"][knee]["offered_rate_per_s"]
        print(
            f"knee: {'none' if at_knee is None else format_number(at_knee, '/s')}"
            f" (saturation {format_number(curve['saturation_rate_per_s'], '/s')})"
        )
        if curve["p99_target_s"] is not None:
            print(
                f"highest rate meeting p99 {format_duration(curve['p99_target_s'])}:"
                f" {format_number(curve['max_rate_meeting_target_per_s'] or 0, '/s')}"
            )
    print_schedulers(section.get("schedulers", ()))
    for line in section["assumptions"]:
        print(f"assumption: {line}")


def print_speculative(row: dict | None) -> None:
    """`mapper serve --speculative-draft`: the round at the operating point against the plain decode step."""
    if not row:
        return
    print(
        f"speculative round at batch {row['batch']}, context {row['context_tokens']:,.0f}: {row['draft_tokens']}"
        f" draft step{'s' if row['draft_tokens'] > 1 else ''} {format_duration(row['draft_steps_s'])} + verification"
        f" {format_duration(row['verify_s'])} ="
        f" {format_duration(row['round_s'])} for {row['tokens_per_round']:.2f} tokens ->"
        f" {format_duration(row['per_token_s'])} per token against a decode step of"
        f" {format_duration(row['decode_step_s'])} ({row['speedup']:.2f}x)"
    )


def print_schedulers(rows) -> None:
    """`mapper serve --compare-schedulers`: one line per scheduler, milliseconds."""
    if rows:
        print(f"{'scheduler':14s} {'TTFT p50/p90/p99 ms':>24s} {'TPOT p50/p90/p99 ms':>24s} {'e2e p50/p90/p99 s':>22s}")
    for row in rows:
        ttft, tpot, e2e = (
            "/".join(f"{row[f'{m}_{p}_s'] * k:.{d}f}" for p in ("p50", "p90", "p99"))
            for m, k, d in (("ttft", 1e3, 1), ("tpot", 1e3, 1), ("latency", 1, 2))
        )
        print(
            f"{row['scheduler']:14s} {ttft:>24s} {tpot:>24s} {e2e:>22s}"
            f"  {row['throughput_tokens_per_s']:,.0f} tok/s  {row['preemptions']} preemptions"
        )
