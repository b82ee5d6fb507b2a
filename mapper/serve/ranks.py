"""Attention data parallelism in serving: a plan's ranks each serve requests of their own (PlanOptions.attention_dp).

Under attention DP (SGLang --enable-dp-attention, TensorRT-LLM attention DP) each of the ep ranks holds its own
running batch and KV cache, and a router spreads the requests over the ranks. The engine maps one rank's step (the
experts at every rank's tokens: plan/experts.py), so serving runs one rank: its share of the offered rate (a
trace's every ranks-th request), its batch cap and its own KV cache, and the replica serves the ranks' sum of
throughput. The ranks step in lockstep at the same batch (the MoE collectives hold them together): a rank that
drew a lighter load still waits for the busiest, which the model does not charge.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.serve.continuous import LLMServingConfig, LLMServingResult


def rank_config(config: LLMServingConfig, ranks: int) -> LLMServingConfig:
    """The config one rank serves: 1/ranks of the rate, or every ranks-th request of a trace (round robin)."""
    if ranks <= 1:
        return config
    trace = config.trace
    if trace is not None:
        cut = {f: getattr(trace, f)[::ranks] for f in ("arrival_s", "prompt_tokens", "output_tokens")}
        trace = replace(trace, **{f: v for f, v in cut.items() if v is not None})
    return replace(config, rate_per_s=config.rate_per_s / ranks, trace=trace)


def over_ranks(result: LLMServingResult, ranks: int) -> LLMServingResult:
    """One rank's run as the replica's: throughput, offered rate and capacity x ranks; latencies the rank's."""
    if ranks <= 1:
        return result
    line = (
        f"attention data parallelism: {ranks} ranks, each its own requests (1/{ranks} of the rate, round robin),"
        f" batch cap and KV cache; one rank simulated, throughput x {ranks}; the ranks step together"
    )
    return replace(
        result,
        throughput_requests_per_s=result.throughput_requests_per_s * ranks,
        throughput_tokens_per_s=result.throughput_tokens_per_s * ranks,
        offered_rate_per_s=result.offered_rate_per_s * ranks,
        capacity_per_s=result.capacity_per_s * ranks,
        assumptions=(*result.assumptions, line),
    )
