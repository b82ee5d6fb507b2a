"""Serving and power helpers shared by Overview, Serving and Power: the batch -> service time
table from cached mappings, and the engine's serving simulation when it has landed.
"""
from __future__ import annotations

import streamlit as st

import mapper
from app_pages import cache, ui


def available() -> bool:
    return hasattr(mapper, "simulate_serving") and hasattr(mapper, "load_curve")


def batch_dims(sel) -> set[str]:
    """The model's batch dims by the engine's reading (batch, batch_size...)."""
    return {name for name, role in cache.dim_roles(sel.model_key, sel.source).items() if role == "batch"}


def with_batch(sel, batch: int) -> tuple:
    """The selection's cache key with the batch dim set (a model without one keeps its dims)."""
    names = batch_dims(sel)
    dims = tuple((k, batch if k in names else v) for k, v in sel.dims)
    return sel.model_key, dims, sel.hw.sha256, sel.options


def service_time(sel):
    """Batch size -> one batch's latency in seconds from the cached mappings (a constant without a batch dim)."""
    if not batch_dims(sel) & {k for k, _ in sel.dims}:
        return cache.mapping(*sel.key, sel.source, sel.hw, sel.model_label)[1]["totals"]["latency_s"]
    return lambda b: cache.mapping(*with_batch(sel, int(b)), sel.source, sel.hw, sel.model_label)[1]["totals"]["latency_s"]


def config(sel):
    """The engine's ServingConfig from the sidebar (the profile's run-to-run jitter)."""
    s = dict(sel.serving)
    return mapper.ServingConfig(policy="dynamic", max_batch=s["max_batch"], max_wait_s=s["max_wait_s"],
                                rate_per_s=s["rate_per_s"], requests=REQUESTS, jitter_cv=sel.hw.jitter_cv,
                                jitter_dist=sel.hw.jitter_dist)


REQUESTS = 20_000  # per simulated load point: p99 from 200 tail samples, fast enough to re-run on a click


@st.cache_data(max_entries=64, show_spinner=False)
def simulate(key: tuple, serving: tuple, _sel):
    """The serving simulation at the sidebar's load (mapper.ServingResult)."""
    return mapper.simulate_serving(service_time(_sel), config(_sel))


@st.cache_data(max_entries=32, show_spinner=False)
def curve(key: tuple, serving: tuple, _sel):
    """p50/p95/p99 against offered load, the knee and the highest rate meeting the p99 target."""
    return mapper.load_curve(service_time(_sel), config(_sel), p99_target_s=dict(serving)["p99_target_s"])


@st.cache_data(max_entries=32, show_spinner=False)
def power(key: tuple, batches: tuple, _sel):
    """Power figures against batch size (mapper.power_curve)."""
    return mapper.power_curve(_sel.source, _sel.hw, mapper.PlanOptions(**dict(_sel.options)), batches, dict(_sel.dims))


def percentiles(sel, result) -> tuple[float, float, float] | None:
    """(p50, p95, p99) request latency in seconds, or None while the serving stage is missing."""
    if not available():
        return None
    try:
        with st.spinner("Simulating requests ..."):
            report = simulate(sel.key, sel.serving, sel)
    except mapper.MapperError as e:
        ui.show_error("Serving simulation", e)
        return None
    return report.p50_s, report.p95_s, report.p99_s
