"""A Review lever beside the candidate table: disaggregated prefill and decode for a decoder's missed latency target.

`disaggregation` offers, where a decoder misses a TTFT, TPOT or request-latency p99 target at the assessment's
load, the same requests served with prompts prefilled on one copy of the plan and sequences decoded on another
(serve/disaggregated.py: each pool's steps mapped on its plan, the KV cache moved over the device link between
them): the devices one more data-parallel replica would take, used so that decode steps carry no prompt. It is a
serving change, owned by the runtime systems engineer, offered and never taken by default (ranking.RANKING); its
figures are the simulation's at the load, its cost the devices and the transfer it needs.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.core.classes import CandidateKind
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.core.targets import Targets
from mapper.core.units import format_duration
from mapper.hardware.profile import HardwareProfile
from mapper.review.candidates import Candidate, offered
from mapper.serve.continuous import LLMServingConfig
from mapper.serve.disaggregated import Disaggregation, Pool, simulate_disaggregated
from mapper.serve.question import ServedLoad

DISAGGREGATION_EVIDENCE = (
    "needs the KV transfer between the pools measured on the deployment's link (the figures assume the device"
    " link at its datasheet rate) and a router that keeps both pools busy; fallback: the same devices as"
    " aggregated replicas"
)


def disaggregation(
    model, hw: HardwareProfile, options: PlanOptions, targets: Targets, load: ServedLoad, doc: dict
) -> tuple[Candidate, ...]:
    """Prefill on one copy of the plan and decode on another, served at the assessment's load; offered where the
    assessment served a decoder by continuous batching (a rate, no speculation) and both pools fit one node."""
    run = load.run
    if run is None or not isinstance(run.config, LLMServingConfig) or run.config.speculative is not None:
        return ()
    plan = replace(options, dp=1)
    setup = Disaggregation(Pool(plan), Pool(plan))
    config = replace(run.config, rate_per_s=load.rate_per_s, kv_capacity_tokens=None, kv_capacity_source="")
    try:
        served = simulate_disaggregated(model, hw, plan, config, setup)
    except MapperError:  # two copies past one node (no link between nodes is known), or a request that does not fit
        return ()
    dis = served.disaggregated
    section = {
        "policy": "continuous",
        "ttft_p99_s": dis.ttft_p99_s,
        "tpot_p99_s": dis.tpot_p99_s,
        "latency_p99_s": dis.latency_p99_s,
    }
    base = run.section()
    memory = doc.get("memory") or {}
    devices = setup.prefill.devices
    cost = (
        f"{2 * devices} devices against {devices}, as one more replica takes; the KV cache crosses the device link"
        f" ({served.transfer_s_per_prompt_token * 1e6:.3f} us a prompt token); TTFT p99"
        f" {format_duration(dis.ttft_p99_s)} against {format_duration(base['ttft_p99_s'])}"
    )
    return (
        offered(
            doc,
            options,
            label=f"disaggregated prefill and decode (a TP {options.tp} pool each)",
            evidence=DISAGGREGATION_EVIDENCE,
            latency_s=dis.tpot_p99_s,
            gain=base["tpot_p99_s"] / dis.tpot_p99_s - 1 if dis.tpot_p99_s > 0 else 0.0,
            fits=memory.get("fits", True),
            caveats=(),
            p99_s=dis.latency_p99_s,
            per_device_bytes=memory.get("per_device_bytes", 0.0),
            capacity_bytes=memory.get("capacity_bytes", 0.0),
            kind=CandidateKind.SERVING,
            serving_changes=(("prefill_tp", options.tp), ("decode_tp", options.tp)),
            kpi="TPOT p99",
            cost=cost,
            target_checks=targets.checks(section),
        ),
    )
