"""Limits an operator sets for a server or a CLI when it starts: MAPPER_<NAME> in its environment.

The defaults are named in mapper/core/limits.py. A setting is read where it is used (a process's environment is
fixed once it starts), checked to be a whole number in its range (else a one-line MapperError naming the variable),
and named in messages with where its value came from. Limits not listed here are fixed: `setting` returns them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mapper.core import limits
from mapper.core.errors import MapperError

ENV_PREFIX = "MAPPER_"
DAY_S = 86_400


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # as in limits.py; the variable is ENV_PREFIX + name
    low: int
    high: int


SETTINGS = {
    s.name: s
    for s in (
        # below ~256 MiB Python with numpy and ONNX Runtime cannot start; 1 TiB is past any server
        Setting("MEASURE_MEMORY_BYTES", 256 << 20, 1 << 40),
        Setting("MEASURE_CPU_SECONDS", 1, DAY_S),
        Setting("MEASURE_WALL_SECONDS", 1, DAY_S),
        Setting("MEASURE_CONCURRENT", 1, limits.MAX_WORKERS),
        Setting("MEASURE_QUEUE_SECONDS", 0, DAY_S),
        # the dashboard's shared models: 64 MiB holds a few real models; 1 TiB is past any server
        Setting("MODEL_CACHE_BYTES", 64 << 20, 1 << 40),
        Setting("MODEL_IDLE_SECONDS", 1, DAY_S),
    )
}


def default(name: str) -> int:
    """The value a setting has when its variable is not set."""
    if name == "MEASURE_CONCURRENT":  # one measure child per MEASURE_CORES_PER_RUN cores, at least one
        return max(1, (os.cpu_count() or 1) // limits.MEASURE_CORES_PER_RUN)
    return getattr(limits, name)


def setting(name: str) -> int:
    """The value in force: MAPPER_<name> where it is set (checked), else the default; a fixed limit's value."""
    spec = SETTINGS.get(name)
    raw = os.environ.get(ENV_PREFIX + name) if spec else None
    if spec is None or raw is None:
        return default(name)
    try:
        value = int(raw.strip(), 10)  # "4_294_967_296" too
    except ValueError:
        value = None
    if value is None or not spec.low <= value <= spec.high:
        raise MapperError(
            f"{ENV_PREFIX}{name}={raw[:40]!r} is not a whole number from {spec.low} to {spec.high}; "
            f"unset it for the default {default(name)}"
        )
    return value


def setting_text(name: str) -> str:
    """How a setting is named in messages: 'MEASURE_WALL_SECONDS=20 (MAPPER_MEASURE_WALL_SECONDS)' where the
    variable set it, else as limits.limit_text names a limit."""
    value = setting(name)
    if name in SETTINGS and ENV_PREFIX + name in os.environ:
        return f"{name}={value} ({ENV_PREFIX}{name})"
    if name == "MEASURE_CONCURRENT":
        cores = limits.MEASURE_CORES_PER_RUN
        return f"{name}={value} (one per MEASURE_CORES_PER_RUN={cores} cores, mapper/core/limits.py)"
    return limits.limit_text(name)


def check_settings() -> None:
    """Every setting read once: a bad variable is refused before any work starts, not halfway through it."""
    for name in SETTINGS:
        setting(name)
