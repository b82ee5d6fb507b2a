"""Devices without measured tables: the engine against the published per-device points their profiles cite.

    .venv/bin/python -m bench.devices_without_tables [--markdown]

No AIConfigurator table covers the MI300X, Gaudi 2, TPU v5e or L4 profiles, so each is checked against the few
published measurements that can be read (docs/validation.md, "Devices without measured tables"). Each point says
whether a profile value was fitted to it ("fit") or not ("held-out"), so the two are never mixed:

- `gemm`: the best shape of Maximum Achievable Matmul FLOPS (stas00/ml-engineering, compute/accelerator/README.md,
  "Maximum Achievable Matmul FLOPS comparison table", BF16 `torch.matmul` swept by mamf-finder.py; mean TFLOPS
  of the best shape found, software as listed). Mapped as one bf16 MatMul at that shape (graph launch where the
  profile gives one).
  The profiles' matrix asymptotes were derived from these figures divided by an assumed ~0.97 wave efficiency,
  not fitted through the engine, so the engine's prediction at the same shape is a check of the tile and cache
  model, marked held-out.
- `all-reduce`: MI300X 8-GPU ring all-reduce bus bandwidth at a 1 GiB message, against the achievable xGMI
  figure (7 links x ~48 GB/s usable of 64 GB/s rated, ROCm blog "Understanding RCCL Bandwidth and xGMI
  Performance on AMD Instinct MI300X", 2025-03-02). The profile's link bandwidth is derived from that figure, so
  this row is "fit": it shows the derivation holds through the alpha-beta formula, not that it was checked.

Error = predicted / published - 1 (positive: the engine predicts faster than measured).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass

from onnx import TensorProto

import mapper
from mapper.cost.collectives import collective_time
from mapper.evidence.microbench import kernel_model
from mapper.pipeline import load_workload

MAMF = "stas00/ml-engineering compute/accelerator/README.md, MAMF table"
RCCL_BLOG = "rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi (2025-03-02)"
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Point:
    """One published figure: the device, what was measured, its value and where it is printed."""

    hw: str
    kind: str  # gemm | all-reduce
    shape: tuple[int, ...]  # gemm: (m, n, k); all-reduce: (devices, message bytes)
    published: float  # gemm: TFLOP/s; all-reduce: bus bandwidth GB/s
    software: str
    source: str
    role: str  # "fit": a profile value was derived from it; "held-out": nothing was fitted to it


POINTS = (
    Point("mi300x", "gemm", (4096, 4864, 10240), 781.9, "ROCm-6.2", MAMF, "held-out"),
    # Gaudi 2's matrix asymptote is fitted to its point, and this check found its operand feed (see gaudi2.toml)
    Point("gaudi2", "gemm", (20224, 19968, 11520), 429.3, "Gaudi 1.15", MAMF, "fit"),
    # the measured NVIDIA tables cover these devices; their MAMF rows are printed for scale, not as evidence
    Point("h100-sxm", "gemm", (6144, 2816, 17920), 792.1, "CUDA-12.1", MAMF, "held-out"),
    Point("a100-sxm-80gb", "gemm", (6912, 2048, 16384), 267.9, "CUDA-12.1", MAMF, "held-out"),
    Point("mi300x", "all-reduce", (8, GIB), 7 * 48.0, "RCCL (blog, 2025)", RCCL_BLOG, "fit"),
)


def predict(point: Point) -> float:
    """The engine's figure for the point, in the published unit."""
    hw = mapper.load_hardware(point.hw)
    if point.kind == "gemm":
        m, n, k = point.shape
        workload = load_workload(kernel_model("gemm", (m, n, k), TensorProto.BFLOAT16))
        launch = "graph" if hw.graph_launch_s is not None else "eager"  # a few us against a ~ms GEMM either way
        result = mapper.map_workload(workload, hw, mapper.PlanOptions(dtype="bf16", launch=launch))
        return 2.0 * m * n * k / result.totals.latency_s / 1e12
    devices, message = point.shape
    cost = collective_time("all-reduce", devices, float(message), hw.interconnect)
    return 2.0 * (devices - 1) / devices * message / cost.time_s / 1e9  # nccl-tests' bus bandwidth


def rows(points: tuple[Point, ...] = POINTS) -> list[dict]:
    out = []
    for p in points:
        predicted = predict(p)
        unit = "TFLOP/s" if p.kind == "gemm" else "GB/s busbw"
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
    held = [abs(r["error"]) for r in table if r["role"] == "held-out"]
    print(f"held-out median |error| over {len(held)} points: {statistics.median(held):.0%}")
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
