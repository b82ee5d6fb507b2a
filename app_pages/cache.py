"""Cached calls into the engine's public API: the only place the dashboard runs the engine.

Keys are content hashes (model sha / zoo name, profile sha, options), never the raw bytes,
so a rerun that changes nothing costs a dictionary lookup. Models, their workloads and mappings are shared by
every session within one byte budget (app_pages/held.py); what is recorded and read back from the run store is
one session's (its token, app_pages/session.py), and the team's when the operator shares it.
"""

from __future__ import annotations

import gc
import itertools

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

import mapper
from app_pages import held

STORE = mapper.store_url_from_env()  # the operator's run store, read once at server start; None: record nothing
TEAM_VIEW = mapper.team_view_from_env()  # the shared view's name ($MAPPER_TEAM_VIEW), or None: no runs shared


@st.cache_resource(max_entries=32, show_spinner=False)
def hardware(name: str) -> mapper.HardwareProfile:
    return mapper.load_hardware(name)


def _session_alive(session_id: str) -> bool:
    """Whether a session still runs here (Streamlit's runtime; a disconnected one waiting to resume does not)."""
    return not runtime.exists() or runtime.get_instance().is_active_session(session_id)


def _holder() -> str | None:
    """The session asking (it holds the model it asks for), or None outside a session."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


MODELS = held.HeldModels(  # the operator may set both (MAPPER_MODEL_CACHE_BYTES, MAPPER_MODEL_IDLE_SECONDS)
    mapper.setting("MODEL_CACHE_BYTES"),
    mapper.setting("MODEL_IDLE_SECONDS"),
    mapper.MAPPINGS_PER_MODEL,
    alive=_session_alive,
)


def model(model_key: str, _source, label: str = "") -> mapper.ModelHandle:
    """The model parsed once (it owns every structure cache of the model, shared by all sessions), keyed by its
    content (zoo name or upload:<sha256>) and `label`: an upload's file name names a model whose graph name is an
    exporter's default, and one session's file name must not show in another's sheet."""
    return MODELS.model((model_key, label), lambda: mapper.open_model(_source, file_name=label or None), _holder())


def workload(model_key: str, dims: tuple, _source, label: str = "") -> mapper.Workload:
    """The workload at `dims`: the handle keeps it (caches.WORKLOAD_ENTRIES), and its bytes are the handle's."""
    return model(model_key, _source, label).bind(dict(dims))


def model_of(sel) -> mapper.ModelHandle:
    """The selection's model handle (the same entry the sidebar and the mappings use)."""
    return model(sel.model_key, sel.source, sel.model_label)


# Kept with the model, not copied per session: the result is frozen and no page writes into the document, so
# sessions share the one object (Llama-2-70B's result and document are 2.6 MB).
def mapping(
    model_key: str,
    dims: tuple,
    hw_key: str,
    options: mapper.PlanOptions,
    question: mapper.Question,
    _source,
    _hw,
    label: str = "",
) -> tuple:
    """(MappingResult, mapping document, Assessment) for one (model, bindings, profile, options, serving
    question): the slice's one assessment, as `mapper map` makes it (mapper.assess_slice). Read only."""

    def assessed() -> tuple:
        handle = model(model_key, _source, label)
        assessment = mapper.assess_slice(handle, dict(dims), _hw, options, question)
        kept()
        return assessment.result, assessment.document(), assessment

    model(model_key, _source, label)  # held (and charged) before its mapping is
    return MODELS.mapping((model_key, label), (dims, hw_key, options, question), assessed, _holder())


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


def sheet(key: tuple, fmt: str, _result) -> bytes:
    """The result's sheet: keyed by the selection and the model's name (an upload's file name is one session's)."""
    return _sheet((*key, _result.model_name), fmt, _result)


@st.cache_data(max_entries=32, show_spinner=False)
def _sheet(key: tuple, fmt: str, _result) -> bytes:
    return mapper.sheet_bytes(_result, fmt)


@st.cache_data(max_entries=256, show_spinner=False)
def recorded(key: tuple, owner: str, _result, _doc: dict) -> int:
    """Record one mapping in the operator's store as `owner`'s (a session's token's hash), once per distinct
    mapping (`key`, with the model's name) and owner on this server."""
    sheet_file = (sheet(key, "xlsx", _result), "xlsx")
    return mapper.record_run(STORE, _doc, command="dashboard", sheet=sheet_file, owner=owner)


@st.cache_data(max_entries=16, show_spinner=False)
def training(
    model_key: str, options: mapper.TrainOptions, hw_sha: str, _source, _hw, label: str = "", levers: bool = False
) -> dict:
    """The training step's document (`mapper train --json`'s), with its review's fix and, with `levers`, every lever
    re-mapped; kept by the model's key, the training plan and the profile's hash."""
    handle = model(model_key, _source, label)
    return mapper.training_document(mapper.review_training(handle, _hw, options, levers=levers))


@st.cache_data(max_entries=16, show_spinner=False)
def search_sheet(key: tuple, fmt: str, _result) -> bytes:
    """A search's sheet (xlsx) or answer (json), keyed by the search's model, profile and spec."""
    return mapper.search_sheet_bytes(_result, fmt)


@st.cache_data(max_entries=64, show_spinner=False)
def recorded_search(key: tuple, owner: str, _result) -> int:
    """Record a search in the operator's store as `owner`'s, once per search and owner on this server."""
    sheet_file = (search_sheet(key, "xlsx", _result), "xlsx")
    return mapper.record_run(STORE, mapper.search_record(_result), command="search", sheet=sheet_file, owner=owner)
