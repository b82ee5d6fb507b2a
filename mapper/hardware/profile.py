"""Hardware profiles: the frozen HardwareProfile a device description becomes, and its tree form (TOML shape).

The first input of the pipeline beside the graph. Profiles are TOML files in data/hardware/ with units
in key names and a source for every number; `hardware_schema` validates them once, here they become
SI-unit dataclasses that tiling, cost and power read. Nothing downstream re-parses a profile.
`mapper.hardware.load` finds and reads profiles.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.vocab import MatrixSchedule
from mapper.hardware.schema import DTYPES

__all__ = ["EfficiencyCurve", "Interconnect", "HardwareProfile", "ProfileEvidence"]

# ONNX element-type names (mapper.core.graph.DTYPE_BYTES keys) and common spellings -> profile dtype keys.
DTYPE_ALIASES: dict[str, str] = {
    "float": "fp32",
    "float32": "fp32",
    "single": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "float8e4m3fn": "fp8",
    "float8e4m3fnuz": "fp8",
    "float8e5m2": "fp8",
    "float8e5m2fnuz": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "uint8": "int8",
    "uint4": "int4",
}


def canonical_dtype(dtype: str) -> str:
    """'bfloat16' -> 'bf16'; profile keys pass through unchanged."""
    key = str(dtype).strip().lower()
    return DTYPE_ALIASES.get(key, key)


@dataclass(frozen=True, slots=True)
class EfficiencyCurve:
    """Achieved fraction of a peak vs a size (FLOPs or bytes): linear in efficiency vs log10(x), clamped at the ends."""

    points: tuple[tuple[float, float], ...]  # ascending x, efficiency in (0, 1]

    def at(self, x: float) -> float:
        """One size: the same interpolation as at_array, without numpy's per-call overhead."""
        lx = math.log10(max(float(x), 1e-300))
        points = self.points
        if lx <= math.log10(points[0][0]):
            return float(points[0][1])
        for (x0, e0), (x1, e1) in itertools.pairwise(points):
            l1 = math.log10(x1)
            if lx <= l1:
                l0 = math.log10(x0)
                return float(e0 + (e1 - e0) * (lx - l0) / (l1 - l0))
        return float(points[-1][1])

    def at_array(self, x: np.ndarray) -> np.ndarray:
        xs = np.log10(np.asarray([p[0] for p in self.points], dtype=float))
        effs = np.asarray([p[1] for p in self.points], dtype=float)
        # Sizes of 0 (empty kernels) clamp to the smallest point instead of log10(0) = -inf.
        safe = np.maximum(np.asarray(x, dtype=float), np.finfo(float).tiny)
        return np.interp(np.log10(safe), xs, effs)


@dataclass(frozen=True, slots=True)
class Interconnect:
    link_bandwidth_bytes_per_s: float  # per device, per direction
    latency_s: float
    topology: str  # nvswitch | ring | torus2d | pcie | mesh | none
    max_devices: int


@dataclass(frozen=True, slots=True)
class ProfileEvidence:
    """How a profile's figures were obtained and how far they were checked: plain text, one paragraph each."""

    obtained: str
    checked: str


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    name: str
    display_name: str
    kind: str
    vendor: str
    compute_units: int
    clock_hz: float
    matrix_peak_flops_per_s: dict[str, float]  # dense
    sparse_matrix_peak_flops_per_s: dict[str, float]  # 2:4 structured sparsity (weight GEMMs with sparsity=2:4)
    vector_peak_flops_per_s: dict[str, float]
    sfu_peak_ops_per_s: float
    matrix_instruction_mnk: tuple[int, int, int]
    sram_per_unit_bytes: int
    l2_bytes: int
    l2_bandwidth_bytes_per_s: float
    dram_bytes: int
    dram_bandwidth_bytes_per_s: float
    kernel_launch_s: float
    grid_sync_s: float
    host_op_s: float
    tdp_w: float
    idle_w: float
    energy_per_flop_j: dict[str, float]
    energy_per_dram_byte_j: float
    energy_per_l2_byte_j: float
    interconnect: Interconnect
    matrix_efficiency: EfficiencyCurve
    vector_efficiency: EfficiencyCurve
    dram_efficiency: EfficiencyCurve
    op_time_scale: dict[str, float]  # op type -> time multiplier on its kernels' work (fitted by calibrate)
    preferred_conv_layout: str
    jitter_cv: float
    jitter_dist: str
    sram_bytes_per_clock_per_unit: float  # operand bytes a unit's SRAM delivers per clock (tile operand delivery)
    l2_cluster_sharing: float  # units sharing one L2 fetch of an operand panel (TMA multicast); 1: none
    overlap_exponent: float  # the smooth max's power: how well a kernel's memory time hides behind its compute
    sources: dict[str, str]
    sha256: str
    graph_launch_s: float | None = None  # per-kernel cost under graph replay (CUDA graphs); None: not given
    dram_latency_s: float | None = None  # one DRAM load's latency under load (row kernels); None: not given
    threads_per_unit: int | None = None  # resident threads per compute unit (row kernels); None: not given
    compute_capability: float | None = None  # an NVIDIA GPU's (9.0: Hopper): which kernels a runtime picks on it
    paged_decode_s: float | None = None  # a decode attention kernel's fixed latency past its launch; None: 0
    paged_decode_item_s: float | None = None  # unit time a decode attention work item's own fixed work holds
    masked_mha_item_s: float | None = None  # the same for a masked multi-head attention item; None: no such kernel
    gemm_floor_s: float | None = None  # a GEMM's least time past its launch, fixed part; None: no floor
    matrix_schedule: MatrixSchedule | None = None  # how the GEMM library deals output tiles; None: data-parallel
    cap_response_s: float | None = None  # a load's time at the full clock before the cap's clock drop; None: not given
    gemm_k_latency_s: float | None = None  # the floor's serial main loop, per element of K
    gemm_serial_k: int | None = None  # K past which the library splits K (the loop stops growing)
    matrix_dram_efficiency: EfficiencyCurve | None = None  # a matrix kernel's DRAM stream; None: dram_efficiency
    all_reduce_efficiency: EfficiencyCurve | None = None  # an all-reduce's share of the link bandwidth; None: 1
    matrix_alignment_bytes: int | None = None  # GEMM row strides the fast kernels need; None: no alignment rule
    unaligned_matrix: float | None = None  # the matrix rate an unaligned GEMM keeps
    unaligned_dram: float | None = None  # the DRAM efficiency a memory-bound unaligned GEMM keeps
    evidence: ProfileEvidence | None = None  # how the figures were obtained and checked; None: not said
    builtin: bool = field(default=False, compare=False)  # read from data/hardware by its name, unedited

    def __hash__(self) -> int:  # dict fields are unhashable; the content hash identifies a profile
        return hash((self.name, self.sha256))

    def has_matrix_peak(self, dtype: str) -> bool:
        """Whether `matrix_peak(dtype)` has a figure (fp32 always does: the vector units')."""
        key = canonical_dtype(dtype)
        return key == "fp32" or key in self.matrix_peak_flops_per_s

    def matrix_dtypes(self) -> str:
        """The dtypes the profile has a matrix peak for, in the schema's order ("fp32, tf32, bf16 ...")."""
        return ", ".join(sorted(self.matrix_peak_flops_per_s, key=DTYPES.index))

    def matrix_peak(self, dtype: str) -> float:
        """Dense matrix-engine peak in FLOP/s.

        fp32 without a matrix entry runs on the vector units (vector fp32 peak)."""
        key = canonical_dtype(dtype)
        if key in self.matrix_peak_flops_per_s:
            return self.matrix_peak_flops_per_s[key]
        if key == "fp32":
            return self.vector_peak_flops_per_s["fp32"]
        raise MapperError(
            f"hardware {self.name}: no matrix peak for dtype '{dtype}'; it supports {self.matrix_dtypes()};"
            " choose one of those or another device"
        )

    def sparse_matrix_peak(self, dtype: str) -> float:
        """2:4 structured-sparsity matrix peak in FLOP/s (counting the skipped zeros, as vendors quote it)."""
        key = canonical_dtype(dtype)
        if key not in self.sparse_matrix_peak_flops_per_s:
            has = ", ".join(sorted(self.sparse_matrix_peak_flops_per_s, key=DTYPES.index)) or "none"
            raise MapperError(
                f"hardware {self.name}: no 2:4 sparse matrix peak for dtype {dtype!r} (it has: {has});"
                " use sparsity=dense, another dtype or another device"
            )
        return self.sparse_matrix_peak_flops_per_s[key]

    def vector_peak(self, dtype: str) -> float:
        """Vector (SIMD) peak in FLOP/s; a dtype without its own figure uses the fp32 figure (conservative)."""
        return self.vector_peak_flops_per_s.get(canonical_dtype(dtype), self.vector_peak_flops_per_s["fp32"])

    @property
    def matrix_dram_curve(self) -> EfficiencyCurve:
        """The DRAM efficiency of matrix kernels' own streams: the matrix curve where the profile gives one,
        else the DRAM curve every kernel reads."""
        return self.matrix_dram_efficiency or self.dram_efficiency

    def ridge_point(self, dtype: str) -> float:
        """FLOP per DRAM byte at which the matrix engine and DRAM take equal time (roofline ridge)."""
        return self.matrix_peak(dtype) / self.dram_bandwidth_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        """The TOML-shaped nested dict (values + sources) that load_hardware accepts back."""
        return profile_tree(self)


# ---- the one table between TOML keys and dataclass fields --------------------------------------
# (dotted TOML key, dataclass attribute, python type). Used both to build and to write back.
_STRINGS = (
    ("meta.name", "name"),
    ("meta.display_name", "display_name"),
    ("meta.kind", "kind"),
    ("meta.vendor", "vendor"),
    ("interconnect.topology", "interconnect.topology"),
    ("layout.preferred_conv_layout", "preferred_conv_layout"),
    ("serving.jitter_dist", "jitter_dist"),
)
_NUMBERS = (
    ("compute.compute_units", "compute_units", int),
    ("compute.clock_hz", "clock_hz", float),
    ("compute.matrix_instruction_m", "matrix_instruction_mnk.0", int),
    ("compute.matrix_instruction_n", "matrix_instruction_mnk.1", int),
    ("compute.matrix_instruction_k", "matrix_instruction_mnk.2", int),
    ("compute.sfu_peak_ops_per_s", "sfu_peak_ops_per_s", float),
    ("memory.sram_per_unit_bytes", "sram_per_unit_bytes", int),
    ("memory.l2_bytes", "l2_bytes", int),
    ("memory.l2_bandwidth_bytes_per_s", "l2_bandwidth_bytes_per_s", float),
    ("memory.dram_bytes", "dram_bytes", int),
    ("memory.dram_bandwidth_bytes_per_s", "dram_bandwidth_bytes_per_s", float),
    ("overhead.kernel_launch_s", "kernel_launch_s", float),
    ("overhead.grid_sync_s", "grid_sync_s", float),
    ("overhead.host_op_s", "host_op_s", float),
    ("power.tdp_w", "tdp_w", float),
    ("power.idle_w", "idle_w", float),
    ("power.energy_per_dram_byte_j", "energy_per_dram_byte_j", float),
    ("power.energy_per_l2_byte_j", "energy_per_l2_byte_j", float),
    ("interconnect.link_bandwidth_bytes_per_s", "interconnect.link_bandwidth_bytes_per_s", float),
    ("interconnect.latency_s", "interconnect.latency_s", float),
    ("interconnect.max_devices", "interconnect.max_devices", int),
    ("serving.jitter_cv", "jitter_cv", float),
    ("compute.sram_bytes_per_clock_per_unit", "sram_bytes_per_clock_per_unit", float),
    ("memory.l2_cluster_sharing", "l2_cluster_sharing", float),
    ("efficiency.overlap_exponent", "overlap_exponent", float),
)
_PER_DTYPE = (
    ("compute.matrix_peak_flops_per_s", "matrix_peak_flops_per_s"),
    ("compute.vector_peak_flops_per_s", "vector_peak_flops_per_s"),
    ("power.energy_per_flop_j", "energy_per_flop_j"),
)
# Per-dtype tables a profile may leave out: absent ones are not written back (the hash stays the file's).
_OPTIONAL_PER_DTYPE = (("compute.sparse_matrix_peak_flops_per_s", "sparse_matrix_peak_flops_per_s"),)
_CURVES = (
    ("efficiency.matrix_by_flops", "matrix_efficiency"),
    ("efficiency.vector_by_bytes", "vector_efficiency"),
    ("efficiency.dram_by_bytes", "dram_efficiency"),
)
_OPTIONAL: tuple[
    tuple[str, str, Callable[[Any], Any]], ...
] = (  # (key, attribute, type): what a profile may leave out (None then)
    ("overhead.graph_launch_s", "graph_launch_s", float),
    ("memory.dram_latency_s", "dram_latency_s", float),
    ("compute.threads_per_unit", "threads_per_unit", int),
    ("compute.compute_capability", "compute_capability", float),
    ("overhead.paged_decode_s", "paged_decode_s", float),
    ("overhead.paged_decode_item_s", "paged_decode_item_s", float),
    ("overhead.masked_mha_item_s", "masked_mha_item_s", float),
    ("overhead.gemm_floor_s", "gemm_floor_s", float),
    ("overhead.gemm_k_latency_s", "gemm_k_latency_s", float),
    ("overhead.gemm_serial_k", "gemm_serial_k", int),
    ("compute.matrix_alignment_bytes", "matrix_alignment_bytes", int),
    ("efficiency.unaligned_matrix", "unaligned_matrix", float),
    ("efficiency.unaligned_dram", "unaligned_dram", float),
    ("power.cap_response_s", "cap_response_s", float),
    ("compute.matrix_schedule", "matrix_schedule", MatrixSchedule),
)
_OPTIONAL_CURVES = (  # absent: None
    ("efficiency.matrix_dram_by_bytes", "matrix_dram_efficiency"),
    ("efficiency.all_reduce_by_bytes", "all_reduce_efficiency"),
)


def tree_get(tree: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def _put(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def _attr(profile: HardwareProfile, dotted: str) -> Any:
    value: Any = profile
    for part in dotted.split("."):
        value = value[int(part)] if part.isdigit() else getattr(value, part)
    return value


def build_profile(tree: dict[str, Any]) -> HardwareProfile:
    """Validated TOML-shaped dict -> HardwareProfile (SI units, converted once)."""
    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, attr in _STRINGS:
        fields[attr] = tree_get(tree, key)
    for key, attr, kind in _NUMBERS:
        entry = tree_get(tree, key)
        fields[attr] = kind(entry["value"])
        sources[key] = entry["source"]
    for key, attr in _PER_DTYPE + _OPTIONAL_PER_DTYPE:
        present = _optional(tree, key)
        table = {dtype: present[dtype] for dtype in DTYPES if dtype in present}
        fields[attr] = {dtype: float(entry["value"]) for dtype, entry in table.items()}
        sources.update({f"{key}.{dtype}": entry["source"] for dtype, entry in table.items()})
    for key, attr in _CURVES + _OPTIONAL_CURVES:  # the schema has checked that the required ones are there
        section, leaf = key.split(".")
        if (entry := tree_get(tree, section).get(leaf)) is not None:
            fields[attr] = EfficiencyCurve(tuple((float(x), float(e)) for x, e in entry["value"]))
            sources[key] = entry["source"]
    scales = tree_get(tree, "efficiency").get("op_time_scale", {})
    fields["op_time_scale"] = {op: float(entry["value"]) for op, entry in scales.items()}
    sources.update({f"efficiency.op_time_scale.{op}": entry["source"] for op, entry in scales.items()})
    for key, attr, read in _OPTIONAL:  # absent from profiles that do not give them
        section, leaf = key.split(".")
        if (entry := tree_get(tree, section).get(leaf)) is not None:
            fields[attr], sources[key] = read(entry["value"]), entry["source"]
    fields["matrix_instruction_mnk"] = tuple(fields.pop(f"matrix_instruction_mnk.{i}") for i in range(3))
    fields["interconnect"] = Interconnect(
        **{
            name: fields.pop(f"interconnect.{name}")
            for name in ("link_bandwidth_bytes_per_s", "latency_s", "topology", "max_devices")
        }
    )
    if (evidence := tree_get(tree, "meta").get("evidence")) is not None:
        fields["evidence"] = ProfileEvidence(evidence["obtained"], evidence["checked"])
    draft = HardwareProfile(**fields, sources=sources, sha256="")
    hashed = profile_tree(draft)
    # The hash is the figures and their sources: a profile's evidence note says how far they were checked and
    # grows as checks are done, without changing a figure or the mappings recorded against them
    hashed["meta"].pop("evidence", None)
    digest = hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return HardwareProfile(**{**fields, "sources": sources, "sha256": digest})


def _optional(tree: dict[str, Any], dotted: str) -> dict[str, Any]:
    parent, _, leaf = dotted.rpartition(".")
    return tree_get(tree, parent).get(leaf) or {}


def profile_tree(profile: HardwareProfile) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, attr in _STRINGS:
        _put(tree, key, _attr(profile, attr))
    if profile.evidence is not None:
        _put(tree, "meta.evidence", {"obtained": profile.evidence.obtained, "checked": profile.evidence.checked})
    for key, attr, _kind in _NUMBERS:
        _put(tree, key, {"value": _attr(profile, attr), "source": profile.sources[key]})
    for key, attr in _PER_DTYPE + tuple(o for o in _OPTIONAL_PER_DTYPE if getattr(profile, o[1])):
        _put(
            tree,
            key,
            {
                dtype: {"value": value, "source": profile.sources[f"{key}.{dtype}"]}
                for dtype, value in getattr(profile, attr).items()
            },
        )
    for key, attr in _CURVES + _OPTIONAL_CURVES:
        if (curve := getattr(profile, attr)) is not None:
            _put(tree, key, {"value": [[x, e] for x, e in curve.points], "source": profile.sources[key]})
    for key, attr, _read in _OPTIONAL:
        if getattr(profile, attr) is not None:
            _put(tree, key, {"value": getattr(profile, attr), "source": profile.sources[key]})
    if profile.op_time_scale:  # optional: absent from a profile until calibration finds an op that needs it
        _put(
            tree,
            "efficiency.op_time_scale",
            {
                op: {"value": value, "source": profile.sources[f"efficiency.op_time_scale.{op}"]}
                for op, value in profile.op_time_scale.items()
            },
        )
    return tree
