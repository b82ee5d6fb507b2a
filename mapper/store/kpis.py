"""What the CLI and the dashboard need of the run store before any database is opened: the environment
variable that names the team's store, and the KPIs a trend can follow. No SQLAlchemy here: `mapper --help`
and every command that records nothing stay quick."""

from __future__ import annotations

import os

STORE_ENV = "MAPPER_STORE"  # the store every command and the dashboard record into when set


def store_url_from_env() -> str | None:
    """$MAPPER_STORE, or None: the operator's store (the dashboard reads it once, at server start)."""
    return os.environ.get(STORE_ENV) or None


# KPI name (what --fail-on-regression and --metric take) -> (column, True where higher is better).
KPIS: dict[str, tuple[str, bool]] = {
    "latency": ("latency_s", False),
    "p50": ("p50_s", False),
    "p95": ("p95_s", False),
    "p99": ("p99_s", False),
    "ttft": ("ttft_p99_s", False),
    "tpot": ("tpot_p99_s", False),
    "throughput": ("throughput_per_s", True),
    "mfu": ("mfu", True),
    "stall": ("memory_stall_fraction", False),
    "ppw": ("perf_per_watt", True),
    "memory": ("memory_per_device_bytes", False),
    "measured": ("measured_p50_s", False),
}
PRIMARY_ORDER = ("p99", "ttft", "latency", "throughput")  # a slice's primary metric: the first it has
MEASURED_OF = {"latency": "measured_p50_s", "p50": "measured_p50_s", "p99": "measured_p99_s"}
DEFAULT_THRESHOLD = 0.05  # the dashboard's flag: a 5% move, the review checklist's usual tolerance
