"""The hardware-profile schema: what a profile file may contain, checked once at the boundary.

pydantic v2 models with `extra="forbid"` and range checks; every number is an inline table
`{ value = ..., source = "..." }`. `validate_profile_dict` turns pydantic's errors into one
`MapperError` line naming the field and what to do. `mapper.hardware.profile` builds the frozen profile.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from mapper.core.errors import MapperError
from mapper.hardware.schema_errors import README_HINT, ProfileError, describe_error, field_path

# The matrix dtypes a profile may give a peak for: the plan's (`core.vocab.PlanDtype` less auto), the
# block-scaled formats (nvfp4, mxfp8, mxfp6, mxfp4) only where the device's datasheet has them
Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp8", "mxfp6", "mxfp4"]
DTYPES: tuple[str, ...] = get_args(Dtype)
VectorDtype = Literal["fp32", "fp16", "bf16"]
MAX_CURVE_POINTS = 256


def _integral(value: Any) -> Any:
    """Accept 80e9 written as a float for a count of bytes, but never 1.5 or true."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Sourced(_Strict):
    source: str = Field(min_length=1, max_length=2000)

    @field_validator("source")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("source must say where the number comes from (document, derivation or assumption)")
        return text


MIN_POSITIVE = 1e-30  # below any physical figure in SI units (J/FLOP ~1e-12); a subnormal times an efficiency is 0


class Positive(_Sourced):
    value: Annotated[float, Field(gt=0, allow_inf_nan=False)]

    @field_validator("value")
    @classmethod
    def _not_vanishing(cls, value: float) -> float:
        if value < MIN_POSITIVE:
            raise ValueError(
                f"{value!r} is > 0 but below {MIN_POSITIVE:g}, too small for a physical figure in SI units"
            )
        return value


class NonNegative(_Sourced):
    value: Annotated[float, Field(ge=0, allow_inf_nan=False)]


MAX_CLUSTER_UNITS = 16  # the largest thread-block cluster (non-portable size on Hopper, CUDA Programming Guide)
MAX_OVERLAP_EXPONENT = 64.0  # past this the smooth max is the max to 1%: a larger figure says nothing more
MAX_COUNT = 1 << 53  # counts (units, bytes) stay exact as floats; 2^53 bytes is 9 PB, no device is near it


class Count(_Sourced):
    value: Annotated[int, BeforeValidator(_integral), Field(gt=0, le=MAX_COUNT)]


class Sharing(_Sourced):
    """How many units share one fetch: 1 (each its own) up to a cluster's size."""

    value: Annotated[float, Field(ge=1, le=MAX_CLUSTER_UNITS, allow_inf_nan=False)]


class Exponent(_Sourced):
    """The power of a smooth max (p-norm) of two times: above 1 (their sum) up to a near-perfect overlap."""

    value: Annotated[float, Field(gt=1, le=MAX_OVERLAP_EXPONENT, allow_inf_nan=False)]


class Schedule(_Sourced):
    """A GEMM library's tile schedule (`core.vocab.MatrixSchedule`)."""

    value: Literal["data-parallel", "stream-k"]


class Ratio(_Sourced):
    """A coefficient of variation: 0 (no jitter) up to 1 (standard deviation = mean)."""

    value: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class Curve(_Sourced):
    """Efficiency vs a size: [[x, efficiency], ...], x > 0 strictly ascending, efficiency in (0, 1]."""

    value: Annotated[
        list[Annotated[list[float], Field(min_length=2, max_length=2)]],
        Field(min_length=2, max_length=MAX_CURVE_POINTS),
    ]

    @field_validator("value")
    @classmethod
    def _well_formed(cls, points: list[list[float]]) -> list[list[float]]:
        for index, (x, efficiency) in enumerate(points):
            if not (x > 0 and x < float("inf")):
                raise ValueError(f"point {index} has x = {x!r}; x must be a finite number > 0")
            if not (0 < efficiency <= 1):
                raise ValueError(f"point {index} has efficiency {efficiency!r}; it must be in (0, 1]")
            if index and x <= points[index - 1][0]:
                raise ValueError(f"point {index} has x = {x!r}, not above the previous x; sort the points by x")
        return points


MAX_EVIDENCE_CHARS = 1500  # one paragraph each: how the figures were obtained, how far they were checked


# Unicode categories a one-line plain paragraph may not hold: control characters (tabs, line breaks), format
# characters (bidirectional overrides that reorder what a reader sees) and line and paragraph separators
NOT_PLAIN_TEXT = ("Cc", "Cf", "Zl", "Zp")


def _plain_paragraph(text: str) -> str:
    """Evidence is one paragraph of plain text: words, not blank, no control or format characters, so every
    client shows it as it is written."""
    if not text.strip():
        raise ValueError("must say something (one paragraph of plain text)")
    if any(unicodedata.category(ch) in NOT_PLAIN_TEXT for ch in text):
        raise ValueError("must be one line of plain text, without tabs, line breaks or control characters")
    return text


PlainParagraph = Annotated[str, Field(min_length=1, max_length=MAX_EVIDENCE_CHARS), AfterValidator(_plain_paragraph)]


class Evidence(_Strict):
    """How a profile's figures were obtained and how far they were checked (shown with the profile)."""

    obtained: PlainParagraph
    checked: PlainParagraph


class Meta(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    display_name: Annotated[str, Field(min_length=1, max_length=200)]
    kind: Literal["gpu", "tpu", "cpu", "accelerator"]
    vendor: Annotated[str, Field(min_length=1, max_length=100)]
    evidence: Evidence | None = None  # optional: how the figures were obtained and how far they were checked


class Compute(_Strict):
    compute_units: Count
    clock_hz: Positive
    matrix_instruction_m: Count
    matrix_instruction_n: Count
    matrix_instruction_k: Count
    matrix_peak_flops_per_s: Annotated[dict[Dtype, Positive], Field(min_length=1)]
    vector_peak_flops_per_s: Annotated[dict[VectorDtype, Positive], Field(min_length=1)]
    sfu_peak_ops_per_s: Positive
    # 2:4 structured-sparsity peaks (optional): used only for weight GEMMs of a plan with sparsity=2:4,
    # never as a dense figure, so each must sit above the dense peak of its dtype.
    sparse_matrix_peak_flops_per_s: dict[Dtype, Positive] = {}
    # operand bytes a unit's SRAM delivers per clock: small tiles need more bytes per MAC and starve the matrix units
    sram_bytes_per_clock_per_unit: Positive
    threads_per_unit: Count | None = None  # resident threads per compute unit (GPU row kernels)
    # an NVIDIA GPU's compute capability (8.0 Ampere, 9.0 Hopper, 10.0 Blackwell): which kernels a runtime runs on it
    compute_capability: Positive | None = None
    # A GEMM whose row strides (K and N, in bytes) are not multiples of this leaves the fast matrix kernels
    # (Hopper's TMA needs 16-byte strides); absent: no alignment rule
    matrix_alignment_bytes: Count | None = None
    # how the GEMM library deals output tiles to the units; absent: data-parallel waves (wave quantization)
    matrix_schedule: Schedule | None = None

    @model_validator(mode="after")
    def _vector_has_fp32(self) -> Compute:
        if "fp32" not in self.vector_peak_flops_per_s:
            raise ValueError("vector_peak_flops_per_s needs an fp32 entry (the fallback for other dtypes)")
        for dtype, entry in self.sparse_matrix_peak_flops_per_s.items():
            dense = self.matrix_peak_flops_per_s.get(dtype)
            if dense is None or entry.value <= dense.value:
                raise ValueError(
                    f"sparse_matrix_peak_flops_per_s.{dtype} needs a dense matrix peak below it"
                    " (a sparse figure is never a dense one)"
                )
        return self


class Memory(_Strict):
    sram_per_unit_bytes: Count
    l2_bytes: Count
    l2_bandwidth_bytes_per_s: Positive
    dram_bytes: Count
    dram_bandwidth_bytes_per_s: Positive
    # units that share one fetch of an operand panel from L2 (Hopper's TMA multicast to a CTA cluster); 1: none
    l2_cluster_sharing: Sharing
    dram_latency_s: Positive | None = None  # one DRAM load's latency under load (GPU row kernels)


class Overhead(_Strict):
    kernel_launch_s: NonNegative
    grid_sync_s: NonNegative
    host_op_s: NonNegative
    graph_launch_s: NonNegative | None = None  # per-kernel cost under graph replay (--launch graph)
    # a decode attention kernel's fixed latency beyond its launch (its prologue and first dependent loads), and the
    # unit time each of its work items' own prologue and epilogue holds (GPU fused attention); None: not given
    paged_decode_s: NonNegative | None = None
    paged_decode_item_s: NonNegative | None = None
    # the unit time a masked multi-head attention item (one sequence's query head, CUDA cores) holds: TensorRT-LLM's
    # decode kernel for multi-head attention and the query-head groups its XQA kernel does not take
    masked_mha_item_s: NonNegative | None = None
    # a GEMM's least time past its launch: a fixed part and a serial main loop over K, K capped where the library
    # splits K across units (GPU GEMMs); absent: none
    gemm_floor_s: NonNegative | None = None
    gemm_k_latency_s: NonNegative | None = None
    gemm_serial_k: Count | None = None

    @model_validator(mode="after")
    def _below_a_second(self) -> Overhead:
        for key in (
            "kernel_launch_s", "grid_sync_s", "host_op_s", "graph_launch_s", "paged_decode_s",
            "paged_decode_item_s", "masked_mha_item_s", "gemm_floor_s", "gemm_k_latency_s",
        ):  # fmt: skip
            if getattr(self, key) is not None and getattr(self, key).value >= 1.0:
                raise ValueError(
                    f"{key} = {getattr(self, key).value} s is not a per-kernel overhead; give seconds (e.g. 3e-6)"
                )
        return self


class Power(_Strict):
    tdp_w: Positive
    idle_w: NonNegative
    energy_per_flop_j: Annotated[dict[Dtype, Positive], Field(min_length=1)]
    energy_per_dram_byte_j: Positive
    energy_per_l2_byte_j: Positive
    # how long a load runs at the full clock before the board's power controller pulls the clock down to the cap
    cap_response_s: Positive | None = None


class Interconnect(_Strict):
    link_bandwidth_bytes_per_s: NonNegative
    latency_s: NonNegative
    topology: Literal["nvswitch", "ring", "torus2d", "pcie", "mesh", "none"]
    max_devices: Count

    @model_validator(mode="after")
    def _consistent(self) -> Interconnect:
        if self.max_devices.value > 1 and (self.topology == "none" or self.link_bandwidth_bytes_per_s.value == 0):
            raise ValueError("max_devices > 1 needs a topology other than 'none' and a link bandwidth > 0")
        return self


OpType = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]


class OpScale(_Sourced):
    """How much slower (> 1) or faster (< 1) than the roofline model an op runs on this device's
    software stack (e.g. a runtime's naive LRN); fitted by `mapper calibrate`."""

    value: Annotated[float, Field(ge=0.01, le=1000.0, allow_inf_nan=False)]


class Share(_Sourced):
    """A share of a rate a slower path keeps: above 0, at most 1."""

    value: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class Efficiency(_Strict):
    matrix_by_flops: Curve
    vector_by_bytes: Curve
    dram_by_bytes: Curve
    # a matrix kernel's own DRAM stream by its bytes (skinny GEMMs stream weights through few tiles); absent:
    # dram_by_bytes
    matrix_dram_by_bytes: Curve | None = None
    # the share of the link bandwidth an all-reduce's bandwidth term reaches, by message bytes; absent: all of it
    all_reduce_by_bytes: Curve | None = None
    # the power of the smooth max of a kernel's compute and memory time: how well its loads hide behind its math
    overlap_exponent: Exponent
    unaligned_matrix: Share | None = None  # the matrix rate an unaligned GEMM keeps (compute.matrix_alignment_bytes)
    unaligned_dram: Share | None = None  # the DRAM efficiency a memory-bound unaligned GEMM keeps
    op_time_scale: Annotated[dict[OpType, OpScale], Field(max_length=256)] = {}


class Layout(_Strict):
    preferred_conv_layout: Literal["nhwc", "nchw"]


class Serving(_Strict):
    jitter_cv: Ratio
    jitter_dist: Literal["lognormal"]


class ProfileModel(_Strict):
    meta: Meta
    compute: Compute
    memory: Memory
    overhead: Overhead
    power: Power
    interconnect: Interconnect
    efficiency: Efficiency
    layout: Layout
    serving: Serving

    @model_validator(mode="after")
    def _cross_checks(self) -> ProfileModel:
        if self.power.idle_w.value >= self.power.tdp_w.value:
            raise ValueError("power.idle_w must be below power.tdp_w")
        needed = set(self.compute.matrix_peak_flops_per_s) | set(self.compute.vector_peak_flops_per_s)
        missing = sorted(needed - set(self.power.energy_per_flop_j))
        if missing:
            raise ValueError(
                f"power.energy_per_flop_j lacks {', '.join(missing)}: every dtype with a peak needs an energy per FLOP"
            )
        alignment = (
            self.compute.matrix_alignment_bytes,
            self.efficiency.unaligned_matrix,
            self.efficiency.unaligned_dram,
        )
        if any(a is not None for a in alignment) and not all(a is not None for a in alignment):
            raise ValueError(
                "compute.matrix_alignment_bytes, efficiency.unaligned_matrix and efficiency.unaligned_dram go"
                " together: give all three (the alignment and what an unaligned GEMM keeps) or none"
            )
        return self


# ---- pydantic error -> one actionable line -------------------------------------------------


def validate_profile_dict(data: Any, label: str) -> ProfileModel:
    """Validate a parsed profile; raise one MapperError line naming the first bad field."""
    if not isinstance(data, dict):
        raise MapperError(
            f"{label}: the top level must be a table of sections ({README_HINT}), got {type(data).__name__}"
        )
    try:
        return ProfileModel.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        fields: dict[str, str] = {}
        for error in errors:
            fields.setdefault(field_path(tuple(error["loc"])), describe_error(error))
        raise ProfileError(f"{label}: {describe_error(errors[0])}{more}", fields) from None
