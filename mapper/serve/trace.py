"""Arrival traces for serving: a CSV of arrival times and optional per-request token counts, validated once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mapper.core import limits
from mapper.core.errors import MapperError, bounded

MAX_TRACE_ROWS = limits.MAX_TRACE_ROWS


@dataclass(frozen=True, slots=True, eq=False)
class Trace:
    """Arrival times (s, non-decreasing) and optional per-request token counts, from a CSV file."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    source: str = ""

    def __len__(self) -> int:
        return len(self.arrival_s)


TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


def load_trace(path: str | Path) -> Trace:
    """Read a CSV trace (header `arrival_s`, optional `prompt_tokens`, `output_tokens`); validate it."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise MapperError(f"trace file {str(path)!r} does not exist")
    try:
        frame = pd.read_csv(path, nrows=MAX_TRACE_ROWS + 1, dtype=str, keep_default_na=False)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise MapperError(f"trace {path.name}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    columns = [c.strip() for c in frame.columns]
    frame.columns = columns
    unknown = [c for c in columns if c not in TRACE_COLUMNS]
    if "arrival_s" not in columns or unknown:
        raise MapperError(
            f"trace {path.name}: columns must be arrival_s and optionally prompt_tokens,"
            f" output_tokens (found {', '.join(columns) or 'none'})"
        )
    if len(frame) > MAX_TRACE_ROWS:
        raise MapperError(f"trace {path.name}: more than {limits.limit_text('MAX_TRACE_ROWS')} rows")
    if len(frame) == 0:
        raise MapperError(f"trace {path.name}: no rows")
    arrays = {}
    for column in columns:
        values = pd.to_numeric(frame[column].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values < 0)
        if column != "arrival_s":  # beyond MAX_TOKENS a count would wrap when made an int64 (1e20 did)
            bad |= (values != np.floor(values)) | (values < 1) | (values > limits.MAX_TOKENS)
        if bad.any():
            row = int(np.argmax(bad))
            want = (
                "a finite number >= 0"
                if column == "arrival_s"
                else f"an integer from 1 to {limits.limit_text('MAX_TOKENS')}"
            )
            raise MapperError(
                f"trace {path.name}: row {row + 1} (line {row + 2}), column {column}:"
                f" {bounded(repr(frame[column].iloc[row]), 60)} is not {want}"  # a quoted field can hold the file
            )
        arrays[column] = values
    arrival = arrays["arrival_s"]
    decreasing = np.diff(arrival) < 0
    if decreasing.any():
        row = int(np.argmax(decreasing)) + 1
        raise MapperError(
            f"trace {path.name}: row {row + 1} (line {row + 2}), column arrival_s: {arrival[row]!r}"
            f" is earlier than the row before ({arrival[row - 1]!r}); arrivals must not decrease"
        )
    tokens = {c: arrays[c].astype(np.int64) if c in arrays else None for c in TRACE_COLUMNS[1:]}
    return Trace(arrival, tokens["prompt_tokens"], tokens["output_tokens"], source=path.name)
