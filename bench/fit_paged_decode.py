"""Fit: a profile's paged decode attention latency (`overhead.paged_decode_s`) and work-item time
(`overhead.paged_decode_item_s`) to AIConfigurator's generation-attention rows in the FIT SPLIT only, scored on the
held-back rows: the procedure the four GPU profiles' sources describe, as a script.

    .venv/bin/python bench/fit_paged_decode.py --device h200-sxm [--sample N] [--rounds R] [--write]

Rows: the N rows a table (default 300) with the smallest stable hash of seed 'fit' (aiconfigurator.sample_table) of
the device's generation_attention_perf tables (TensorRT-LLM, vLLM, SGLang; bf16 and fp8 caches); the rows
aiconfigurator.SPLIT_RULE holds back are never mapped during the search. Each row is mapped as the harness maps it
(mapper/evidence/validate.py: the framework op's kernels, one-op slices replayed from a CUDA graph) on the profile
with candidate values (candidates.candidate_profile). The search is a coordinate descent from the profile's values:
the latency over LATENCY_GRID_S with the item time held, then the item time over ITEM_GRID_S with the latency held,
`--rounds` times (default 2) or until neither moves; each candidate is scored by the median |error| of every fit
row, the smaller value kept on a tie. Prints fit and held-back median |error| and bias for the profile's values and
the fitted ones, and the TOML lines; --write puts the values in data/hardware/<device>.toml (the source strings
still to be written by hand). About 2-4 s a candidate on one core at the default sample.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: bench/ is a package of the repo

from bench.fit_common import line, stats, write_values
from mapper.evidence import aiconfigurator as aic
from mapper.evidence.candidates import with_value
from mapper.evidence.validate import aiconfigurator_rows
from mapper.hardware.load import load_hardware
from mapper.hardware.profile import HardwareProfile

SEED = "fit"
LATENCY_KEY, ITEM_KEY = "paged_decode_s", "paged_decode_item_s"
LATENCY_GRID_S = tuple(float(v) for v in np.round(np.arange(0.0, 12.01, 0.25), 2) * 1e-6)
ITEM_GRID_S = tuple(float(v) for v in np.round(np.arange(0.0, 6.01, 0.1), 2) * 1e-6)


def decode_rows(device: str, per_table: int) -> tuple[list[aic.Row], list[aic.Row]]:
    """(fit rows, held-back rows) of the device's generation-attention tables."""
    rows, _ = aiconfigurator_rows(device, aic.RowKind.ATTENTION_DECODE, per_table, SEED)
    return [r for r in rows if not aic.held_back(r)], [r for r in rows if aic.held_back(r)]


def with_values(hw: HardwareProfile, latency_s: float, item_s: float) -> HardwareProfile:
    return with_value(with_value(hw, f"overhead.{LATENCY_KEY}", latency_s), f"overhead.{ITEM_KEY}", item_s)


def search(base: HardwareProfile, rows: list[aic.Row], rounds: int) -> tuple[float, float]:
    """Coordinate descent from the profile's values: (latency s, item s) of the least fit median |error|."""
    latency, item = base.paged_decode_s or 0.0, base.paged_decode_item_s or 0.0
    scores: dict[tuple[float, float], float] = {}

    def score(candidate: tuple[float, float]) -> float:
        if candidate not in scores:
            scores[candidate] = stats(with_values(base, *candidate), rows)["all"]["median_abs"]
        return scores[candidate]

    for _ in range(rounds):
        before = (latency, item)
        latency = min(LATENCY_GRID_S, key=lambda v: (score((v, item)), v))
        item = min(ITEM_GRID_S, key=lambda v: (score((latency, v)), v))
        if (latency, item) == before:
            break
    return latency, item


def fit(device: str, per_table: int, rounds: int) -> tuple[float, float]:
    fit_rows, held_rows = decode_rows(device, per_table)
    base = load_hardware(device)
    print(f"{device}: {len(fit_rows)} fit rows, {len(held_rows)} held back (generation attention)")
    now = f"profile {(base.paged_decode_s or 0) * 1e6:.2f} / {(base.paged_decode_item_s or 0) * 1e6:.2f} us"
    print(line(f"{now}, fit", stats(base, fit_rows)))
    print(line(f"{now}, held back", stats(base, held_rows)))
    latency, item = search(base, fit_rows, rounds)
    chosen, label = with_values(base, latency, item), f"fitted {latency * 1e6:.2f} / {item * 1e6:.2f} us"
    print(line(f"{label}, fit", stats(chosen, fit_rows)))
    print(line(f"{label}, held back", stats(chosen, held_rows)))
    for key, value in ((LATENCY_KEY, latency), (ITEM_KEY, item)):
        print(f'{key} = {{ value = {value:.3g}, source = "FITTED ..." }}')
    return latency, item


def main(argv: list[str] | None = None) -> tuple[float, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", required=True)
    parser.add_argument("--sample", type=int, default=300, help="rows a table (default 300)")
    parser.add_argument("--rounds", type=int, default=2, help="coordinate-descent rounds (default 2)")
    parser.add_argument("--write", action="store_true", help="put the fitted values in the device's profile")
    args = parser.parse_args(argv)
    latency, item = fit(args.device, args.sample, args.rounds)
    if args.write:
        write_values(args.device, {LATENCY_KEY: latency, ITEM_KEY: item})
    return latency, item


if __name__ == "__main__":
    main()
