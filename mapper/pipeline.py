"""The pipeline, top to bottom: one function per question a reviewer asks.

    load_model        ONNX -> Graph at bound shapes                      (onnx_import)
    analyze_graph     Graph -> per-node work and layer types             (ops, layers)
    map_workload      + hardware + options:
        choose_dtype      the plan's precision and its caveats            (kernels)
        choose_runtime    runtime preset: KV-cache update, launch, attention (runtime)
        plan_kernels      fusion groups -> kernels -> conv layout         (fusion, kernels, layout)
        apply_kv_cache    the past -> present update as the runtime does it (runtime)
        plan_devices      memory per device, tensor-parallel split        (memory, sharding)
        last_token_logits a prompt's logits as the runtime computes them   (logits)
        causal_prompt_attention  a prompt's attention on the causal triangle (causal)
        estimate_kernels  tiling search, cost, power cap, bottleneck     (tiling, cost, bottleneck)
        place_on_devices  pipeline stages, sends, collective overlap     (placement)
        roll_up_slice     totals and layer-type figures                   (rollup)
then review.assessment.assess_slice: the slice served at its load, checked, its fixes judged (every view's)

Follow one model through here to see every stage in order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import NamedTuple

from mapper.core.errors import MapperError
from mapper.core.graph import Graph, ReleasedPrecision
from mapper.core.options import PlanOptions
from mapper.core.result import (
    Kernel,
    LayerRollup,
    MappingResult,
    MemoryPlan,
    Totals,
)
from mapper.core.timeline import KernelEstimates
from mapper.core.version import __version__
from mapper.core.vocab import (
    FusionPolicy,
    GqaDecode,
    KvCache,
    KvDtype,
    Launch,
    PlanDtype,
    Runtime,
    Sparsity,
    WeightDtype,
    values,
)
from mapper.cost import bottleneck
from mapper.cost.assess import estimate_kernels
from mapper.handle import ModelHandle, open_model
from mapper.hardware.profile import HardwareProfile
from mapper.hardware.target import device_target
from mapper.plan import tiling
from mapper.plan.attention_tiling import attention_fits
from mapper.plan.causal import causal_prompt_attention
from mapper.plan.experts import (
    check_expert_parallel,
    plan_experts,
    replica_devices,
    resident_kernels,
    whole_experts,
)
from mapper.plan.fusion import plan_fusion
from mapper.plan.kernels import build_kernels
from mapper.plan.layout import plan_layout
from mapper.plan.logits import last_token_logits
from mapper.plan.precision import (
    PLAN_DTYPE_BYTES,
    SCALED_FORMATS,
    WIDER_PRECISIONS,
    Sizer,
    precision_caveats,
    released_precision,
)
from mapper.plan.runtime import (
    RuntimeChoice,
    apply_kv_cache,
    choose_runtime,
    kv_cache_tensors,
    launch_cost_s,
    runtime_assumptions,
)
from mapper.plan.sharding import assigned_roles, shard_kernels
from mapper.schedule.memory import plan_memory
from mapper.schedule.placement import place_on_devices
from mapper.schedule.rollup import STALL_DEFINITION, Spread, roll_up
from mapper.work.moe import routing_caveats
from mapper.work.workload import Workload
from mapper.zoo import ZOO_NAMES

FUSION_POLICIES = values(FusionPolicy)
PLAN_DTYPES = values(PlanDtype)  # PlanOptions.dtype: auto maps at the model's released precision
WEIGHT_DTYPES = values(WeightDtype)  # PlanOptions.weight_dtype: weight-only quantization
RUNTIMES = values(Runtime)  # PlanOptions.runtime: a preset of kv_cache and launch
KV_CACHE_MODES = values(KvCache)  # PlanOptions.kv_cache
LAUNCHES = values(Launch)  # PlanOptions.launch
SPARSITIES = values(Sparsity)  # PlanOptions.sparsity
KV_DTYPES = values(KvDtype)  # PlanOptions.kv_dtype: the KV cache's storage precision
GQA_DECODES = values(GqaDecode)  # PlanOptions.gqa_decode: decode attention's grouped query heads
SPARSITY_CAVEAT = (
    "2:4 structured sparsity of weight GEMMs (half the weights pruned, compressed with 2-bit indices, at the"
    " profile's sparse matrix peak): needs accuracy evidence of the pruned (and fine-tuned) model on production"
    " data and a dense fallback; the memory plan still counts dense weights."
)


KV_DTYPE_CAVEAT = (
    "KV cache stored in {kv} (the plan computes in {dtype}): needs quality evidence of the model with its cache"
    " quantized (per-tensor or per-head scales calibrated on production prompts; long-context accuracy) and a"
    " fallback to a {dtype} cache, kept deployable; attention reads the cache at {kv} and dequantizes on chip."
)


def is_builtin(source) -> bool:
    return isinstance(source, str) and source in ZOO_NAMES


def load_workload(
    source: str | os.PathLike | bytes | ModelHandle,
    dims: dict[str, int] | None = None,
    *,
    batch: int | None = None,
    seq: int | None = None,
    file_name: str | None = None,
) -> Workload:
    """A built-in name, a path, uploaded bytes or a model handle -> its workload at the bindings.
    `file_name`: the name of the file uploaded bytes came from (see `open_model`). Callers that bind one
    model many times open it once (`open_model`) and bind the handle."""
    return open_model(source, file_name=file_name).bind(dims, batch=batch, seq=seq)


def load_model(
    source: str | os.PathLike | bytes,
    dims: dict[str, int] | None = None,
    *,
    batch: int | None = None,
    seq: int | None = None,
    name: str | None = None,
    file_name: str | None = None,
) -> Graph:
    """Read an ONNX model and give its graph at concrete shapes (see `open_model` for its name)."""
    return open_model(source, file_name=file_name, name=name).bind(dims, batch=batch, seq=seq).graph


def dim_roles(source: str | os.PathLike | bytes | ModelHandle) -> dict[str, str]:
    """Each free dim of a model (a built-in name, a path, uploaded bytes or a handle) -> its role: "batch"
    and "seq" (what the --batch and --seq shortcuts bind: batch_size, sequence_length...), "past" (a KV-cache
    length), "total" (a cache-plus-new length an export declares apart), "branch" (a boolean input an If
    branches on) or "other". Serving, power curves and LLM steps vary a model's batch and lengths through these."""
    return dict(open_model(source).roles)


class _Planned(NamedTuple):
    """The stages up to the memory plan (`_planned`): what the cost and the document read of them."""

    released: ReleasedPrecision
    dtype: str
    caveats: list[str]
    sizer: Sizer
    run: RuntimeChoice
    layout: str
    kernels: Sequence[Kernel]
    memory: MemoryPlan


def _planned(workload: Workload, hardware: HardwareProfile, options: PlanOptions) -> _Planned:
    """Precision -> runtime -> fusion -> layout -> the KV-cache update -> devices (memory, TP, experts)."""
    graph, caches = workload.graph, workload.caches
    released = released_precision(graph, caches)
    dtype, caveats = choose_dtype(released, hardware, options)
    kv_tensors = kv_cache_tensors(graph) if options.kv_dtype != KvDtype.SAME else frozenset()
    sizer = Sizer(graph, dtype, options.weight_dtype, caches, options.kv_dtype, kv_tensors)
    run = choose_runtime(graph, hardware, options)
    kernels, layout = plan_kernels(workload, hardware, replace(options, attention_fusion=run.attention_fusion), sizer)
    kernels = apply_kv_cache(graph, kernels, run.kv_cache, sizer, caches)
    kernels, memory = plan_devices(workload, kernels, sizer, hardware, options)
    return _Planned(released, dtype, caveats, sizer, run, layout, kernels, memory)


def map_memory(workload: Workload, hardware: HardwareProfile, options: PlanOptions = PlanOptions()) -> MemoryPlan:
    """A workload's memory per device under these options: `map_workload`'s memory plan, from the stages before the
    cost (what a KV budget reads of a step no step time is read of)."""
    return _planned(workload, hardware, options).memory


def map_workload(workload: Workload, hardware: HardwareProfile, options: PlanOptions = PlanOptions()) -> MappingResult:
    """Map a workload onto a device: fusion -> layout -> devices -> tiling + cost -> classes -> placement -> roll-up."""
    graph, caches = workload.graph, workload.caches
    released, dtype, caveats, sizer, run, layout, kernels, memory = _planned(workload, hardware, options)
    kernels = last_token_logits(graph, kernels, caches) if run.last_token_logits else kernels
    kernels = causal_prompt_attention(kernels) if run.causal_attention else kernels
    sparse, launch_s = options.sparsity == Sparsity.TWO_FOUR, launch_cost_s(hardware, run.launch)
    target = device_target(
        hardware, dtype, sizer.key, options.power_cap_w, sparse, launch_s, run.decode_attention, run.causal_attention
    )
    estimates = estimate_kernels(kernels, target, caches)
    estimates, parallel = place_on_devices(graph, estimates, options, target, sizer, caches)
    layers, totals = roll_up_slice(workload, estimates, sizer, hardware, dtype, options, parallel.slowest_stage_s)
    return MappingResult(
        model_name=graph.name,
        model_sha256=graph.sha256,
        dims=graph.dims,
        hardware_name=hardware.name,
        hardware_sha256=hardware.sha256,
        options=options,
        nodes=workload.nodes,
        kernels=estimates,
        layers=layers,
        totals=totals,
        unmodeled=tuple((n.name, n.op_type, n.reason) for n in workload.unmodeled),
        caveats=tuple(caveats) + tuple(routing_caveats(graph, workload.expert_gemms)),
        assumptions=caches.assumptions(
            hardware.sha256, dtype, layout, lambda: assumptions_used(hardware, dtype, layout)
        )
        + runtime_assumptions(run, hardware),
        engine_version=__version__,
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        node_count=len(graph.nodes),
        model_builtin=workload.builtin,
        hardware_builtin=hardware.builtin,
        memory=memory,
        parallel=parallel,
        released=released,
    )


def choose_dtype(released: ReleasedPrecision, hardware: HardwareProfile, options: PlanOptions) -> tuple[str, list[str]]:
    """The precision the plan runs at and the caveats it brings (auto: the model's released precision, or the
    nearest wider one the device has a matrix peak for), each caveat against the released precision."""
    own = str(released.dtype)
    dtype = own if options.dtype == PlanDtype.AUTO else options.dtype
    caveats = precision_caveats(released, dtype, options.weight_dtype, options.kv_dtype)
    if options.dtype == PlanDtype.AUTO and not hardware.has_matrix_peak(own):
        # e.g. an int8 model on Gaudi 2, an fp16 one on a TPU: the nearest wider precision the device has
        dtype = next(d for d in WIDER_PRECISIONS.get(own, ("fp32",)) if hardware.has_matrix_peak(d))
        caveats.append(
            f"{hardware.name} has no {own} matrix peak: the model, released at {own} ({released.source}), is mapped"
            f" at {dtype}, the nearest wider precision it has; choose a dtype the device has (--dtype) to see another."
        )
    if dtype != "fp32":
        hardware.matrix_peak(dtype)  # an unsupported dtype is an error naming the dtypes the device has
    stores = (("weight_dtype", options.weight_dtype, WEIGHT_DTYPES), ("kv_dtype", options.kv_dtype, KV_DTYPES))
    for name, stored, choices in stores:
        if stored in SCALED_FORMATS and not hardware.has_matrix_peak(stored):  # weights or cache in a block format
            # the other narrow choices: stored narrow, computed at the activations' precision (KvDtype.SAME too)
            peakless = [c for c in choices if c not in SCALED_FORMATS and c != WeightDtype.SAME]
            raise MapperError(
                f"hardware {hardware.name}: no matrix peak for {name}={stored} (a block-scaled format is mapped only"
                f" where the datasheet gives its peak); it supports {hardware.matrix_dtypes()};"
                f" choose another {name} ({', '.join(peakless)} need none) or another device"
            )
    if options.sparsity == Sparsity.TWO_FOUR:
        hardware.sparse_matrix_peak(dtype)  # a device without a 2:4 peak at this dtype is an error naming those it has
        caveats.append(SPARSITY_CAVEAT)
    if options.kv_dtype != KvDtype.SAME and PLAN_DTYPE_BYTES[options.kv_dtype] < PLAN_DTYPE_BYTES[dtype]:
        caveats.append(KV_DTYPE_CAVEAT.format(kv=options.kv_dtype, dtype=dtype))
    return dtype, caveats


def plan_kernels(
    workload: Workload, hardware: HardwareProfile, options: PlanOptions, sizer: Sizer
) -> tuple[Sequence[Kernel], str]:
    """Fusion groups -> kernels with their boundary traffic and engine -> the conv layout (and its transposes)."""
    graph, caches = workload.graph, workload.caches
    attention_fusion = (
        options.fusion == FusionPolicy.AGGRESSIVE if options.attention_fusion is None else options.attention_fusion
    )
    groups = plan_fusion(graph, workload.nodes, workload.plan_key, options.fusion, attention_fusion, caches)
    kernels = build_kernels(workload, groups, sizer, hardware, attention_fits)
    return plan_layout(graph, kernels, options.layout, hardware.preferred_conv_layout, sizer)


def plan_devices(
    workload: Workload, kernels: Sequence[Kernel], sizer: Sizer, hardware: HardwareProfile, options: PlanOptions
) -> tuple[Sequence[Kernel], MemoryPlan]:
    """Memory per device (every expert resident, E/ep a device), the kernels split for tensor parallelism
    (their roles are assigned where one device is asked for but the model does not fit, to say how a split
    would shrink it), then the experts at the busiest one's load and split for expert parallelism."""
    graph, ep = workload.graph, options.ep
    check_expert_parallel(workload, ep, options.tp, options.attention_dp, options.expert_tp)
    max_devices = max(hardware.interconnect.max_devices, 1)
    memory = (
        plan_memory(graph, resident_kernels(workload, kernels, ep), sizer, hardware.dram_bytes, 1, 1, max_devices)
        if options.tp == options.pp == 1
        else None
    )
    if memory is None or not memory.fits:
        experts = frozenset(workload.expert_gemms)
        whole = whole_experts(workload, options.tp, ep)
        full, split = assigned_roles(graph, kernels, whole, experts, workload.caches)
        resident = resident_kernels(workload, full, ep)
        memory = plan_memory(graph, resident, sizer, hardware.dram_bytes, options.tp, options.pp, max_devices)
        kernels = shard_kernels(full, split, options.tp, sizer)
    planned = plan_experts(
        workload, kernels, ep, options.expert_imbalance, sizer.act, options.attention_ranks, options.expert_tp
    )
    return planned, memory


def roll_up_slice(
    workload: Workload,
    estimates: KernelEstimates,
    sizer: Sizer,
    hardware: HardwareProfile,
    dtype: str,
    options: PlanOptions,
    steady_state_s: float | None,
) -> tuple[tuple[LayerRollup, ...], Totals]:
    """Layer-type figures and totals over the devices and replicas the options ask for. A stage runs each kernel on
    all of its devices at once: the tp ranks, or at tp 1 the ep devices of their own (attention and the dense layers
    replicated on each, E/ep experts a device); under attention DP the mapping is one rank's (one device)."""
    stage = options.tp if options.attention_dp else replica_devices(options.tp, 1, options.ep)
    spread = Spread(
        devices=stage * options.pp,
        replicas=options.dp,
        steady_state_s=steady_state_s,
        ranks=stage,
        idle_others_w=hardware.idle_w * stage * (options.pp - 1),
    )
    return roll_up(estimates, workload, sizer.weight_bytes(), hardware.matrix_peak(dtype), dtype, spread)


def assumptions_used(hw: HardwareProfile, dtype: str, layout: str) -> tuple[tuple[str, str, str], ...]:
    """Every profile value (with its source) and every modeling constant the estimate used."""
    # the profile's evidence note describes its figures (the Hardware page and `mapper hw NAME` show it); the
    # estimate used the figures, so the note stays out of the document and moves no recorded mapping
    rows = [
        (key, str(value), hw.sources.get(key, ""))
        for key, value in flatten_profile(hw)
        if not key.startswith("meta.evidence.")
    ]
    rows.append(("plan.dtype", dtype, "plan option (auto = the model's released precision)"))
    rows.append(("plan.conv_layout", layout, "plan option (auto = the profile's preferred layout)"))
    for mod, names in (
        (tiling, ("L2_REUSE_FRACTION", "ACCUMULATOR_BYTES")),
        (bottleneck, ("LAUNCH_SHARE", "SYNC_SHARE", "OCCUPANCY_LIMIT")),
    ):
        for name in names:
            rows.append((f"{mod.__name__}.{name}", str(getattr(mod, name)), "modeling constant (see the module)"))
    rows.append(("definition.memory_stall_fraction", STALL_DEFINITION, "mapper/schedule/rollup.py"))
    return tuple(rows)


def flatten_profile(hw: HardwareProfile) -> list[tuple[str, object]]:
    def walk(prefix, value):
        if isinstance(value, dict) and "value" in value:
            yield prefix, value["value"]
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            yield prefix, value

    return list(walk("", hw.to_dict()))
