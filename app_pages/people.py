"""People's units for tables and chart axes (read through app_pages/ui.py): each column or axis with a unit
suffix in the one unit that suits its largest value, named in its header; other keys in words. Only the
engine's public names (mapper.DURATION_UNITS): the pages format, the engine computes."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import mapper

WORDS = {"mfu": "MFU", "k": "K"}  # a key's words as people write them (split_k -> split K)


def header_text(column: str) -> str:
    """A column's key as a person reads it: 'plan_kept' -> 'plan kept', 'measured_mfu' -> 'measured MFU'."""
    return " ".join(WORDS.get(word, word) for word in str(column).split("_"))


TABLE_TIME_UNITS = mapper.DURATION_UNITS[2:]  # s, ms, µs, ns: one per column or axis
BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B"))
FLOP_UNITS = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1.0, "FLOP"))
ENERGY_UNITS = ((1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ"), (1e-9, "nJ"), (1e-12, "pJ"))


def _per_s(units: tuple) -> tuple:
    return tuple((scale, f"{unit}/s") for scale, unit in units)


# A key's unit suffix -> the units its values may take, the largest first (first match wins)
COLUMN_UNITS = (
    ("_bytes_per_s", _per_s(BYTE_UNITS)),
    ("_flops_per_s", _per_s(FLOP_UNITS)),
    ("_ops_per_s", ((1e12, "Tops/s"), (1e9, "Gops/s"), (1e6, "Mops/s"), (1.0, "ops/s"))),
    ("_per_s", ((1.0, "/s"),)),
    ("_s", TABLE_TIME_UNITS),
    ("_bytes", BYTE_UNITS),
    ("flops", FLOP_UNITS),
    ("_hz", ((1e9, "GHz"), (1e6, "MHz"), (1.0, "Hz"))),
    ("_j", ENERGY_UNITS),
    ("_w", ((1.0, "W"),)),
)
SHARE_KEYS = ("fraction", "share", "mfu", "utilization", "error")  # a share of one: shown as a percentage


def unit_for(largest: float, units=TABLE_TIME_UNITS) -> tuple[float, str]:
    """(scale, unit) for figures whose largest is `largest`: the largest unit it is at least one of, so a column
    or an axis reads 0.5-999 of it (120 ms, not 120,000 µs)."""
    return next(((s, u) for s, u in units if abs(largest) >= s), units[-1])


def units_of(key: str) -> tuple[str, tuple]:
    """(suffix, units) of a key, or of its last segment that has one ('compute.matrix_peak_flops_per_s.bf16')."""
    for segment in reversed(str(key).split(".")):
        found = next(((s, u) for s, u in COLUMN_UNITS if segment.endswith(s)), None)
        if found:
            return found
    return "", ()


def field_text(key: str, value: float) -> str:
    """One value for people by its key's unit: 'memory.dram_bandwidth_bytes_per_s' 3.35e12 -> '3.35 TB/s'."""
    suffix, units = units_of(key)
    if suffix == "_s":
        return mapper.format_duration(value)
    scale, unit = unit_for(value, units) if units else (1.0, "")
    return mapper.format_number(value / scale, unit)


def people_table(table: pd.DataFrame) -> pd.DataFrame:
    """An engine table for people: each column with a unit suffix (`*_s`, `*_bytes`, `*flops`, `*_j`) in the one
    unit that suits its largest value, named in its header ('predicted (ms)', 'dram (GB)'); other keys in words."""
    out, names = table.copy(), {}
    for column in table.columns:
        name = str(column)
        suffix, units = units_of(name) if "." not in name else ("", ())
        if units and pd.api.types.is_numeric_dtype(table[column]) and not pd.api.types.is_bool_dtype(table[column]):
            scale, unit = unit_for(float(table[column].abs().max()) if len(table) else 0.0, units)
            out[column] = table[column] / scale
            stem = header_text(name[: -len(suffix)].rstrip("_"))
            names[column] = f"{stem} ({unit})" if stem else unit
        else:
            names[column] = header_text(column)
            whole = pd.api.types.is_float_dtype(table[column]) and table[column].dropna().map(float.is_integer).all()
            if whole and not name.endswith(
                SHARE_KEYS
            ):  # a count with gaps (seq of a model without one): 128, not 128.0
                out[column] = table[column].astype("Int64")
    return out.rename(columns=names)


def people_config(table: pd.DataFrame) -> dict:
    """column_config for people_table(table): its numeric shares of one as percentages."""
    numeric = [c for c in table.columns if pd.api.types.is_float_dtype(table[c])]
    shares = [c for c in numeric if any(str(c).endswith(k) for k in SHARE_KEYS)]
    return {header_text(c): st.column_config.NumberColumn(format="percent") for c in shares}
