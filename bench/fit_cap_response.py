"""Fit: a profile's `power.cap_response_s` (how long a load runs at the full clock before the power controller pulls
the clock down to the cap) to AIConfigurator's GEMM rows in the FIT SPLIT only, scored on the held-back rows.

    .venv/bin/python bench/fit_cap_response.py --device h200-sxm [--sample N] [--write]

Rows: the N rows a table (default 3000) with the smallest stable hash (aiconfigurator.sample) of the device's
bf16 gemm_perf tables. Each row is mapped once at the cap and once at the full clock (the slice with the cap
lifted, `mapper.evidence.gemm_rows.module_s`); a candidate value then decides, row by row, the share of the
collector's timed passes that ran after the clock dropped (`gemm_rows.timed_s`: 12 passes of the module's calls,
the last 6 timed). The objective: the median |error| of the fit rows of TensorRT-LLM and SGLang (random weights;
vLLM's stay as allocated and never reach the cap) whose full-clock run is at least the grid's least value, the rows
a candidate can move. The grid: 10-300 ms in 10 ms steps. Prints, for no value (every row at the cap) and the
fitted one, the median |error| and bias of every bf16 row, fit and held back, and the TOML line; --write puts the
value in data/hardware/<device>.toml (its source still to be written by hand).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: bench/ is a package of the repo

from bench.fit_common import one_value_fit
from mapper.evidence import aiconfigurator as aic
from mapper.evidence.aic_records import RowKind
from mapper.evidence.gemm_rows import RUN_PASSES, UNCAPPED, module_s, pass_ops, timed_s
from mapper.evidence.validate import aiconfigurator_rows, error_stats
from mapper.hardware.load import load_hardware

GRID_S = tuple(round(0.01 * i, 2) for i in range(1, 31))
KEY = "cap_response_s"
RANDOM_WEIGHTS = ("trtllm", "sglang")


def mapped(device: str, per_table: int) -> list[tuple[aic.Row, float, float]]:
    """(row, capped, full-clock) of every sampled bf16 GEMM row of the device."""
    rows, _ = aiconfigurator_rows(device, RowKind.GEMM, per_table)
    out = []
    for row in rows:
        if row.dtype != "bf16":
            continue
        m, n, k = row.shape
        out.append((row, module_s(row.dtype, (m, n, k), device), module_s(row.dtype, (m, n, k), device, UNCAPPED)))
    return out


def errors(rows, l2_bytes: float, response_s: float | None) -> list[float]:
    """Each row's error with the clock dropping `response_s` into the run (None: every row at the cap)."""
    out = []
    for row, capped, free in rows:
        m, n, k = row.shape
        framework = row.table.split("/")[2]
        t = (
            capped
            if response_s is None
            else timed_s(framework, row.dtype, (m, n, k), l2_bytes, (capped, free), response_s)
        )
        out.append(t / row.measured_s - 1)
    return out


def fit(device: str, per_table: int) -> float:
    hw = load_hardware(device)
    rows = mapped(device, per_table)
    fit_rows = [r for r in rows if not aic.held_back(r[0])]
    held_rows = [r for r in rows if aic.held_back(r[0])]

    def movable(entry) -> bool:
        row, _, free = entry
        framework, (_, n, k) = row.table.split("/")[2], row.shape
        return (
            framework in RANDOM_WEIGHTS
            and RUN_PASSES * pass_ops(framework, row.dtype, n, k, hw.l2_bytes) * free >= GRID_S[0]
        )

    objective = [r for r in fit_rows if movable(r)]
    print(f"{device}: {len(fit_rows)} fit rows ({len(objective)} the objective's), {len(held_rows)} held back, bf16")
    scores = {v: error_stats(errors(objective, hw.l2_bytes, v))["median_abs"] for v in GRID_S}
    best = min(GRID_S, key=lambda v: (scores[v], v))
    for label, value in (("every row at the cap", None), (f"fitted {best * 1e3:.0f} ms", best)):
        for split, chosen in (("fit", fit_rows), ("held back", held_rows), ("objective", objective)):
            f = error_stats(errors(chosen, hw.l2_bytes, value))
            print(f"{label:24s} {split:10s} n {f['n']:5d} median {f['median_abs']:.1%} bias {f['bias']:+.1%}")
    print(f'{KEY} = {{ value = {best:.3g}, source = "FITTED ..." }}')
    return best


def main(argv: list[str] | None = None) -> float:
    return one_value_fit(argv, __doc__, KEY, fit, 3000)


if __name__ == "__main__":
    main()
