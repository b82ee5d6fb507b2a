"""Display units shared by the engine's two clients (the CLI and the dashboard)."""

from __future__ import annotations

import math


def format_bytes(n_bytes: float | None) -> str:
    """Bytes in the unit that keeps a few significant digits (KB, MB, GB, TB; decimal, as datasheets)."""
    if n_bytes is None:
        return "—"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.3g} {unit}"
    return f"{n_bytes:,.0f} B"


def _significant(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant figures in plain notation, thousands separated (never 8.35e+03)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{round(x, decimals):,.{decimals}f}"


# (scale, unit) from the largest: a value takes the first unit it is at least one of.
DURATION_UNITS = ((3600.0, "h"), (60.0, "min"), (1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
ENERGY_UNITS = ((1e3, "kJ"), (1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ"))
FLOP_UNITS = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"), (1.0, "FLOP"))
SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
MINUTE_S = 60.0  # from a minute up a duration is minutes (or hours) and seconds, never "216 s"


def _scaled(value: float, units: tuple[tuple[float, str], ...]) -> str:
    size = abs(value)
    for scale, unit in units:  # the first unit the value is at least one of, else the smallest
        if size >= scale:
            break
    return f"{_significant(value / scale)} {unit}"


def format_duration(seconds: float | None) -> str:
    """A time for people: 3 significant figures in ns, µs, ms or s; minutes and hours past a minute."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds >= MINUTE_S:
        minutes, rest = divmod(round(seconds), 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours} h {minutes} min" if hours else f"{minutes} min {rest} s"
    return _scaled(seconds, DURATION_UNITS)


def format_energy(joules: float | None) -> str:
    """An energy for people: 3 significant figures in µJ, mJ, J or kJ (never 17,386.82 mJ)."""
    return "—" if joules is None or not math.isfinite(joules) else _scaled(joules, ENERGY_UNITS)


def format_flops(flops: float | None) -> str:
    """A FLOP count for people: 3 significant figures in FLOP, kFLOP, MFLOP, GFLOP, TFLOP or PFLOP."""
    return "—" if flops is None or not math.isfinite(flops) else _scaled(flops, FLOP_UNITS)


INTEGER_UP_TO = 1e15  # a whole number below this is a count (stages 2, waves 9): shown whole, never "2.00"


def format_number(x: float | None, unit: str = "") -> str:
    """A plain quantity to 3 significant figures, thousands separated, with its unit; a whole number whole."""
    if x is None or not math.isfinite(x):
        return "—"
    whole = float(x).is_integer() and abs(x) < INTEGER_UP_TO
    return (f"{int(x):,}" if whole else _significant(x)) + (f" {unit}" if unit else "")


def duration_unit(largest_s: float | None, units: tuple[tuple[float, str], ...] = DURATION_UNITS[2:]) -> tuple:
    """(scale, unit) for a set of times whose largest is `largest_s`: the largest unit it is at least one of
    (s, ms, µs, ns by default), so an axis or a column reads 0.5-999 of it (120 ms, not 120,000 µs)."""
    size = abs(largest_s or 0.0)
    return next(((s, u) for s, u in units if size >= s), units[-1])


def format_rate(per_s: float | None, unit: str) -> str:
    """A rate in SI prefixes: 3.35 TB/s, 989 TFLOP/s, 1.98 GHz (`unit` the thing counted: B, FLOP, Hz)."""
    if per_s is None or not math.isfinite(per_s):
        return "—"
    return _scaled(per_s, tuple((scale, f"{prefix}{unit}") for scale, prefix in SI_PREFIXES))


def format_percent(share: float | None) -> str:
    """A share of one as a percentage: 0.243 -> 24.3%."""
    return "—" if share is None or not math.isfinite(share) else f"{share * 100:.1f}%"


def format_field(key: str, value: object) -> str:
    """A document field for people by its key's unit suffix (FIELD_UNITS: `*_bytes_per_s` 3.35 TB/s, `*_per_s` a
    rate, `*_s` a time, `*_bytes` bytes, `*_hz` GHz, `*_w` watts, `*_j` energy, `*_fraction` a percentage); other
    numbers to 3 significant figures, whole ones whole; text as it is."""
    if not isinstance(value, float | int) or isinstance(value, bool):
        return str(value)
    for suffix, shown in FIELD_UNITS:
        if key.endswith(suffix):
            return shown(float(value))
    return format_number(float(value)) if isinstance(value, float) else f"{value:,}"


# A key's unit suffix -> how it reads (first match wins: the longer suffixes first)
FIELD_UNITS = (
    ("_bytes_per_s", lambda v: format_rate(v, "B/s")),
    ("_flops_per_s", lambda v: format_rate(v, "FLOP/s")),
    ("_per_s", lambda v: format_number(v, "/s")),
    ("_s", format_duration),
    ("_bytes", format_bytes),
    ("_flops", lambda v: format_rate(v, "FLOP")),
    ("_hz", lambda v: format_rate(v, "Hz")),
    ("_w", lambda v: format_number(v, "W")),
    ("_j", format_energy),
    ("_fraction", format_percent),
    ("_share", format_percent),
    ("utilization", format_percent),
    ("mfu", format_percent),
)


UNIT_SUFFIXES = ("_per_s", "_s", "_bytes", "_w", "_j")  # a document key's unit, dropped from its label


def field_label(key: str) -> str:
    """A document key as a label people read: its unit suffix dropped (the value carries the unit), words apart
    ("max_batch" -> "max batch", "ttft_p99_s" -> "ttft p99", "offered_rate_per_s" -> "offered rate")."""
    stem = next((key.removesuffix(u) for u in UNIT_SUFFIXES if key.endswith(u) and key != u.lstrip("_")), key)
    return stem.replace("_", " ")


def overload_sentence(offered_per_s: float, capacity_per_s: float) -> str:
    """The one wording of an overload (the dashboard, `mapper serve`, the sheet and the verdict): a queue
    offered more than it can serve grows without bound, so its percentiles only measure the run's length."""
    if not capacity_per_s or offered_per_s <= capacity_per_s:
        return ""
    return (
        f"offered {format_number(offered_per_s)} req/s > capacity {format_number(capacity_per_s)} req/s:"
        " the queue grows without bound"
    )
