"""What the decode-attention fits (bench/fit_masked_mha.py, bench/fit_paged_decode.py) share: scoring rows on a
candidate profile by cache dtype, printing a result line, and writing fitted values into a built-in profile."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

from mapper.evidence import aiconfigurator as aic
from mapper.evidence.candidates import candidate_profile
from mapper.evidence.validate import error_stats, score_aiconfigurator
from mapper.hardware.profile import HardwareProfile

HARDWARE = Path(__file__).resolve().parents[1] / "data" / "hardware"


def stats(hw: HardwareProfile, rows: list[aic.Row]) -> dict[str, dict]:
    """Median |error| and bias of `rows` mapped on `hw`, by cache dtype and together."""
    with candidate_profile(hw):
        scored = score_aiconfigurator(rows)
    out = {"all": error_stats([s.error for s in scored])}
    for dtype in sorted({s.dtype for s in scored}):
        out[dtype] = error_stats([s.error for s in scored if s.dtype == dtype])
    return out


def line(label: str, figures: dict[str, dict], width: int = 44) -> str:
    parts = [
        f"{dtype} n {f['n']} median {f['median_abs']:.1%} bias {f['bias']:+.1%}"
        for dtype, f in figures.items()
        if f["n"]
    ]
    return f"{label:{width}s} " + "; ".join(parts)


def write_values(device: str, values: dict[str, float]) -> None:
    """Each `[overhead]` key's value in data/hardware/<device>.toml replaced (its source left to be written)."""
    path = HARDWARE / f"{device}.toml"
    text = path.read_text()
    for key, value in values.items():
        pattern, value_text = rf"^{key} = {{ value = [^,]+,", f"{key} = {{ value = {value:.3g},"
        text, count = re.subn(pattern, value_text, text, count=1, flags=re.MULTILINE)
        if not count:
            raise SystemExit(f"{path} has no {key} line to update: add one under [overhead] first")
    path.write_text(text)


def one_value_fit(argv: list[str] | None, doc: str, key: str, fit: Callable[[str, int], float], sample: int) -> float:
    """A fit of one profile value as a command: `--device`, `--sample` rows a table (default `sample`), `--write`
    to put the fitted value in the device's profile; `fit(device, sample)` prints and returns the value."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--device", required=True)
    parser.add_argument("--sample", type=int, default=sample, help=f"rows a table (default {sample})")
    parser.add_argument("--write", action="store_true", help="put the fitted value in the device's profile")
    args = parser.parse_args(argv)
    value = fit(args.device, args.sample)
    if args.write:
        write_values(args.device, {key: value})
    return value
