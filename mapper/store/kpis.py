"""What the CLI and the dashboard need of the run store before any database is opened: the environment
variables that name the team's store and its shared view, and the KPIs a trend can follow. No SQLAlchemy
here: `mapper --help` and every command that records nothing stay quick."""

from __future__ import annotations

import os

STORE_ENV = "MAPPER_STORE"  # the store every command and the dashboard record into when set
# The team view's name: set, the dashboard shows every session the runs recorded by no session (CLI, CI) under
# it, labelled as shared; unset or empty, a session sees only its own runs (docs/threat-model.md).
TEAM_VIEW_ENV = "MAPPER_TEAM_VIEW"
TEAM_VIEW_NAME_CHARS = 80  # of the name shown as the shared section's heading


def store_url_from_env() -> str | None:
    """$MAPPER_STORE, or None: the operator's store (the dashboard reads it once, at server start)."""
    return os.environ.get(STORE_ENV) or None


def team_view_from_env() -> str | None:
    """$MAPPER_TEAM_VIEW (the team view's name, bounded), or None when the operator shares no runs."""
    name = " ".join(os.environ.get(TEAM_VIEW_ENV, "").split())[:TEAM_VIEW_NAME_CHARS]
    return name or None


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
    "measured-mfu": ("measured_mfu", True),
    "measured-stall": ("measured_memory_stall_fraction", False),
}
PRIMARY_ORDER = ("p99", "ttft", "latency", "throughput")  # a slice's primary metric: the first it has
MEASURED_OF = {"latency": "measured_p50_s", "p50": "measured_p50_s", "p99": "measured_p99_s"}
DEFAULT_THRESHOLD = 0.05  # the dashboard's flag: a 5% move, the review checklist's usual tolerance
