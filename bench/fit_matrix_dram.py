"""Fit: a profile's `efficiency.matrix_dram_by_bytes` (the share of the DRAM peak a GEMM's weight stream reaches,
by its bytes) to the bf16 GEMM rows of AIConfigurator's tables in the FIT SPLIT only, scored on the held-back rows.

    .venv/bin/python bench/fit_matrix_dram.py --device h100-sxm [--sample N] [--start copy|profile] [--write]

Rows: the N bf16 rows a table (default 300) with the smallest stable hash of seed 'fit' (aiconfigurator.sample) of
the device's gemm_perf tables; those aiconfigurator.SPLIT_RULE holds back are never mapped during the search. Each
row is mapped as the harness maps it (mapper/evidence/validate.py: a one-op slice replayed from a CUDA graph), on
the profile with a candidate curve (candidates.candidate_profile). The search: the knots at 0.1, 1, 4, 16, 64,
256 MB and 1 GB, starting from the copy curve (`dram_by_bytes`, what a profile without a matrix curve uses) or the
profile's own matrix curve; each knot in turn tried at its value x (1 -/+ step), kept where the fit rows' median
|error| falls, the curve kept non-decreasing; steps 20%, 10%, 5%, 2.5%, each until a pass over the knots changes
nothing. The knots below 0.1 MB and at 1e11 B stay at the start curve's. Prints fit and held-back median |error| and
bias before and after, and the TOML value to paste; --write puts it in data/hardware/<device>.toml (the source
string still to be written by hand). About 1-3 s a candidate for 300 rows a table on one core.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from mapper.evidence import aiconfigurator as aic
from mapper.evidence.candidates import candidate_profile, with_value
from mapper.evidence.validate import error_stats, score_aiconfigurator
from mapper.hardware.load import load_hardware
from mapper.hardware.profile import EfficiencyCurve, HardwareProfile

HARDWARE = Path(__file__).resolve().parents[1] / "data" / "hardware"
SEED = "fit"
FITTED = (1e5, 1e6, 4e6, 1.6e7, 6.4e7, 2.56e8, 1e9)  # the knots the search moves (bytes)
FIXED = (1e3, 1e4, 1e11)  # kept at the start curve's value
STEPS = (0.2, 0.1, 0.05, 0.025)
FLOOR, CEILING = 0.005, 1.0
KEY = "matrix_dram_by_bytes"


def bf16_rows(device: str, per_table: int) -> tuple[list[aic.Row], list[aic.Row], list[str]]:
    """(fit rows, held-back rows, tables): the `per_table` bf16 rows of each of the device's GEMM tables with the
    smallest stable hash of SEED, split by aiconfigurator.SPLIT_RULE."""
    rows, labels = [], []
    for table in aic.tables():
        if table.profile == device and aic.TABLES[table.name] == aic.RowKind.GEMM:
            rows += aic.sample_table(table, per_table, SEED, dtype="bf16")
            labels.append(table.label)
    return [r for r in rows if not aic.held_back(r)], [r for r in rows if aic.held_back(r)], labels


def with_curve(hw: HardwareProfile, curve: EfficiencyCurve | None) -> HardwareProfile:
    """`hw` with `curve` as its matrix DRAM curve (None: none, the copy curve serves): `candidates.with_value`."""
    return with_value(hw, f"efficiency.{KEY}", None if curve is None else [list(p) for p in curve.points])


def stats(hw: HardwareProfile, curve: EfficiencyCurve | None, rows: list[aic.Row]) -> dict:
    """Median |error| and bias of `rows` mapped on `hw` with `curve` as its matrix DRAM curve."""
    with candidate_profile(with_curve(hw, curve)):
        return error_stats([s.error for s in score_aiconfigurator(rows)])


def curve_of(knots: dict[float, float]) -> EfficiencyCurve:
    return EfficiencyCurve(tuple(sorted(knots.items())))


def search(hw, start: EfficiencyCurve, rows: list[aic.Row], log=print) -> tuple[EfficiencyCurve, dict]:
    """Coordinate search of the FITTED knots for the least median |error| over `rows` (module docstring)."""
    knots = {x: round(start.at(x), 4) for x in (*FIXED, *FITTED)}
    best = stats(hw, curve_of(knots), rows)["median_abs"]
    log(f"  start: fit median {best:.2%}")
    order = sorted(knots)
    for step in STEPS:
        changed = True
        while changed:
            changed = False
            for x in FITTED:
                i = order.index(x)
                low, high = knots[order[i - 1]], knots[order[i + 1]]
                for factor in (1 - step, 1 + step):
                    value = round(min(CEILING, max(FLOOR, knots[x] * factor)), 4)
                    if not low <= value <= high or value == knots[x]:
                        continue  # non-decreasing: a larger stream never reaches less of the peak
                    trial = {**knots, x: value}
                    median = stats(hw, curve_of(trial), rows)["median_abs"]
                    if median < best:
                        knots, best, changed = trial, median, True
                        log(f"  step {step:.3f}: {x:.3g} B -> {value:.4f}: fit median {median:.2%}")
                        break
    curve = curve_of(knots)
    return curve, stats(hw, curve, rows)


def toml_value(curve: EfficiencyCurve) -> str:
    return "[" + ", ".join(f"[{x!r}, {round(e, 4)!r}]" for x, e in curve.points) + "]"


def write(device: str, curve: EfficiencyCurve) -> Path:
    """Put the curve's value into the profile's efficiency.matrix_dram_by_bytes (a line is added, its source
    "TO BE WRITTEN", where the profile has none)."""
    path = HARDWARE / f"{device}.toml"
    text = path.read_text()
    value = toml_value(curve)
    line = re.compile(rf"^{KEY} = {{ value = \[.*?\]\], ", re.MULTILINE)
    if line.search(text):
        text = line.sub(lambda _: f"{KEY} = {{ value = {value}, ", text, count=1)
    else:
        anchor = re.compile(r"^all_reduce_by_bytes = .*$", re.MULTILINE)
        match = anchor.search(text)
        if match is None:
            raise SystemExit(f"{path}: no line to add {KEY} after")
        entry = f'{KEY} = {{ value = {value}, source = "TO BE WRITTEN" }}'
        text = text[: match.end()] + "\n" + entry + text[match.end() :]
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> EfficiencyCurve:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", required=True, help="a profile with AIConfigurator tables (h100-sxm, b200...)")
    parser.add_argument("--sample", type=int, default=300, help="bf16 rows a table (default 300)")
    parser.add_argument("--start", choices=("copy", "profile"), default="copy", help="the curve the search starts at")
    parser.add_argument("--write", action="store_true", help="write the fitted value into the profile's TOML")
    args = parser.parse_args(argv)
    begun = time.perf_counter()
    hw = load_hardware(args.device)
    fit, held, tables = bf16_rows(args.device, args.sample)
    if not fit:
        raise SystemExit(f"{args.device}: no bf16 GEMM rows in AIConfigurator's tables")
    print(f"{args.device}: {len(fit)} fit rows, {len(held)} held back (not used), {args.sample} bf16 a table, seed")
    print(f"'{SEED}', tables: {', '.join(tables)}")
    print(f"split: {aic.SPLIT_RULE}")
    start = hw.dram_efficiency if args.start == "copy" else hw.matrix_dram_curve
    profile_curve = hw.matrix_dram_efficiency
    before = {"fit": stats(hw, profile_curve, fit), "held-back": stats(hw, profile_curve, held)}
    curve, after_fit = search(hw, start, fit)
    after = {"fit": after_fit, "held-back": stats(hw, curve, held)}
    for split in ("fit", "held-back"):
        b, a = before[split], after[split]
        print(
            f"{split:>9} ({a['n']} rows): median |error| {b['median_abs']:.1%} -> {a['median_abs']:.1%}, "
            f"bias {b['bias']:+.1%} -> {a['bias']:+.1%}"
        )
    print("copy curve at the knots: " + ", ".join(f"{x:.3g} B {hw.dram_efficiency.at(x):.3f}" for x in FITTED))
    print(f"{KEY} = {{ value = {toml_value(curve)}, ... }}")
    if args.write:
        print(f"written: {write(args.device, curve)}")
    print(f"{time.perf_counter() - begun:.0f} s")
    return curve


if __name__ == "__main__":
    main()
