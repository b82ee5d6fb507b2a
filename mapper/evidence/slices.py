"""One-op slices: a measured row's op mapped alone (`microbench.kernel_model`) and replayed from a CUDA graph, the
measured-truth harness's unit of prediction (`validate`, `gemm_rows`).

A slice's latency is kept across tables and frameworks by what it depends on: the profile's content (a fit's
candidate profile has its own hash, `candidates`), the op and its shape, and the plan's precision, runtime and
power cap.
"""

from __future__ import annotations

from onnx import TensorProto

from mapper.core.options import PlanOptions
from mapper.evidence.candidates import profile_named
from mapper.evidence.microbench import kernel_model

_SLICES: dict[tuple, float] = {}  # (profile sha256, kind, shape, plan dtype, runtime, power cap) -> latency


def slice_s(
    profile: str,
    kind: str,
    shape: tuple[int, ...],
    plan_dtype: str,
    runtime: str = "auto",
    power_cap_w: float | None = None,
) -> float:
    """The mapped latency of one one-op slice on the profile named `profile`, replayed from a CUDA graph;
    `power_cap_w` None: the profile's TDP."""
    from mapper.pipeline import load_workload, map_workload

    hw = profile_named(profile)
    key = (hw.sha256, kind, shape, plan_dtype, runtime, power_cap_w)
    found = _SLICES.get(key)
    if found is None:
        fusion = "aggressive" if kind.startswith("attention") else "default"
        graph = kernel_model(kind, shape, TensorProto.BFLOAT16)
        options = PlanOptions(dtype=plan_dtype, fusion=fusion, launch="graph", runtime=runtime, power_cap_w=power_cap_w)
        found = _SLICES[key] = map_workload(load_workload(graph), hw, options).totals.latency_s
    return found
