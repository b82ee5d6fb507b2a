"""The view in the URL: a pasted link opens the same numbers (read once per session), and every rerun
writes the view back. Plan options use the engine's text form (mapper.PLAN_FIELDS); an upload or the
user's own profile travels by name only, and the link says what to upload again."""

from __future__ import annotations

import streamlit as st

import mapper
from app_pages import session
from app_pages.defaults import ATTENTION, CUSTOM_HW, DEFAULTS, QUERY_DIM_MAX, least_value
from app_pages.session import Selection

# Plan options with a sidebar widget: field -> (widget key, option value -> widget value). The link's text
# form is the engine's (mapper.PLAN_FIELDS); a field without a widget rides in the session from the link.
WIDGETS = {
    "dtype": ("dtype", str),
    "weight_dtype": ("weight_dtype", str),
    "fusion": ("fusion", str),
    "layout": ("layout", str),
    "attention_fusion": ("attention", lambda v: next(k for k, x in ATTENTION.items() if x is v)),
    "power_cap_w": ("power_cap_w", lambda v: float(v or 0.0)),
    "tp": ("tp", int),
    "pp": ("pp", int),
    "dp": ("dp", int),
    "sparsity": ("sparsity", str),
    "runtime": ("runtime", str),
    "kv_cache": ("kv_cache", str),
    "kv_dtype": ("kv_dtype", str),
    "gqa_decode": ("gqa_decode", str),
    "launch": ("launch", str),
    "ep": ("ep", int),
    "expert_imbalance": ("expert_imbalance", float),
    "attention_dp": ("attention_dp", bool),
    "expert_tp": ("expert_tp", bool),
}
# Sidebar values a link carries beside the plan: key -> (type, least, most), the widgets' own bounds.
LINKED_VALUES = {
    "rate_per_s": (float, 0.01, 1e7),
    "max_batch": (int, 1, 1024),
    "max_wait_ms": (float, 0.0, 1e5),
    "p99_target_ms": (float, 0.1, 1e7),
    "ttft_p99_ms": (float, 0.1, 1e7),
    "tpot_p99_ms": (float, 0.1, 1e7),
    "prompt_tokens": (int, 1, QUERY_DIM_MAX),
    "output_tokens": (int, 1, QUERY_DIM_MAX),
    "scheduler": (tuple(mapper.SCHEDULERS), None, None),  # a choice: one of the engine's schedulers
    "chunk_tokens": (int, 1, QUERY_DIM_MAX),
    "presentation": (bool, False, True),
    # the training mode (app_pages/state.py's training section): the step's own choices beside the plan's degrees
    "training": (bool, False, True),
    "train_micro_batch": (int, 1, QUERY_DIM_MAX),
    "train_global_batch": (int, 1, QUERY_DIM_MAX),
    "train_seq": (int, 1, QUERY_DIM_MAX),
    "train_recompute": (tuple(mapper.RECOMPUTE_POLICIES), None, None),
    "train_zero": (int, 0, 3),
    "train_cp": (int, 1, mapper.MAX_PARALLEL_DEGREE),
    "train_vp": (int, 1, mapper.MAX_PARALLEL_DEGREE),
}
SHA256_HEX = 64
LINKED_DIMS = ("batch", "seq", "past")  # built-in dims (each named by its role) that a link may carry


def read_link(q) -> list[str]:
    """The link's options, values and dims into the widgets; a notice for each refused or missing one."""
    return _link_options(q) + _link_values(q) + _link_dims(q) + _link_missing(q)


def queue_view(params: dict[str, str]) -> None:
    """Open a view another page names (the Search page's point: its plan and serving values, in the link's text
    form) at the next run: a widget's value cannot change once it is drawn in a run, so the sidebar takes it
    before it draws them (`take_queued_view`)."""
    session.update(pending_view=dict(params))


def take_queued_view() -> list[str]:
    """The queued view into the widgets: every plan option and serving value back to its default, then the
    view's, as a pasted link sets them; a notice for each refused value."""
    params = session.get().pending_view
    if params is None:
        return []
    session.update(pending_view=None)
    for key in [w for w, _ in WIDGETS.values()] + list(LINKED_VALUES):
        if key != "presentation":
            st.session_state[key] = DEFAULTS[key]
    return _link_options(params) + _link_values(params)


def _link_options(q) -> list[str]:
    """The link's plan options into their widgets (or the session, for those without one); refused ones named."""
    values, refused = mapper.options_from_query(q)
    for name, value in values.items():
        if name in WIDGETS:
            key, to_widget = WIDGETS[name]
            st.session_state[key] = to_widget(value)
    session.update(link_options={k: v for k, v in values.items() if k not in WIDGETS})
    return refused


def _link_values(q) -> list[str]:
    notices = []
    for key, (kind, least, most) in LINKED_VALUES.items():
        if key not in q:
            continue
        value = query_value(q[key], kind, least, most)
        if value is None:
            what = (
                f"one of {', '.join(kind)}" if isinstance(kind, tuple) else f"a {kind.__name__} from {least} to {most}"
            )
            notices.append(f"The link's {key}={str(q[key])[:20]!r} is not {what}: ignored.")
        else:
            st.session_state[key] = value
    return notices


def _link_dims(q) -> list[str]:
    notices = []
    for dim in LINKED_DIMS:
        if dim in q:
            value = query_int(q[dim], least_value(dim), QUERY_DIM_MAX)
            if value is None:
                notices.append(
                    f"The link's {dim}={str(q[dim])[:20]!r} is not a whole number from "
                    f"{least_value(dim)} to {QUERY_DIM_MAX}: ignored."
                )
            else:
                st.session_state[f"dim_{dim}"] = value
    return notices


def _link_missing(q) -> list[str]:
    """What a link names but cannot carry: an uploaded model (by its sha256) or the user's own profile."""
    notices = []
    sha = str(q.get("upload", ""))
    if len(sha) == SHA256_HEX and all(ch in "0123456789abcdef" for ch in sha):
        notices.append(
            f"This link is for an uploaded model (sha256 {sha}): upload that model again to see its numbers;"
            f" {st.session_state['model']} is shown until then."
        )
    if "hw_file" in q:
        notices.append(
            f"This link used the user's own profile {str(q['hw_file'])[:64]!r}: upload its file (the Export page"
            f" writes it) to see the same numbers; {st.session_state['hw']} is shown until then."
        )
    return notices


def query_value(text: str, kind: type, least, most):
    """A link's number or switch: strict text, within the widget's bounds; None when it is not one."""
    text = str(text).strip().lower()
    if isinstance(kind, tuple):  # a choice
        return text if text in kind else None
    if kind is bool:
        return {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}.get(text)
    if kind is int:
        return query_int(text, least, most)
    try:
        value = float(text) if text.isascii() and len(text) <= 12 else None
    except ValueError:
        return None
    return value if value is not None and least <= value <= most else None


def query_int(text: str, least: int, most: int) -> int | None:
    """A link's integer: ASCII digits only (str.isdigit accepts '²', which int() refuses), within bounds."""
    text = str(text)
    if not (0 < len(text) <= 8 and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if least <= value <= most else None


PAGE_PARAMS = ("run",)  # a page's own link parameter, kept (Trends: the run whose sheet a chart point opens)


def write_query_params(sel: Selection, page_path: str) -> None:
    """Mirror the view in the URL: every plan option away from its default (the engine's text form), the
    bindings, the serving values and presentation mode; an upload or the user's own profile by name only."""
    params = mapper.options_query(sel.options)
    if sel.model_key in mapper.ZOO_NAMES:
        params["model"] = sel.model_key
    else:  # an upload cannot travel in a link: its sha256 says which file to upload again
        params["upload"] = sel.model_key.removeprefix("upload:")
    if sel.hw_choice != CUSTOM_HW:
        params["hw"] = sel.hw_choice
    else:
        params["hw_file"] = sel.hw.name
    params |= {k: str(v) for k, v in sel.dims if k in LINKED_DIMS}
    ss = st.session_state
    params |= {k: _link_text(ss[k]) for k in LINKED_VALUES if k in ss and ss[k] != DEFAULTS[k]}
    if page_path:
        params["page"] = page_path
    params |= {k: v for k, v in st.query_params.items() if k in PAGE_PARAMS}
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)


def _link_text(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return repr(float(value)).removesuffix(".0") if isinstance(value, float) else str(value)
