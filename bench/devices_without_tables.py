"""Devices without measured tables: the engine against the published per-device points their profiles cite.

    .venv/bin/python -m bench.devices_without_tables [--markdown]

No AIConfigurator table covers the MI300X, Gaudi 2, TPU v5e or L4 profiles, so each is checked against the few
published measurements that can be read (docs/validation.md, "Devices without measured tables"). Each point says
how it relates to the profile, so fitted and unfitted points are never mixed: "fit" (a profile value was fitted
through the engine so that the engine gives the point back), "source" (a profile value was derived from the point
by arithmetic, not through the engine: the point checks the rest of the model, but is not independent of the
profile) or "floor" (held out, and a minimum, see below):

- `gemm`: the best shape of Maximum Achievable Matmul FLOPS (stas00/ml-engineering, compute/accelerator/README.md,
  "Maximum Achievable Matmul FLOPS comparison table", BF16 `torch.matmul` swept by mamf-finder.py; mean TFLOPS
  of the best shape found, software as listed). Mapped as one bf16 MatMul at that shape (graph launch where the
  profile gives one).
  The profiles' matrix asymptotes were derived from these figures divided by an assumed ~0.97 wave efficiency,
  not fitted through the engine ("source"): the engine's prediction at the same shape checks the tile and cache
  model.
- `all-reduce`: MI300X 8-GPU ring all-reduce bus bandwidth at a 1 GiB message, against the achievable xGMI
  figure (7 links x ~48 GB/s usable of 64 GB/s rated, ROCm blog "Understanding RCCL Bandwidth and xGMI
  Performance on AMD Instinct MI300X", 2025-03-02). The profile's link bandwidth is derived from that figure
  ("source"): the row shows the derivation holds through the alpha-beta formula, not that it was checked.
- `floor`: AMD's MI300X system-acceptance pass criteria (github.com/ROCm/system-acceptance-docs, docs/gpus/mi300x.md
  and docs/common/system-validation.md at c5f0a21, 2026-06-12): the least a healthy 8-GPU MI300X node must
  measure, so a measured value is at or above each. BabelStream (hip-stream -n 50 -s 268435456: 2^28 doubles an
  array, mapped as fp32 arrays of twice the elements, the same bytes), rccl-tests all_reduce_perf -g 8's
  in-place bus bandwidth at 8 GB (docs/common/rccl-benchmarking.md), rocBLAS GEMMs. The DRAM asymptote is fitted
  to the Copy floor ("fit"); the other floors are held out. Against a floor, a prediction below it (a negative
  error) is certainly too slow; one above it is consistent with it, by an amount the floor cannot tell.

Error = predicted / published - 1 (positive: the engine predicts faster than measured).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import mapper
from mapper.cost.collectives import collective_time
from mapper.evidence.microbench import kernel_model
from mapper.pipeline import load_workload

MAMF = "stas00/ml-engineering compute/accelerator/README.md, MAMF table"
RCCL_BLOG = "rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi (2025-03-02)"
ACCEPT = "ROCm/system-acceptance-docs docs/gpus/mi300x.md (c5f0a21), pass criteria"
GIB = 1 << 30
STREAM_ELEMENTS = 2 * 268435456  # BabelStream's -s 2^28 doubles an array, as fp32 elements of the same bytes


@dataclass(frozen=True, slots=True)
class Point:
    """One published figure: the device, what was measured, its value and where it is printed."""

    hw: str
    kind: str  # gemm | batched-gemm | all-reduce | stream-copy | stream-mul | stream-add | stream-triad
    shape: tuple[int, ...]  # gemm: (m, n, k); batched: (batch, m, n, k); all-reduce: (devices, bytes); stream: (n,)
    published: float  # gemm: TFLOP/s (TOP/s for int8); all-reduce: bus bandwidth GB/s; stream: GB/s
    software: str
    source: str
    role: str  # "fit": fitted through the engine; "source": a value derived from it by arithmetic; "floor": held
    # out, and a minimum a healthy device measures (AMD's acceptance criteria), not a typical value
    dtype: str = "bf16"  # the plan's dtype for a GEMM


POINTS = (
    Point("mi300x", "gemm", (4096, 4864, 10240), 781.9, "ROCm-6.2", MAMF, "source"),
    # this check found Gaudi 2's operand feed (see gaudi2.toml)
    Point("gaudi2", "gemm", (20224, 19968, 11520), 429.3, "Gaudi 1.15", MAMF, "source"),
    # the measured NVIDIA tables cover these devices; their MAMF rows are printed for scale, not as evidence
    Point("h100-sxm", "gemm", (6144, 2816, 17920), 792.1, "CUDA-12.1", MAMF, "source"),
    Point("a100-sxm-80gb", "gemm", (6912, 2048, 16384), 267.9, "CUDA-12.1", MAMF, "source"),
    Point("mi300x", "all-reduce", (8, GIB), 7 * 48.0, "RCCL (blog, 2025)", RCCL_BLOG, "source"),
    # AMD's acceptance floors (a healthy node measures at or above each)
    Point("mi300x", "stream-copy", (STREAM_ELEMENTS,), 4177.285, "BabelStream HIP", ACCEPT, "fit"),
    Point("mi300x", "stream-mul", (STREAM_ELEMENTS,), 4067.069, "BabelStream HIP", ACCEPT, "floor"),
    Point("mi300x", "stream-add", (STREAM_ELEMENTS,), 3920.853, "BabelStream HIP", ACCEPT, "floor"),
    Point("mi300x", "stream-triad", (STREAM_ELEMENTS,), 3885.301, "BabelStream HIP", ACCEPT, "floor"),
    Point("mi300x", "all-reduce", (8, 8 * GIB), 304.0, "rccl-tests", ACCEPT, "floor"),
    Point("mi300x", "batched-gemm", (5, 1024, 2048, 512), 130.6, "rocBLAS fp16", ACCEPT, "floor"),
    Point("mi300x", "batched-gemm", (5, 1024, 2048, 512), 162.7, "rocBLAS int8", ACCEPT, "floor", "int8"),
    Point("mi300x", "gemm", (4000, 4000, 4000), 94.1, "rocBLAS fp32", ACCEPT, "floor", "fp32"),
)
ELEM = {"bf16": TensorProto.BFLOAT16, "fp32": TensorProto.FLOAT, "int8": TensorProto.INT8}


def _graph(nodes, inputs, outputs, inits=()) -> bytes:
    graph = helper.make_graph(nodes, "published-point", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def stream_model(kind: str, n: int) -> bytes:
    """BabelStream's kernels on fp32 arrays of n elements: copy c = a (as a scale by 1, so no pass elides it),
    mul b = s c, add c = a + b, triad a = b + s c."""
    t = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [n])
    scalar = numpy_helper.from_array(np.array(0.4, dtype=np.float32), "s")
    if kind == "stream-add":
        return _graph([helper.make_node("Add", ["a", "b"], ["c"])], [t("a"), t("b")], [t("c")])
    if kind == "stream-triad":
        nodes = [helper.make_node("Mul", ["c", "s"], ["sc"]), helper.make_node("Add", ["b", "sc"], ["a"])]
        return _graph(nodes, [t("b"), t("c")], [t("a")], [scalar])
    one = numpy_helper.from_array(np.array(1.0, dtype=np.float32), "s") if kind == "stream-copy" else scalar
    return _graph([helper.make_node("Mul", ["c", "s"], ["b"])], [t("c")], [t("b")], [one])


STREAM_ARRAYS = {"stream-copy": 2, "stream-mul": 2, "stream-add": 3, "stream-triad": 3}  # BabelStream's byte count


def batched_gemm_model(batch: int, m: int, n: int, k: int, elem: int) -> bytes:
    t = lambda name, dims: helper.make_tensor_value_info(name, elem, list(dims))
    out = TensorProto.INT32 if elem == TensorProto.INT8 else elem
    c = helper.make_tensor_value_info("c", out, [batch, m, n])
    node = "MatMulInteger" if elem == TensorProto.INT8 else "MatMul"
    return _graph([helper.make_node(node, ["a", "b"], ["c"])], [t("a", (batch, m, k)), t("b", (batch, k, n))], [c])


def _latency_s(model: bytes, hw: mapper.HardwareProfile, dtype: str) -> float:
    launch = "graph" if hw.graph_launch_s is not None else "eager"  # a few us against a ~ms kernel either way
    return mapper.map_workload(
        load_workload(model), hw, mapper.PlanOptions(dtype=dtype, launch=launch)
    ).totals.latency_s


def predict(point: Point, hw: mapper.HardwareProfile | None = None) -> float:
    """The engine's figure for the point, in the published unit (on `hw`, else the point's built-in profile)."""
    hw = hw or mapper.load_hardware(point.hw)
    if point.kind == "gemm":
        m, n, k = point.shape
        model = kernel_model("gemm", (m, n, k), ELEM[point.dtype])
        return 2.0 * m * n * k / _latency_s(model, hw, point.dtype) / 1e12
    if point.kind == "batched-gemm":
        b, m, n, k = point.shape
        model = batched_gemm_model(b, m, n, k, ELEM[point.dtype])
        return 2.0 * b * m * n * k / _latency_s(model, hw, point.dtype) / 1e12
    if point.kind in STREAM_ARRAYS:
        (n,) = point.shape
        return STREAM_ARRAYS[point.kind] * 4.0 * n / _latency_s(stream_model(point.kind, n), hw, "fp32") / 1e9
    devices, message = point.shape
    cost = collective_time("all-reduce", devices, float(message), hw.interconnect)
    return 2.0 * (devices - 1) / devices * message / cost.time_s / 1e9  # nccl-tests' bus bandwidth


def rows(points: tuple[Point, ...] = POINTS) -> list[dict]:
    out = []
    for p in points:
        predicted = predict(p)
        unit = {"gemm": "TFLOP/s", "batched-gemm": "TFLOP/s", "all-reduce": "GB/s busbw"}.get(p.kind, "GB/s")
        out.append(
            {
                "hw": p.hw,
                "kind": p.kind,
                "shape": "x".join(str(s) for s in p.shape),
                "unit": unit,
                "published": p.published,
                "predicted": predicted,
                "error": predicted / p.published - 1.0,
                "role": p.role,
                "software": p.software,
                "source": p.source,
            }
        )
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a markdown table (docs/validation.md)")
    args = parser.parse_args(argv)
    table = rows()
    if args.markdown:
        print("| device | point | shape | published | predicted | error | role | software |")
        print("|---|---|---|---:|---:|---:|---|---|")
        for r in table:
            print(
                f"| {r['hw']} | {r['kind']} | {r['shape']} | {r['published']:.1f} {r['unit']} |"
                f" {r['predicted']:.1f} | {r['error']:+.0%} | {r['role']} | {r['software']} |"
            )
    else:
        for r in table:
            print(
                f"{r['hw']:14s} {r['kind']:10s} {r['shape']:20s} published {r['published']:7.1f} {r['unit']:10s}"
                f" predicted {r['predicted']:7.1f}  {r['error']:+5.0%}  {r['role']}"
            )
    for hw in dict.fromkeys(r["hw"] for r in table):
        mine = [r for r in table if r["hw"] == hw]
        parts = []
        for role in ("fit", "source", "floor"):
            errors = [r["error"] for r in mine if r["role"] == role]
            if errors:
                met = f", {sum(e >= 0 for e in errors)} met" if role == "floor" else ""
                parts.append(f"{role} {len(errors)} (median |error| {statistics.median(map(abs, errors)):.0%}{met})")
        print(f"{hw}: {'; '.join(parts)}")
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
