"""Cached calls into the engine's public API: the only place the dashboard runs the engine.

Keys are content hashes (model sha / zoo name, profile sha, options), never the raw bytes,
so a rerun that changes nothing costs a dictionary lookup.
"""

from __future__ import annotations

import gc
import itertools

import streamlit as st

import mapper

STORE = mapper.store_url_from_env()  # the operator's run store, read once at server start; None: record nothing


@st.cache_resource(max_entries=32, show_spinner=False)
def hardware(name: str) -> mapper.HardwareProfile:
    return mapper.load_hardware(name)


@st.cache_resource(max_entries=8, show_spinner=False)
def model(model_key: str, _source, label: str = "") -> mapper.ModelHandle:
    """The model parsed once (it owns every structure cache of the model, shared by all sessions).
    `label`: an upload's file name (it names a model whose graph name is an exporter's default)."""
    return mapper.open_model(_source, file_name=label or None)


@st.cache_resource(max_entries=16, show_spinner=False)
def workload(model_key: str, dims: tuple, _source, label: str = "") -> mapper.Workload:
    return model(model_key, _source, label).bind(dict(dims))


def model_of(sel) -> mapper.ModelHandle:
    """The selection's model handle (the same entry the sidebar and the mappings use)."""
    return model(sel.model_key, sel.source, sel.model_label)


# A resource, not data: st.cache_data pickles the value on a miss and unpickles it on every hit, and every
# rerun asks (Llama-2-70B's result and document are 2.6 MB: 0.05 s to store, 0.05 s each rerun). The result
# is frozen and no page writes into the document, so sessions can share the one object.
@st.cache_resource(max_entries=64, show_spinner=False)
def mapping(
    model_key: str, dims: tuple, hw_key: str, options: mapper.PlanOptions, _source, _hw, label: str = ""
) -> tuple:
    """(MappingResult, mapping document) for one (model, bindings, profile, options): the slice `mapper map`
    maps (`mapper.map_slice`, its Serving section included). Read only."""
    result = mapper.map_slice(workload(model_key, dims, _source, label), _hw, options)
    doc = mapper.mapping_document(result)
    kept()
    return result, doc


# Every this many new mappings the frozen heap is handed back to the collector for one full pass, which frees
# the cycles frozen meanwhile (Streamlit's per-run messages: ~550 objects per mapping, counted with
# gc.DEBUG_SAVEALL over 11 mappings), so a long-lived server's memory stays bounded; that one pass costs
# what every new mapping used to (0.1-0.3 s).
UNFREEZE_EVERY = 64
_mappings = itertools.count(1)  # new mappings made by this server (not a cache: it holds no value)


def kept() -> None:
    """Move what the server holds now (models, workloads, mappings: long-lived and free of cycles) out of
    the cyclic collector's reach. Without it the first full pass after each new mapping walks the whole
    heap: 0.19-0.27 s after a batch change on Llama-2-70B, between the script's end and the browser's
    redraw (gc.callbacks timed into MAPPER_APP_TIMING). Reference counting still frees an evicted entry."""
    if next(_mappings) % UNFREEZE_EVERY == 0:
        gc.unfreeze()
        gc.collect()
        return
    gc.collect(1)  # the young generations' cycles first: only those already promoted wait for the unfreeze
    gc.freeze()


@st.cache_data(max_entries=32, show_spinner=False)
def sheet(key: tuple, fmt: str, _result) -> bytes:
    return mapper.sheet_bytes(_result, fmt)


@st.cache_data(max_entries=256, show_spinner=False)
def recorded(key: tuple, _result, _doc: dict) -> int:
    """Record one mapping in the operator's store, once per distinct mapping (`key`) on this server."""
    return mapper.record_run(STORE, _doc, command="dashboard", sheet=(sheet(key, "xlsx", _result), "xlsx"))
