"""AIConfigurator's GEMM rows (`gemm_perf`) as one-op slices: what a row timed, and how the harness maps it.

What a row timed (ai-dynamo/aiconfigurator, collector/{trtllm,vllm,sglang}/collect_gemm.py and collector/helper.py
`benchmark_with_power`): the framework's Linear module on a bf16 activation (an fp8, fp8-block or nvfp4 module
quantizing it first), called once for each of `ops` weight copies a pass (`PASS_OPS`). The helper runs the pass
3 times eagerly, captures it in a CUDA graph, replays the graph 3 times to warm up and 6 times timed, and divides:
`RUN_PASSES` passes back to back, the last `TIMED_PASSES` timed.

How it is mapped: the quantize slice in bf16 (quantized rows) plus the GEMM slice at the row's precision, each
replayed from a CUDA graph (`slices`). Where the profile gives the time its power controller takes to pull the
clock down to the cap (`power.cap_response_s`), the run decides which clock the timed passes saw: the harness times
the run at the full clock (the slice mapped with the cap lifted), and the timed passes before `cap_response_s`
are mapped at the full clock, those after it at the cap (`capped_share`). A serving deployment runs for hours: the
engine's own predictions keep the cap. vLLM's bf16 and fp8 modules keep the weights as allocated
(`RowParallelLinear` creates them with `torch.empty`; the collector notes "TODO, to evaluate random weights
impact"): a multiply by such weights does not draw the power of random ones, so those rows are mapped uncapped
(docs/validation.md, "GEMMs": H200 rows of runs of 0.5 s and more at 796 TFLOP/s, where TensorRT-LLM's and
SGLang's random weights settle at 636-698).
"""

from __future__ import annotations

import math

from mapper.core.limits import MAX_POWER_CAP_W
from mapper.evidence.candidates import profile_named
from mapper.evidence.slices import slice_s

QUANTIZED = {"fp8": "fp8", "fp8-block": "fp8", "nvfp4": "nvfp4"}  # GEMM row dtype -> the GEMM slice's plan dtype
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8-block": 1.0, "nvfp4": 0.5}  # a weight element as the module stores it
RUN_PASSES = 12  # benchmark_with_power: 3 eager warm-up passes, 3 warm-up replays, 6 timed replays
TIMED_PASSES = 6
TRTLLM_COPIES_MAX = 5  # collect_gemm.py (TensorRT-LLM): weight copies to span the L2, at most 5
VLLM_OPS = 6  # vLLM's and SGLang's `outside_loop_count` (vLLM: 1 for fp8-block and nvfp4)
SGLANG_OPS = 6
UNCAPPED = MAX_POWER_CAP_W / 2  # a cap no load reaches: the slice at the full clock
EMPTY_WEIGHTS = {("vllm", "bf16"), ("vllm", "fp8")}  # modules whose weights stay as torch.empty left them


def pass_ops(framework: str, dtype: str, n: int, k: int, l2_bytes: float) -> int:
    """Module calls a pass makes (`ops`): TensorRT-LLM's copies of the weight that together span the L2 (up to 5),
    vLLM's and SGLang's six (vLLM's one for fp8-block and nvfp4)."""
    if framework == "trtllm":
        return max(1, min(TRTLLM_COPIES_MAX, math.ceil(l2_bytes / (n * k * WEIGHT_BYTES[dtype]))))
    if framework == "vllm":
        return 1 if dtype in ("fp8-block", "nvfp4") else VLLM_OPS
    return SGLANG_OPS


def capped_share(call_s: float, ops: int, response_s: float) -> float:
    """The share of the timed passes run after the cap took hold: the run is RUN_PASSES passes of `ops` calls of
    `call_s` at the full clock, the last TIMED_PASSES timed, and the clock drops `response_s` into it."""
    pass_s = ops * call_s
    start, end = (RUN_PASSES - TIMED_PASSES) * pass_s, RUN_PASSES * pass_s
    return min(max((end - max(response_s, start)) / (end - start), 0.0), 1.0)


def gemm_row_s(table: str, dtype: str, shape: tuple[int, int, int], profile: str) -> float:
    """The engine's time for one GEMM row (`table` its AIConfigurator label, `dtype` the module's) on `profile`."""
    hw = profile_named(profile)
    capped = module_s(dtype, shape, profile)
    if hw.cap_response_s is None:
        return capped
    free = module_s(dtype, shape, profile, UNCAPPED)
    return timed_s(table.split("/")[2], dtype, shape, hw.l2_bytes, (capped, free), hw.cap_response_s)


def timed_s(
    framework: str, dtype: str, shape: tuple[int, int, int], l2_bytes: float, times: tuple[float, float], response_s
) -> float:
    """The timed passes' mean call: `times` the module's (capped, full-clock) times, the clock dropping
    `response_s` into the run (`capped_share`); modules of weights as allocated run at the full clock."""
    capped, free = times
    if (framework, dtype) in EMPTY_WEIGHTS:
        return free
    _, n, k = shape
    return free + capped_share(free, pass_ops(framework, dtype, n, k, l2_bytes), response_s) * (capped - free)


def module_s(dtype: str, shape: tuple[int, int, int], profile: str, power_cap_w: float | None = None) -> float:
    """The module's slices: a quantized one's bf16 activation quantize, then the GEMM at its precision."""
    if dtype not in QUANTIZED:
        return slice_s(profile, "gemm", shape, "bf16", power_cap_w=power_cap_w)
    m, _, k = shape
    quantize = slice_s(profile, "quantize", (m, k), "bf16", power_cap_w=power_cap_w)
    return quantize + slice_s(profile, "gemm", shape, QUANTIZED[dtype], power_cap_w=power_cap_w)
