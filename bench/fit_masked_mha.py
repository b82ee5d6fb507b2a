"""Fit: a profile's `overhead.masked_mha_item_s` (the unit time one masked multi-head attention work item holds:
TensorRT-LLM's decode kernel for multi-head attention and for query-head groups its XQA kernel does not take) to
AIConfigurator's TensorRT-LLM generation-attention rows in the FIT SPLIT only, scored on the held-back rows.

    .venv/bin/python bench/fit_masked_mha.py --device h100-sxm [--sample N] [--write]

Rows: the N rows a table (default 1500) with the smallest stable hash of seed 'fit' (aiconfigurator.sample) of the
device's TensorRT-LLM generation_attention_perf table, bf16 and fp8 caches, kept where the preset runs masked MHA
(`plan.attention_tiling.runs_masked_mha`: one query head a K/V head, or a group past XQA's); the rows
aiconfigurator.SPLIT_RULE holds back are never mapped during the search. Each row is mapped as the harness maps it
(mapper/evidence/validate.py: the framework op's kernels, one-op slices replayed from a CUDA graph) on the profile
with a candidate value (candidates.candidate_profile); the rows are scored first without the kernel (every step on
the fused kernel, as before it). The search: a grid of 0.2-3.0 us in 0.1 us steps, the value
with the least median |error| on the fit rows kept. Prints fit and held-back median |error| and bias by cache dtype
for the profile's value and the fitted one, and the TOML line; --write puts the value in
data/hardware/<device>.toml (the source string still to be written by hand). About 1 s a candidate on one core.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: bench/ is a package of the repo

from bench.fit_common import line, one_value_fit, stats
from mapper.core.result import MatrixShape
from mapper.evidence import aiconfigurator as aic
from mapper.evidence.candidates import with_value
from mapper.evidence.validate import RUNTIMES, aiconfigurator_rows
from mapper.hardware.load import load_hardware
from mapper.hardware.profile import HardwareProfile
from mapper.plan.attention_tiling import runs_masked_mha
from mapper.plan.runtime import PRESETS

SEED = "fit"
GRID_S = tuple(float(v) for v in np.round(np.arange(0.2, 3.01, 0.1), 2) * 1e-6)
KEY = "masked_mha_item_s"
FRAMEWORK = "trtllm"


def masked_rows(device: str, per_table: int) -> tuple[list[aic.Row], list[aic.Row]]:
    """(fit rows, held-back rows): the device's TensorRT-LLM decode rows the preset runs on masked MHA."""
    decode = PRESETS[RUNTIMES[FRAMEWORK]].decode_attention
    hw = with_item(load_hardware(device), 1e-6)  # any value: which steps run masked MHA, not how fast
    rows, _ = aiconfigurator_rows(device, aic.RowKind.ATTENTION_DECODE, per_table, SEED)
    kept = [r for r in rows if r.table.split("/")[2] == FRAMEWORK and runs_masked_mha(_shape(r), decode, hw)]
    return [r for r in kept if not aic.held_back(r)], [r for r in kept if aic.held_back(r)]


def _shape(row: aic.Row) -> MatrixShape:
    """A decode row's attention as its kernel's shape: one query a sequence's head over the cache and the new key."""
    batch, heads, kv_heads, length, head_dim = row.shape
    return MatrixShape(batch * heads, 1, length + 1, head_dim, "attention", heads=heads, kv_heads=kv_heads)


def with_item(hw: HardwareProfile, item_s: float | None) -> HardwareProfile:
    """`hw` with `item_s` as its masked MHA item time (None: none, every step on the fused kernel)."""
    return with_value(hw, f"overhead.{KEY}", item_s)


def fit(device: str, per_table: int) -> float:
    fit_rows, held_rows = masked_rows(device, per_table)
    base = load_hardware(device)
    print(f"{device}: {len(fit_rows)} fit rows, {len(held_rows)} held back (TensorRT-LLM decode on masked MHA)")
    fused = with_item(base, None)
    print(line("fused kernel (no masked MHA), fit", stats(fused, fit_rows)))
    print(line("fused kernel (no masked MHA), held back", stats(fused, held_rows)))
    scores = {v: stats(with_item(base, v), fit_rows)["all"]["median_abs"] for v in GRID_S}
    best = min(GRID_S, key=lambda v: (scores[v], v))
    chosen = with_item(base, best)
    print(line(f"fitted {best * 1e6:.2f} us, fit", stats(chosen, fit_rows)))
    print(line(f"fitted {best * 1e6:.2f} us, held back", stats(chosen, held_rows)))
    print(f'{KEY} = {{ value = {best:.3g}, source = "FITTED ..." }}')
    return best


def main(argv: list[str] | None = None) -> float:
    return one_value_fit(argv, __doc__, KEY, fit, 1500)


if __name__ == "__main__":
    main()
