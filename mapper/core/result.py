"""The data that flows out of the planning stages: kernels, tiles, costs, totals.

Every stage after the work model produces one of these frozen records; the
sheet writers, the dashboard and the CLI read them and nothing else.
Units are in field names (SI: seconds, bytes, FLOPs, joules, watts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from mapper.core.classes import Bottleneck, Owner
from mapper.core.graph import LayerType, OpClass, ReleasedPrecision
from mapper.core.options import PlanOptions
from mapper.core.records import record, replacer
from mapper.core.vocab import (
    Engine,
    KernelRule,
    MatrixKind,
    Shard,
)


@record
class MatrixShape:
    """A matrix op as (batch of) GEMMs: C[m, n] += A[m, k] B[k, n], `batch` times."""

    batch: int
    m: int
    n: int
    k: int
    kind: MatrixKind = MatrixKind.GEMM
    depthwise: bool = False  # K = Kh*Kw only: too little reuse for a matrix engine
    a_elements: int = 0  # distinct elements of A when it is not m*k (conv: the input, not its im2col)
    heads: int = 0  # attention: query heads (batch = sequences x heads); 0 for other kinds
    kv_heads: int = 0  # attention: the key/value heads they read (grouped-query attention: fewer); 0 elsewhere

    @property
    def group(self) -> int:
        """Query heads reading one key/value head (1: multi-head attention, or not attention)."""
        return self.heads // self.kv_heads if self.kv_heads and self.heads > self.kv_heads else 1


@record
class NodeWork:
    name: str
    op_type: str
    op_class: OpClass
    flops: float  # all arithmetic, 2 x MACs for matrix work
    matrix_flops: float  # the part a matrix engine can run
    sfu_ops: float  # special-function (exp, tanh, erf, rsqrt) operations
    bytes_read: float  # activations + weights, each once
    bytes_written: float
    weight_bytes: float  # parameters this node reads
    matrix: MatrixShape | None = None
    reason: str = ""  # why the node is unmodeled (empty otherwise)
    layer_type: LayerType = LayerType.OTHER
    layer_group: int = -1  # nodes of one recognized attention or norm block share an id

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


@record
class Kernel:
    """A group of nodes that runs as one kernel, and why (fusion stage)."""

    name: str
    nodes: tuple[str, ...]
    op_types: tuple[str, ...]
    rule: KernelRule  # the fusion rule that made it ("single" alone), or the stage that inserted it
    engine: Engine
    layer_type: LayerType
    flops: float
    matrix_flops: float
    sfu_ops: float
    dram_bytes: float  # compulsory traffic across the kernel boundary
    weight_bytes: float
    matrix: MatrixShape | None = None
    reduction_rows: int = 0  # rows a normalization/softmax reduces (vector kernels)
    reduction_length: int = 0  # elements per reduced row
    rows: int = 0  # rows of an elementwise kernel's output (all but its last axis; 0: not a vector kernel)
    row_length: int = 0  # elements per row of that output (its last axis)
    layout: str = ""  # conv layout the kernel runs in (nchw | nhwc), "" if not a conv
    note: str = ""  # e.g. "inserted: NCHW->NHWC at the conv region boundary"
    collective: str = ""  # all-reduce | all-gather | reduce-scatter | p2p (interconnect kernels)
    devices: int = 1  # devices taking part in the collective
    shard: Shard | str = ""  # tensor-parallel role (`core.vocab.Shard`); "": not assigned (before sharding)
    stage: int = 0  # pipeline stage (device group) the kernel runs on

    @property
    def shape(self) -> MatrixShape:
        """Its matrix view, where a stage holds a matrix kernel (a tile search, the attention search): an error
        naming the kernel where it has none."""
        if self.matrix is None:
            raise ValueError(f"kernel {self.name!r} has no matrix shape")
        return self.matrix

    def replaced(self, **changes) -> Kernel:
        """`dataclasses.replace(self, **changes)` without its per-field Python loop
        (`core.records.replacer`): the stages after fusion copy kernels by the thousand (the engine an assessment
        chose, tensor parallelism's roles and shards of an 80-layer decoder)."""
        return _replace_kernel(self, **changes)


@record
class TileChoice:
    """One candidate tiling of a matrix kernel and its estimate."""

    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    split_k: int
    tiles: int
    waves: int
    wave_efficiency: float
    padding_efficiency: float
    sram_bytes: int
    dram_bytes: float
    l2_bytes: float
    compute_s: float
    memory_s: float
    time_s: float  # the search ranks by the work; cost.estimate re-times every candidate as the kernel (launch incl.)

    def with_time(self, time_s: float) -> TileChoice:
        """`dataclasses.replace(self, time_s=time_s)` without its per-field Python loop
        (cost.estimate re-times every kept candidate)."""
        return _replace_choice(self, time_s=time_s)


# the copies above, each a record's fields with the changed ones written over (`core.records.replacer`)
_replace_kernel = replacer(Kernel)
replace_matrix = replacer(MatrixShape)  # `dataclasses.replace` of a MatrixShape, for the per-kernel loops
_replace_choice = replacer(TileChoice)


@record
class TilePlan:
    """The tiling stage's answer for one kernel: the chosen tile and the runners-up."""

    kind: str  # matrix | attention | vector
    chosen: TileChoice | None
    alternatives: tuple[TileChoice, ...] = ()
    block_size: int = 0  # vector kernels: threads per block
    passes: int = 1  # vector kernels: passes over the data
    grid_syncs: int = 0  # cross-block synchronizations

    @property
    def best(self) -> TileChoice:
        """The chosen tile of a searched plan (matrix, attention): an error where the plan has none."""
        if self.chosen is None:
            raise ValueError(f"a {self.kind} tile plan without a chosen tile")
        return self.chosen


@record
class KernelAssessment:
    """Cost, class and evidence of a kernel (cost + classify stages). Identical kernels of one mapping
    (a model's repeated layers) share one: each is tiled, costed and classed once."""

    tiling: TilePlan
    dtype: str
    time_s: float
    compute_time_s: float
    memory_time_s: float
    overhead_s: float
    sync_s: float
    dram_bytes: float
    l2_bytes: float
    intensity_flop_per_byte: float
    achieved_flops_per_s: float
    stall_fraction: float
    energy_j: float
    avg_power_w: float
    throttled: bool
    bottleneck: Bottleneck
    evidence: str
    owner: Owner
    roofline_time_s: float = 0.0  # headroom: the kernel at its roofline (cost.estimate.roofline_time)
    speedup_if_removed: float = 1.0  # headroom: time over time without its bottleneck (cost.bottleneck)


def _assessed(name: str) -> property:
    return property(attrgetter(f"assessment.{name}"), doc=f"`KernelAssessment.{name}` of this kernel")


@record
class KernelEstimate:
    """One kernel on the timeline: what runs, its assessment, and when it starts (one stream).
    The assessment's fields read through (`e.time_s` is `e.assessment.time_s`)."""

    kernel: Kernel
    assessment: KernelAssessment
    start_s: float = 0.0

    tiling = _assessed("tiling")
    dtype = _assessed("dtype")
    time_s = _assessed("time_s")
    compute_time_s = _assessed("compute_time_s")
    memory_time_s = _assessed("memory_time_s")
    overhead_s = _assessed("overhead_s")
    sync_s = _assessed("sync_s")
    dram_bytes = _assessed("dram_bytes")
    l2_bytes = _assessed("l2_bytes")
    intensity_flop_per_byte = _assessed("intensity_flop_per_byte")
    achieved_flops_per_s = _assessed("achieved_flops_per_s")
    stall_fraction = _assessed("stall_fraction")
    energy_j = _assessed("energy_j")
    avg_power_w = _assessed("avg_power_w")
    throttled = _assessed("throttled")
    bottleneck = _assessed("bottleneck")
    evidence = _assessed("evidence")
    owner = _assessed("owner")
    roofline_time_s = _assessed("roofline_time_s")
    speedup_if_removed = _assessed("speedup_if_removed")


@dataclass(frozen=True, slots=True)
class LayerRollup:
    layer_type: str
    kernels: int
    time_s: float
    share: float
    flops: float
    mfu: float
    stall_fraction: float


@dataclass(frozen=True, slots=True)
class Totals:
    latency_s: float
    batch: int
    throughput_per_s: float  # inferences (batch items) per second
    flops: float  # model FLOPs (algorithmic, unpadded)
    matrix_flops: float
    dram_bytes: float
    weight_bytes: float
    mfu: float
    memory_stall_fraction: float
    energy_j: float  # per batch
    energy_per_inference_j: float
    avg_power_w: float
    perf_per_watt: float  # inferences per second per watt
    peak_flops_per_s: float  # the peak MFU is measured against
    dtype: str


@dataclass(frozen=True, slots=True)
class DeviceFit:
    """The smallest tensor x pipeline split whose per-device footprint fits the device."""

    tp: int
    pp: int
    per_device_bytes: float


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Memory capacity per device (schedule stage): the `memory` section of `--json` and the sheet."""

    per_device_bytes: float
    capacity_bytes: float
    fits: bool
    shortfall_bytes: float
    weight_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    smallest_fit: DeviceFit | None  # None: no tp x pp within the interconnect fits


@record
class CollectiveRecord:
    """One collective (or pipeline send) on the timeline."""

    name: str
    kind: str  # all-reduce | all-gather | reduce-scatter | p2p
    devices: int
    message_bytes: float
    time_s: float


@dataclass(frozen=True, slots=True)
class ParallelPlan:
    """Placement on devices (schedule stage): the `parallel` section of `--json` and the sheet."""

    tp: int
    pp: int
    dp: int
    devices: int
    topology: str
    stage_times_s: tuple[float, ...]
    slowest_stage_s: float | None  # None with one stage
    interconnect_time_s: float
    interconnect_share: float
    collectives: tuple[CollectiveRecord, ...]
    assumptions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MappingResult:
    model_name: str
    model_sha256: str
    dims: tuple[tuple[str, int], ...]
    hardware_name: str
    hardware_sha256: str
    options: PlanOptions
    nodes: Sequence[NodeWork]  # the workload's (`work.works.NodeWorks`: each record written when read)
    kernels: Sequence[KernelEstimate]  # the timeline (`core.timeline.KernelEstimates`: written when read)
    layers: tuple[LayerRollup, ...]
    totals: Totals
    unmodeled: tuple[tuple[str, str, str], ...]  # (node, op type, reason)
    caveats: tuple[str, ...]  # precision and other quality caveats
    assumptions: tuple[tuple[str, str, str], ...]  # (name, value, source) used by the estimate
    engine_version: str
    created_utc: str
    node_count: int
    memory: MemoryPlan
    parallel: ParallelPlan
    # Sections later stages attach, JSON-ready (each in the document under its own key):
    serving: dict | None = None  # the Serving section at the assessment's load (mapper.review.assessment)
    assessment: dict | None = None  # the slice's one assessment: first failure, load, fixes (every view's)
    measured: dict | None = None  # predicted against measured (`mapper.compare_measured`)
    model_builtin: bool = False  # the model is a built-in (reproduced by its name)
    hardware_builtin: bool = False  # the profile is a built-in's file, unedited (reproduced by its name)
    released: ReleasedPrecision | None = None  # the precision the model is published in, and where that was read
