"""Serving and power helpers shared by Overview, Serving and Power: the batch -> service time
table from cached mappings, and the engine's serving simulation when it has landed.
"""
from __future__ import annotations

import dataclasses

import streamlit as st

import mapper
from app_pages import cache


def available() -> bool:
    return hasattr(mapper, "simulate_serving")


def with_batch(sel, batch: int) -> tuple:
    """The selection's cache key with the batch dim set (a model without one keeps its dims)."""
    dims = tuple((k, batch if k == "batch" else v) for k, v in sel.dims)
    return sel.model_key, dims, sel.hw.sha256, sel.options


def service_times(sel, max_batch: int) -> dict[int, float]:
    """Batch size -> one batch's latency in seconds, for 1..max_batch (cached per batch)."""
    if not any(k == "batch" for k, _ in sel.dims):
        max_batch = 1
    out = {}
    for b in range(1, max_batch + 1):
        _, doc = cache.mapping(*with_batch(sel, b), sel.source, sel.hw)
        out[b] = doc["totals"]["latency_s"]
    return out


def config(sel, **overrides):
    """The engine's ServingConfig from the sidebar's serving options."""
    cls = getattr(mapper, "ServingConfig")
    values = dict(sel.serving) | overrides
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


@st.cache_data(max_entries=64, show_spinner=False)
def simulate(key: tuple, serving: tuple, _sel):
    """The serving simulation at the sidebar's load: the engine's report object."""
    times = service_times(_sel, dict(serving)["max_batch"])
    return mapper.simulate_serving(times, config(_sel))


def percentiles(sel, result) -> tuple[float, float, float] | None:
    """(p50, p95, p99) request latency in seconds, or None while the serving stage is missing."""
    if not available():
        return None
    try:
        report = simulate(sel.key, sel.serving, sel)
    except mapper.MapperError as e:
        st.error(f"Serving simulation: {e}")
        return None
    return report.p50_s, report.p95_s, report.p99_s
