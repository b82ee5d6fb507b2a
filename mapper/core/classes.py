"""The bottleneck classes and the owners a review assigns work to: one vocabulary for predicted and
measured classes, and one table row per class (owner, bounded fix). The rules that pick a class for a
kernel are the cost stage's (`bottleneck.RULES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Owner(StrEnum):
    """The four owners a review assigns work to (docs/manual.md, "The review meeting")."""

    ML_COMPILER = "ML compiler engineer"
    RUNTIME = "runtime systems engineer"
    PERFORMANCE_MODELING = "performance modeling owner"
    FRAMEWORK = "framework integration lead"


OWNERS = tuple(str(o) for o in Owner)  # who a review's fix may name (`--owner`, the Review page's choice)


class CandidateKind(StrEnum):
    """`Candidate.kind`: what a review's candidate fix changes."""

    PLAN = "plan"  # plan options on the frozen slice
    SERVING = "serving"  # how the same plan is served (speculative decoding, disaggregated pools)
    SLICE = "slice"  # the slice itself (a larger batch): offered, never chosen on the slice's own KPI


class TargetKind(StrEnum):
    """`first_slice.Target.kind`: the KPI target a first-slice search holds a slice to."""

    P99 = "p99"  # unloaded p99 latency at most the value (seconds)
    MFU = "mfu"  # MFU at least the value
    FIT = "fit"  # the model fits the devices' memory


class Bottleneck(StrEnum):
    """One vocabulary for predicted and measured classes (the table below); the value is the label people read."""

    COMPUTE_MATRIX = "compute-bound (matrix)"
    COMPUTE_VECTOR = "compute-bound (vector/SFU)"
    MEMORY = "memory-bound"
    OCCUPANCY = "occupancy / wave quantization"
    ALIGNMENT = "unaligned leading dimension"
    LAUNCH = "launch / latency-bound"
    SYNCHRONIZATION = "synchronization"
    INTERCONNECT = "interconnect"
    HOST = "host / unsupported"
    NOT_MEASURED = "not measured"  # a measured class only: the run gave the kernel group no time of its own


@dataclass(frozen=True, slots=True)
class BottleneckClass:
    """A class's row: who acts on it and the bounded fix the review starts from."""

    owner: Owner
    fix: str


# keyed by Bottleneck, a str: a label read back from a document looks its row up as it is (`fix_of`)
CLASSES: dict[str, BottleneckClass] = {
    Bottleneck.COMPUTE_MATRIX: BottleneckClass(Owner.ML_COMPILER, "lower precision or a better tile"),
    Bottleneck.COMPUTE_VECTOR: BottleneckClass(Owner.ML_COMPILER, "fuse it, or use a cheaper approximation"),
    Bottleneck.MEMORY: BottleneckClass(Owner.ML_COMPILER, "fuse it, change layout, or quantize weights"),
    Bottleneck.OCCUPANCY: BottleneckClass(Owner.ML_COMPILER, "split-K, retile, or a larger batch"),
    Bottleneck.ALIGNMENT: BottleneckClass(
        Owner.ML_COMPILER,
        "pad K and N to a multiple of 16 bytes: a vocabulary of 50257 to 50304, or the compiler's shape padding",
    ),
    Bottleneck.LAUNCH: BottleneckClass(Owner.RUNTIME, "fuse kernels or capture a CUDA graph"),
    Bottleneck.SYNCHRONIZATION: BottleneckClass(Owner.RUNTIME, "a one-pass algorithm"),
    Bottleneck.INTERCONNECT: BottleneckClass(Owner.RUNTIME, "overlap the collective or shard differently"),
    Bottleneck.HOST: BottleneckClass(Owner.FRAMEWORK, "write a device kernel or rewrite the graph"),
    Bottleneck.NOT_MEASURED: BottleneckClass(Owner.PERFORMANCE_MODELING, "profile a run that times the kernel"),
}


def owner_of(bottleneck: str) -> str:
    return CLASSES[Bottleneck(bottleneck)].owner


def fix_of(bottleneck: str) -> str:
    """The class's bounded fix; "" for a label outside the vocabulary."""
    row = CLASSES.get(bottleneck)
    return row.fix if row else ""
