"""The dashboard's session: one typed object under one st.session_state key, read with get() and
changed with update(), so every page reads the same named fields (no string keys spread over pages).

The session's token (`token`) names this browser to the run store: what it records is its own, and only it reads
those runs back. It lives in a cookie, not the URL: a link is made to be shared (app_pages/link.py writes the
view into it), and a shared link must not hand over the session; a cookie is one browser's, and a reload sends
it back. Streamlit reads cookies (st.context.cookies, from the request that opened the session) but has no
call to set one, so a script in an empty iframe writes it from the browser (`remember_token`).

Widget keys (the sidebar's "dtype", "dim_batch"...) stay in st.session_state because Streamlit keeps a
widget's value there; only the sidebar (app_pages/state.py) touches them, and it hands the pages a Selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import streamlit as st

import mapper

KEY = "dashboard"
COOKIE = "mapper_session"  # the cookie that carries the session token
COOKIE_MAX_AGE_S = 30 * 86_400  # a browser keeps its runs for 30 days of not coming back (the cookie's life)


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
    serving: mapper.Question  # the load and the latency targets: part of the slice's one assessment
    training: mapper.TrainOptions | None = None  # the training mode's plan (None: the inference slice)

    @property
    def key(self) -> tuple:
        return (self.model_key, self.dims, self.hw.sha256, self.options, self.serving)


@dataclass(frozen=True)
class DashboardState:
    initialised: bool = False  # defaults and the link's query params applied
    token: str | None = field(default=None, repr=False)  # this browser's session token (its cookie's), once read
    query_notice: str | None = None  # a link value that was ignored, shown once
    pending_upload: tuple[str, bytes] | None = None  # handled like a sidebar upload on the next run (test hook)
    upload: Upload | None = None
    upload_error: str | None = None
    custom_hw: mapper.HardwareProfile | None = None  # the user's own profile (uploaded or edited)
    hw_errors: tuple[str, ...] = ()  # one line per bad field of the last profile tried
    selection: Selection | None = None
    result: mapper.MappingResult | None = None  # the assessment's result (its Serving and assessment sections)
    doc: dict | None = None  # mapper.mapping_document(result)
    assessment: mapper.Assessment | None = None  # the slice's one assessment: every page renders it
    map_error: str | None = None
    training: dict | None = None  # the training mode's document (mapper.training_document), else None
    training_error: str | None = None
    picked_kernel: str | None = None  # Kernels and Roofline share the drill-down
    runs: dict = field(default_factory=dict)  # button-run results (sweep, compare): name -> (key, value)
    validation: tuple | None = None  # (selection key, before, after) from the Validation page
    measured: tuple | None = None  # (selection key, comparison): the sheet's Measured section
    trace: tuple | None = None  # (selection key, file name, bytes): the uploaded run the Review's step 3 scores
    link_options: dict = field(default_factory=dict)  # plan options the link set that have no sidebar widget
    pending_view: dict | None = None  # a view another page opens (a Search point): the sidebar takes it next run


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


def token() -> str:
    """This browser's session token: its cookie's when it sent a well-formed one, else a new one (remembered
    for the session; `remember_token` writes it into the browser)."""
    state = get()
    if state.token is None:
        sent = _sent_cookie()
        state = update(token=sent if mapper.is_session_token(sent) else mapper.new_session_token())
    return state.token


def _sent_cookie() -> object:
    return st.context.cookies.get(COOKIE)  # user's text (or nothing): token() checks its form


def remember_token() -> None:
    """Write the token into the browser's cookie while the browser did not send it (a first visit, a cleared or
    forged cookie): a reload then sends it and finds the same runs. The component runs in a same-origin iframe
    (Streamlit's sandbox allows it) and sets the cookie on the page, not on its own about:srcdoc document,
    which keeps no cookies. The token is 43 URL-safe characters (mapper.is_session_token): nothing to escape."""
    current = token()
    if _sent_cookie() == current:
        return
    st.iframe(
        "<script>window.parent.document.cookie = "
        f"'{COOKIE}={current}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; SameSite=Strict'"
        " + (window.parent.location.protocol === 'https:' ? '; Secure' : '');</script>",
        height="content",
    )
