"""Serving and power for Overview, Serving and Power: the engine's own serving run (mapper.serve_model,
what `mapper serve` runs: continuous batching for a decoder, else a request queue) and power curve, cached
by content keys.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import streamlit as st

import mapper
from app_pages import cache, defaults, ui


def batch_dims(sel) -> set[str]:
    """The model's batch dims by the engine's reading (batch, batch_size...)."""
    return {name for name, role in cache.model_of(sel).roles.items() if role == "batch"}


@st.cache_data(max_entries=64, show_spinner=False)
def _run(
    model_key: str,
    dims: tuple,
    hw_key: str,
    options: mapper.PlanOptions,
    request: mapper.ServeRequest,
    _sel,
    _mapped: mapper.MappingResult | None = None,
) -> tuple[mapper.ServingRun | None, str | None]:
    """(the run, None), or (None, the engine's one line): a refusal is kept too, so a rerun that changes
    only the batch does not ask again (a decoder that leaves no room for its KV cache). `_mapped`: the
    selection's mapping, whose batch the engine then does not map a second time (the run is the same
    with or without it, so it is no part of the key)."""
    try:
        served = mapper.serve_model(cache.model_of(_sel), _sel.hw, options, request, dict(dims) or None, _mapped)
        return served, None
    except mapper.MapperError as e:
        return None, mapper.error_line(e)


def follows_mapping(sel) -> bool:
    """Whether serving runs the mapped batch: until the user sets the sidebar's max batch, the percentiles
    describe the batch and shapes that were mapped (static batches of it; a decoder's sequences)."""
    return sel.serving.serving.max_batch == defaults.DEFAULTS["max_batch"]


def run(sel, curve: bool = True, mapped: mapper.MappingResult | None = None) -> mapper.ServingRun | None:
    """The serving run of the sidebar's question (`curve=False`: without the load curve), or None with a
    warning where the engine cannot serve this selection (`mapped`: the selection's mapping, reused)."""
    served, refusal = attempt(sel, curve, mapped)
    if refusal is not None:  # the mapping stands; only serving is not possible here (like the Devices page's misfit)
        st.warning(f"No serving simulation for this selection: {ui.md(refusal)}")
    return served


def attempt(
    sel, curve: bool = True, mapped: mapper.MappingResult | None = None
) -> tuple[mapper.ServingRun | None, str | None]:
    """(the run, None) or (None, the engine's refusal), for a page that places the refusal itself. While it
    follows the mapped batch the key holds every binding; once the user sets a max batch the scheduler forms
    its own batches, so the key holds the other bindings only and changing the mapped batch re-runs nothing."""
    follow = follows_mapping(sel)
    request = replace(sel.serving, load_curve=curve and sel.serving.load_curve, follow_mapped_batch=follow)
    model = cache.model_of(sel)
    dims = dict(sel.dims) if follow else (model.dims_without_batch(dict(sel.dims)) or {})
    # A request queue's run takes milliseconds, under the spinner's half-second delay: only a decoder's continuous
    # batching (0.4-0.8 s for Llama-2-7B) gets one, which costs a thread start on every rerun
    busy = st.spinner("Simulating requests ...") if mapper.is_decoder(model) else contextlib.nullcontext()
    with busy:
        return _run(sel.model_key, tuple(sorted(dims.items())), sel.hw.sha256, sel.options, request, sel, mapped)


@st.cache_data(max_entries=32, show_spinner=False)
def power(key: tuple, batches: tuple, _sel):
    """Power figures against batch size (mapper.power_curve)."""
    return mapper.power_curve(cache.model_of(_sel), _sel.hw, _sel.options, batches, dict(_sel.dims))
