"""The plan's precision: element sizes, the model's released precision, and the bytes of a tensor under a plan.

Part of the plan stage. `Sizer` sizes a tensor as the plan stores it: floating-point activations at the plan
dtype, weights at the weight dtype, the KV cache at its own (`--kv-dtype`); integer tensors (token ids, indices)
and a QDQ model's stored integer weights keep their own size. The block-scaled formats (`SCALED_FORMATS`: NVFP4,
MXFP8/6/4) count each element's share of its block's scale in its bytes. `released_precision` is what
`--dtype auto` maps at; `precision_caveats` the quality caveats a plan's precision brings against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.core.caches import ModelCaches
from mapper.core.errors import MapperError
from mapper.core.graph import FILE_TENSORS, Graph, ReleasedPrecision, TensorSpec, tensor_bytes
from mapper.core.vocab import KvDtype, PlanDtype, WeightDtype

BITS_PER_BYTE = 8
OCP_MX = (
    "OCP Microscaling Formats (MX) Specification v1.0 (Open Compute Project, September 2023), its table of"
    " concrete MX-compliant formats: blocks of 32 elements share one E8M0 (8-bit power-of-two) scale"
)
NVFP4_SOURCE = (
    "NVIDIA, 'Introducing NVFP4 for Efficient and Accurate Low-Precision Inference' (NVIDIA Technical Blog, June"
    " 2025) and the cuBLAS documentation's block-scaling section: E2M1 elements, one FP8 E4M3 scale per 16"
    " elements and one FP32 scale per tensor (4 bytes a tensor, not counted)"
)


@dataclass(frozen=True, slots=True)
class ScaledFormat:
    """A block-scaled float format: `element_bits`-bit elements, each block of `block_elements` sharing one
    `scale_bits`-bit scale, so an element takes element_bits/8 + scale_bits/8/block_elements bytes."""

    element_bits: int
    block_elements: int
    scale_bits: int
    elements: str  # the element type(s)
    scale: str  # the block scale's type
    source: str

    @property
    def bytes_per_element(self) -> float:
        """An element's bytes with its share of the block's scale (exact: every figure is a power of two)."""
        return (self.element_bits + self.scale_bits / self.block_elements) / BITS_PER_BYTE


# The block-scaled (microscaling) formats: one row each, keyed by PlanDtype (WeightDtype's and KvDtype's
# members of the same text look theirs up too). Each computes at its own matrix peak, which only some profiles
# give (B200: all four); weights or a KV cache stored in one need that peak too.
SCALED_FORMATS: dict[str, ScaledFormat] = {
    PlanDtype.NVFP4: ScaledFormat(4, 16, 8, "E2M1", "FP8 E4M3", NVFP4_SOURCE),
    PlanDtype.MXFP8: ScaledFormat(8, 32, 8, "E4M3 or E5M2", "E8M0", OCP_MX),
    PlanDtype.MXFP6: ScaledFormat(6, 32, 8, "E2M3 or E3M2", "E8M0", OCP_MX),
    PlanDtype.MXFP4: ScaledFormat(4, 32, 8, "E2M1", "E8M0", OCP_MX),
}
SUB_BYTE_FLOATS = frozenset(f for f, s in SCALED_FORMATS.items() if s.element_bits < BITS_PER_BYTE)

# keyed by PlanDtype, a str: a plan's dtype as given looks its size up as it is
PLAN_DTYPE_BYTES: dict[str, float] = {
    PlanDtype.FP32: 4.0,
    PlanDtype.TF32: 4.0,
    PlanDtype.BF16: 2.0,
    PlanDtype.FP16: 2.0,
    PlanDtype.FP8: 1.0,
    PlanDtype.INT8: 1.0,
    PlanDtype.INT4: 0.5,
    **{dtype: f.bytes_per_element for dtype, f in SCALED_FORMATS.items()},
}
MODEL_DTYPES = {
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "double": "fp32",
    "float8e4m3fn": "fp8",
    "int8": "int8",
    "uint8": "int8",
}
FLOAT_TYPES = frozenset({"float32", "float", "float16", "bfloat16", "double", "float8e4m3fn", "float8e5m2"})
PRECISION_RANK = {
    "fp32": 5, "tf32": 4, "bf16": 3, "fp16": 3, "fp8": 1, "int8": 1, "mxfp8": 1,
    "int4": 0, "mxfp6": 0, "nvfp4": 0, "mxfp4": 0,
}  # fmt: skip
# Where a device has no matrix peak at the model's own precision, `--dtype auto` takes the first of these
# it has (fp32 always: the vector units'): the same width first, then wider.
WIDER_PRECISIONS = {
    "fp16": ("bf16", "fp32"),
    "bf16": ("fp16", "fp32"),
    "int8": ("fp16", "bf16", "fp32"),
    "fp8": ("fp16", "bf16", "fp32"),
}


# Ops that unpack low-bit weights and compute at the activations' float type (int4 LLM weights):
# their packed uint8 weights do not make the model an int8 one.
WEIGHT_ONLY_QUANTIZED_OPS = frozenset({"MatMulNBits", "GatherBlockQuantized"})
EIGHT_BIT_INTS = frozenset({"int8", "uint8"})


def weight_tally(graph: Graph, caches: ModelCaches | None = None) -> tuple[dict[str, int], float, int]:
    """(float weight elements per element type, bytes of the other weights, elements of the 8-bit integer
    weights among those). With the model's `caches`, the weights whose specs are the model's (all but
    `Graph.derived_weights`) are tallied once per structure (read-only) and a binding adds the few it derives;
    the figures are whole numbers of elements and (half) bytes, so the sum is exact in any order."""
    derived = graph.derived_weights
    if caches is None or derived is None:
        return _tally(graph, graph.weights)
    fixed = caches.weight_tally(graph.structure, lambda: _tally(graph, graph.weights.difference(derived)))
    if not derived:
        return fixed
    return graph.derived("weight_tally", lambda g: _with_derived(g, derived, fixed))  # once a binding's graph


def _with_derived(graph: Graph, derived, fixed: tuple[dict[str, int], float, int]) -> tuple[dict[str, int], float, int]:
    """The structure's tally plus the weights this binding derives."""
    counts, other, eight_bit = _tally(graph, derived)
    for dtype, n in fixed[0].items():
        counts[dtype] = n + counts.get(dtype, 0)
    return counts, fixed[1] + other, fixed[2] + eight_bit


def _tally(graph: Graph, weights) -> tuple[dict[str, int], float, int]:
    counts: dict[str, int] = {}
    other, eight_bit = 0.0, 0
    # QDQ int8 weights make an int8 model only beside quantized activations; alone they are
    # weight-only quantization, computed at the activations' float type
    int8_compute = not graph.op_types.isdisjoint(("QuantizeLinear", "DynamicQuantizeLinear"))
    tensors, stored_dtypes = graph.tensors, graph.stored_dtypes  # read as columns: no spec a weight
    for w in weights:
        dtype, elements = tensors.dtype(w), math.prod(tensors.shape(w))
        stored = stored_dtypes.get(w)
        if stored is not None:  # a QDQ model's dequantized integer weight
            other += tensor_bytes(elements, stored)
            eight_bit += elements if int8_compute and stored in EIGHT_BIT_INTS else 0
        elif dtype in FLOAT_TYPES:
            counts[dtype] = counts.get(dtype, 0) + elements
        else:
            other += tensor_bytes(elements, dtype)
            if dtype in EIGHT_BIT_INTS and not all(
                graph.nodes[k].op_type in WEIGHT_ONLY_QUANTIZED_OPS for k in graph.consumers.get(w, ())
            ):
                eight_bit += elements
    return counts, other, eight_bit


def model_dtype(graph: Graph, caches: ModelCaches | None = None) -> str:
    """The model's own precision: the type that holds most weight elements, 8-bit integer weights (a
    QOperator-quantized model's) counted as int8 beside the float types."""
    counts, _, eight_bit = weight_tally(graph, caches)
    counts = counts | ({"int8": eight_bit} if eight_bit else {})
    if not counts:
        return "fp32"
    return MODEL_DTYPES.get(max(counts, key=counts.__getitem__), "fp32")


def released_precision(graph: Graph, caches: ModelCaches | None = None) -> ReleasedPrecision:
    """The precision the model is published in (what `--dtype auto` maps at): a built-in's or a config's
    (`Graph.released`), else a file's own weight tensors' (`model_dtype`)."""
    return graph.released or ReleasedPrecision(PlanDtype(model_dtype(graph, caches)), FILE_TENSORS)


class Sizer:
    """Bytes of a tensor under the plan's precision."""

    def __init__(
        self,
        graph: Graph,
        dtype: str,
        weight_dtype: str,
        caches: ModelCaches | None = None,
        kv_dtype: str = KvDtype.SAME,
        kv_tensors: frozenset[str] = frozenset(),
    ):
        if dtype not in PLAN_DTYPE_BYTES:
            raise MapperError(f"dtype {dtype!r} is not one of {', '.join(PLAN_DTYPE_BYTES)}")
        self.graph, self.caches = graph, caches
        self.act = PLAN_DTYPE_BYTES[dtype]
        self.weight = PLAN_DTYPE_BYTES[dtype if weight_dtype == WeightDtype.SAME else weight_dtype]
        # the KV cache (the past inputs and the present the update writes) at its own storage precision
        self.kv = PLAN_DTYPE_BYTES[dtype if kv_dtype == KvDtype.SAME else kv_dtype]
        self.kv_tensors = kv_tensors if self.kv != self.act else frozenset()

    @property
    def key(self) -> tuple[float, float, float]:
        """What a tensor's bytes depend on besides the tensor: the activation, weight and KV element sizes."""
        return (self.act, self.weight, self.kv)

    def weight_bytes(self) -> float:
        """All of the model's weights at the plan's weight precision."""
        counts, other, _ = weight_tally(self.graph, self.caches)
        return sum(counts.values()) * self.weight + other

    def bytes(self, spec: TensorSpec) -> float:
        return self._bytes(spec.name, spec.shape, spec.dtype)

    def bytes_of(self, name: str) -> float:
        """`bytes` of the graph's tensor `name`, read from its table's columns: what the size reads of the tensor
        besides the plan's element sizes is kept on the graph (`tensor_sizes`), so every plan mapped at one binding
        (a search's) reads each tensor once."""
        sizes = self.graph.derived("tensor_sizes", _no_sizes)
        found = sizes.get(name)
        if found is None:
            tensors = self.graph.tensors
            found = sizes[name] = _size_facts(self.graph, name, tensors.shape(name), tensors.dtype(name))
        return self._sized(name, found)

    def _bytes(self, name: str, shape: tuple[int, ...], dtype: str) -> float:
        return self._sized(name, _size_facts(self.graph, name, shape, dtype))

    def _sized(self, name: str, facts: tuple[int, float | None, bool]) -> float:
        """A tensor's bytes from its facts (`_size_facts`) at the plan's element sizes."""
        elements, fixed, weight = facts
        if fixed is not None:
            return fixed
        if weight:
            return elements * self.weight
        return elements * (self.kv if name in self.kv_tensors else self.act)


def _no_sizes(graph: Graph) -> dict[str, tuple[int, float | None, bool]]:
    return {}


def _size_facts(graph: Graph, name: str, shape: tuple[int, ...], dtype: str) -> tuple[int, float | None, bool]:
    """What a tensor's bytes read besides the plan's element sizes: (elements, its bytes where its stored or
    non-float type sets them, whether it is a weight)."""
    elements, stored = math.prod(shape), graph.stored_dtypes.get(name)
    if stored is not None or dtype not in FLOAT_TYPES:
        return elements, tensor_bytes(elements, stored or dtype), False
    return elements, None, name in graph.weights


# A plan's precision against the model's released one (rank below or above) -> its caveat; the same rank: none.
RANK_CAVEATS = {
    -1: "Runs at {dtype}, below the model's released {released} ({source}): accept it only with accuracy evidence"
    " on production data and a fallback plan at {released}.",
    1: "Runs at {dtype}, above the model's released {released} ({source}): memory and time are for {dtype} copies"
    " of {released} weights, which gain no accuracy; --dtype auto maps it as released.",
}


# A 4- or 6-bit float format in use (the plan's dtype, weights or KV cache) -> its caveat
SUB_BYTE_FLOAT_CAVEAT = (
    "{fmt} ({uses}): {bits}-bit floats ({elements}, one {scale} scale per {block}) lose accuracy without"
    " calibration (scales fitted on production data) or quantization-aware training, more than fp8 does: needs"
    " quality evidence (perplexity/accuracy against the unquantized model, with the sensitive layers kept wider)"
    " and a fallback at fp8 or the released precision; the estimate models its bytes and rate, not its accuracy."
)


def precision_caveats(
    released: ReleasedPrecision, dtype: str, weight_dtype: str, kv_dtype: str = KvDtype.SAME
) -> list[str]:
    """The quality caveats of a plan at `dtype` (and `weight_dtype`, `kv_dtype`) on a model published at
    `released`: below or above it, weight-only quantization, and each 4- or 6-bit float format it uses."""
    plan_rank, released_rank = PRECISION_RANK.get(dtype, 5), PRECISION_RANK.get(released.dtype, 5)
    caveat = RANK_CAVEATS.get((plan_rank > released_rank) - (plan_rank < released_rank))
    caveats = [caveat.format(dtype=dtype, released=released.dtype, source=released.source)] if caveat else []
    if weight_dtype != WeightDtype.SAME:
        caveats.append(
            f"Weight-only {weight_dtype} quantization: needs quality evidence (perplexity/accuracy)"
            " and a fallback to unquantized weights."
        )
    uses: dict[str, list[str]] = {}  # each format -> what it stores (weights or a cache in the plan's own: none)
    for fmt, use in ((dtype, "weights and activations"), (weight_dtype, "weights"), (kv_dtype, "KV cache")):
        if fmt in SUB_BYTE_FLOATS and (fmt != dtype or use == "weights and activations"):
            uses.setdefault(fmt, []).append(use)
    for fmt, named in uses.items():
        f = SCALED_FORMATS[fmt]
        caveats.append(
            SUB_BYTE_FLOAT_CAVEAT.format(
                fmt=fmt,
                uses=" and ".join(named),
                bits=f.element_bits,
                elements=f.elements,
                scale=f.scale,
                block=f.block_elements,
            )
        )
    return caveats
