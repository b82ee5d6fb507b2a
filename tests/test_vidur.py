"""Kernel-level evidence on A100 without a GPU here: the engine against Vidur's measured Llama-2 layer ops.

data/evidence/vidur_a100/ (microsoft/vidur profiling data, MIT licence; its README says what each column is):
measured A100 times (CUDA events, fp16) of every Llama-2-7B and 70B layer op except attention at 1-4096 tokens
and TP 1-8, and all-reduce times on a DGX A100. Each op is mapped as a one-op graph of the same shapes and plan
(fp16; CUDA events time the GPU only, so kernels are charged the profile's graph-replay launch); each all-reduce
as the engine's collective kernel (the reader and the slices: mapper/evidence/vidur.py, which `mapper validate`
reports too). `python tests/test_vidur.py` prints the medians (docs/validation.md).
"""

from __future__ import annotations

import statistics
import sys

import pytest

import mapper
from mapper.evidence.vidur import DATA, GROUPS, all_reduce_rows, layer_rows

pytestmark = pytest.mark.slow  # every Vidur A100 row mapped (2 x 1044 rows x 10 ops), ~10-30 s

# Acceptance (issue #18): median |error| over each group of rows
GEMM_TOLERANCE = 0.10
VECTOR_TOLERANCE = 0.20  # norms, activation and rope
# Vidur's all-reduces were within 20% (17.3%) while the A100 profile's all-reduce ran at the whole NVLink link rate;
# since 2026-12-06 the profile's interconnect.latency_s and efficiency.all_reduce_by_bytes are fitted to
# AIConfigurator's a100_sxm all-reduce rows (fit split; 0.65-0.7 of the link at large messages, as public nccl-tests
# DGX A100 figures of 230-250 GB/s bus bandwidth are), and Vidur's rows disagree: at 4 and 8 GPUs they imply more bus
# bandwidth than the link carries (test below), so their size or time is not what the README reads. Held at today's
# median so that a change making it worse still fails.
ALL_REDUCE_HELD = 0.57 + 0.03


def _median_error(pairs) -> float:
    return statistics.median(abs(p / m - 1.0) for m, p in pairs if m > 0)


@pytest.fixture(scope="module")
def scored():
    if not DATA.is_dir():
        pytest.skip("the Vidur A100 data (data/evidence/vidur_a100) is not here")
    return layer_rows(), all_reduce_rows()


def group_errors(rows) -> dict[str, float]:
    return {g: _median_error([(m, p) for _, op, _, _, m, p in rows if op in ops]) for g, ops in GROUPS.items()}


def test_gemm_rows_within_tolerance(scored):
    assert group_errors(scored[0])["gemm"] <= GEMM_TOLERANCE


def test_norm_activation_rope_rows_within_tolerance(scored):
    assert group_errors(scored[0])["vector"] <= VECTOR_TOLERANCE


def test_all_reduce_rows_held(scored):
    assert _median_error([(m, p) for _, _, m, p in scored[1]]) <= ALL_REDUCE_HELD


def test_large_all_reduce_rows_imply_more_than_the_link_carries(scored):
    """A ring all-reduce moves 2 (p-1)/p of the message over each GPU's link (A100: no in-switch reduction), so its
    bus bandwidth cannot pass the link's per-direction rate; Vidur's rows of 64 MB and more at 4 and 8 GPUs do."""
    link = mapper.load_hardware("a100-sxm-80gb").interconnect.link_bandwidth_bytes_per_s
    large = [(p, 2 * n, m) for p, n, m, _ in scored[1] if p >= 4 and 2 * n >= 2**26]
    bus = sorted(2 * (p - 1) / p * size / m for p, size, m in large)
    assert large and bus[len(bus) // 2] > link


def test_every_row_is_scored(scored):
    layers, reduces = scored
    assert len(layers) == 2 * 1044 * sum(len(g) for g in GROUPS.values())
    assert len(reduces) > 0 and all(p > 0 for *_, p in reduces)


if __name__ == "__main__":  # the figures of docs/validation.md
    layers, reduces = layer_rows(), all_reduce_rows()
    for op in (o for g in GROUPS.values() for o in g):
        for name in ("7b", "70b"):
            pairs = [(m, p) for n, o, _, _, m, p in layers if o == op and n == name]
            print(f"{name:4s} {op:26s} rows {len(pairs):5d} median |error| {_median_error(pairs):6.1%}")
    for group, error in group_errors(layers).items():
        print(f"group {group:8s} median |error| {error:6.1%}")
    for devices in (2, 4, 8):
        pairs = [(m, p) for d, _, m, p in reduces if d == devices]
        print(f"all-reduce x{devices}: rows {len(pairs)} median |error| {_median_error(pairs):6.1%}")
    print(f"all-reduce: median |error| {_median_error([(m, p) for _, _, m, p in reduces]):6.1%}")
    sys.exit(0)
