"""The dashboard's session: one typed object under one st.session_state key, read with get() and
changed with update(), so every page reads the same named fields (no string keys spread over pages).

Widget keys (the sidebar's "dtype", "dim_batch"...) stay in st.session_state because Streamlit keeps a
widget's value there; only the sidebar (app_pages/state.py) touches them, and it hands the pages a Selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import streamlit as st

import mapper

KEY = "dashboard"


@dataclass(frozen=True)
class Upload:
    """An uploaded model that the engine accepted."""

    name: str
    data: bytes = field(repr=False)
    sha256: str
    roles: dict[str, str]  # each free dim (and branch input) -> its role, by the engine's reading

    @property
    def model_key(self) -> str:
        return f"upload:{self.sha256}"


@dataclass(frozen=True)
class Selection:
    """What the sidebar chose: the model, its bindings, the profile, the plan and the serving question."""

    model_label: str
    model_key: str  # zoo name, or "upload:<sha256>"
    source: object = field(repr=False)  # zoo name or uploaded bytes
    dims: tuple  # ((name, value), ...)
    hw: mapper.HardwareProfile = field(repr=False)
    hw_choice: str  # the profile selectbox's value: a built-in's name or the custom entry
    options: mapper.PlanOptions
    serving: mapper.ServeRequest

    @property
    def key(self) -> tuple:
        return (self.model_key, self.dims, self.hw.sha256, self.options)


@dataclass(frozen=True)
class DashboardState:
    initialised: bool = False  # defaults and the link's query params applied
    query_notice: str | None = None  # a link value that was ignored, shown once
    pending_upload: tuple[str, bytes] | None = None  # handled like a sidebar upload on the next run (test hook)
    upload: Upload | None = None
    upload_error: str | None = None
    custom_hw: mapper.HardwareProfile | None = None  # the user's own profile (uploaded or edited)
    hw_errors: tuple[str, ...] = ()  # one line per bad field of the last profile tried
    selection: Selection | None = None
    result: mapper.MappingResult | None = None
    doc: dict | None = None  # mapper.mapping_document(result)
    map_error: str | None = None
    picked_kernel: str | None = None  # Kernels and Roofline share the drill-down
    runs: dict = field(default_factory=dict)  # button-run results (sweep, compare): name -> (key, value)
    validation: tuple | None = None  # (selection key, before, after) from the Validation page
    measured: tuple | None = None  # (selection key, comparison): the sheet's Measured section
    link_options: dict = field(default_factory=dict)  # plan options the link set that have no sidebar widget


def get() -> DashboardState:
    state = st.session_state.get(KEY)
    if state is None:
        state = st.session_state[KEY] = DashboardState()
    return state


def update(**changes) -> DashboardState:
    state = st.session_state[KEY] = replace(get(), **changes)
    return state


def stored_run(name: str):
    """(key, value) of a button-run result, or None."""
    return get().runs.get(name)


def store_run(name: str, key: tuple, value) -> None:
    update(runs={**get().runs, name: (key, value)})
