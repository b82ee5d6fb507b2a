"""A fix's blast radius: which of the baseline's kernels a change touches, by the rule its candidate row names
(`CandidateRow.blast`: weight GEMMs, attention kernels, the kernels of one bottleneck class...). The review's
validation matrix and packet report it beside each candidate's gain."""

from __future__ import annotations

from mapper.core.classes import Bottleneck
from mapper.core.graph import LayerType
from mapper.core.vocab import Engine


def _touches(rule: str, k: dict) -> bool:
    weight_gemm = k["weight_bytes"] > 0 and any(op in ("MatMul", "Gemm", "Conv", "MatMulNBits") for op in k["ops"])
    return {
        "weight GEMMs": weight_gemm,
        "attention kernels": k["layer_type"] == LayerType.ATTENTION,
        "matrix kernels": k["engine"] == Engine.MATRIX,
        "vector kernels": k["engine"] in (Engine.VECTOR, Engine.SFU),
        "collectives": k["engine"] == Engine.INTERCONNECT,
        "memory-bound kernels": k["bottleneck"] == Bottleneck.MEMORY,
        "launch-bound kernels": k["bottleneck"] == Bottleneck.LAUNCH,
        "occupancy-bound kernels": k["bottleneck"] == Bottleneck.OCCUPANCY,
        "synchronization kernels": k["bottleneck"] == Bottleneck.SYNCHRONIZATION,
    }.get(rule, True)


def blast_radius(rule: str, doc: dict) -> tuple[int, tuple[str, ...]]:
    """The baseline kernels a change touches and their layer types."""
    hit = [k for k in doc["kernels"] if _touches(rule, k)]
    return len(hit), tuple(sorted({k["layer_type"] for k in hit}))
