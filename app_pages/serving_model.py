"""Serving and power for Overview, Serving and Power: the engine's own serving run (mapper.serve_model,
what `mapper serve` runs: continuous batching for a decoder, else a request queue) and power curve, cached
by content keys.
"""
from __future__ import annotations

from dataclasses import replace

import streamlit as st

import mapper
from app_pages import cache, ui


def batch_dims(sel) -> set[str]:
    """The model's batch dims by the engine's reading (batch, batch_size...)."""
    return {name for name, role in cache.model_of(sel).roles.items() if role == "batch"}


@st.cache_data(max_entries=64, show_spinner=False)
def _run(model_key: str, dims: tuple, hw_key: str, options: mapper.PlanOptions, request: mapper.ServeRequest,
         _sel) -> mapper.ServingRun:
    return mapper.serve_model(cache.model_of(_sel), _sel.hw, options, request, dict(dims) or None)


def run(sel, curve: bool = True) -> mapper.ServingRun:
    """The serving run of the sidebar's question (`curve=False`: without the load curve). The batch is the
    scheduler's to choose, so the key holds the other bindings only: changing batch re-runs nothing."""
    request = sel.serving if curve else replace(sel.serving, load_curve=False)
    dims = cache.model_of(sel).dims_without_batch(dict(sel.dims)) or {}
    return _run(sel.model_key, tuple(sorted(dims.items())), sel.hw.sha256, sel.options, request, sel)


@st.cache_data(max_entries=32, show_spinner=False)
def power(key: tuple, batches: tuple, _sel):
    """Power figures against batch size (mapper.power_curve)."""
    return mapper.power_curve(cache.model_of(_sel), _sel.hw, _sel.options, batches, dict(_sel.dims))


def quick_run(sel) -> mapper.ServingRun | None:
    """The serving run without its load curve (Overview's tiles), or None with a notice where the engine
    cannot serve this selection (a decoder whose weights leave no room for a KV cache)."""
    try:
        with st.spinner("Simulating requests ..."):
            return run(sel, curve=False)
    except mapper.MapperError as e:
        unavailable(e)
        return None


def unavailable(exc: mapper.MapperError) -> None:
    """The mapping stands; only serving is not possible here: a warning, like the Devices page's misfit."""
    st.warning(f"No serving simulation for this selection: {ui.md(mapper.error_line(exc))}")
