"""A writer of runs for the store's concurrency test, in a module of its own: each writer is a spawned interpreter
(as CI jobs are), and this is all it imports (the test module's Streamlit and CLI would cost each ~1 s more)."""

from __future__ import annotations

import mapper
from mapper.store import schema
from mapper.store.record import record

RUNS_EACH = 200  # the acceptance figure


def doc(p99_s: float, mfu: float = 0.5, model: str = "net", dims: dict | None = None) -> dict:
    """A small mapping-shaped document: the slice key's fields and the KPIs a trend reads."""
    return {
        "model": {"name": model, "sha256": "a" * 64, "dims": dims or {"batch": 1}},
        "hardware": {"name": "h100-sxm", "sha256": "b" * 64},
        "options": {"dtype": "bf16"},
        "engine_version": mapper.__version__,
        "totals": {"latency_s": p99_s / 2, "mfu": mfu, "throughput_per_s": 1 / p99_s},
        "serving": {"p50_s": p99_s / 2, "p99_s": p99_s},
    }


def write_runs(url: str, writer: int) -> None:
    engine = schema.open_engine(url)
    for i in range(RUNS_EACH):
        record(engine, doc(1.0 + i, dims={"writer": writer, "i": i}), command="map", revision=f"w{writer}")
