"""The sidebar's hardware section: a built-in profile, or the user's own (an uploaded profile
file, or a built-in's values edited in a form). The engine flattens, writes back and validates
(mapper.flatten_profile, mapper.edit_profile); its ProfileError names each bad field.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, session, ui

DEFAULT_HW = "h100-sxm"


def flatten(profile: mapper.HardwareProfile) -> pd.DataFrame:
    """The profile's numbers (the engine's flattening) with their sources: field, value, source."""
    rows = [
        {"field": name, "value": float(value), "source": profile.sources.get(name, "")}
        for name, value in mapper.flatten_profile(profile)
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]
    return pd.DataFrame(rows, columns=["field", "value", "source"])


def _accept(load, label: str, custom_label: str) -> None:
    """`load()` gives the profile, or raises the engine's error: one line per bad field."""
    try:
        profile = load()
    except mapper.ProfileError as e:
        session.update(hw_errors=tuple(f"{label}: {line}" for line in e.fields.values()))
        return
    except mapper.MapperError as e:
        session.update(hw_errors=(f"{label}: {mapper.error_line(e)}",))
        return
    session.update(custom_hw=profile, hw_errors=())
    st.session_state["hw"] = custom_label


def _on_profile_upload(custom_label: str) -> None:
    f = st.session_state.get("hw_file")
    if f is not None:
        data = f.getvalue()
        _accept(lambda: mapper.load_hardware(data), f.name, custom_label)


def _on_apply(base: mapper.HardwareProfile, custom_label: str) -> None:
    """Form callback: the editor's edited rows written into the base profile by the engine, then validated."""
    table = flatten(base)
    changes = {
        str(table.loc[int(row), "field"]): float(edit["value"])
        for row, edit in st.session_state.get("hw_editor", {}).get("edited_rows", {}).items()
        if edit.get("value") is not None
    }
    name = base.display_name.removesuffix(" (edited)") + " (edited)"
    _accept(lambda: mapper.edit_profile(base, changes, display_name=name), "edited profile", custom_label)


def _edit_form(base: mapper.HardwareProfile, custom_label: str) -> None:
    with st.form("hw_form", border=False):
        st.caption(f"Values of {ui.md(base.display_name)}; edit, then apply. Units are in the field names.")
        st.data_editor(
            flatten(base),
            key="hw_editor",
            hide_index=True,
            height=260,
            disabled=["field", "source"],
            width="stretch",
            column_order=("value", "field", "source"),  # the value first: the sidebar is narrow, the names long
            column_config={
                "value": st.column_config.NumberColumn(format="engineering", width="small"),
                "field": st.column_config.TextColumn(width="medium"),
            },
        )
        st.form_submit_button("Apply edited profile", on_click=_on_apply, args=(base, custom_label))


def hardware_section(custom_label: str) -> tuple[mapper.HardwareProfile, str]:
    """(the chosen profile, the selectbox's value: a built-in's name or `custom_label`)."""
    ss = st.session_state
    st.subheader("Hardware")
    custom = session.get().custom_hw
    names = mapper.list_hardware() + ([custom_label] if custom else [])
    if ss.get("hw") not in names:
        ss["hw"] = DEFAULT_HW
    choice = st.selectbox(
        "Hardware",
        names,
        key="hw",
        label_visibility="collapsed",
        format_func=lambda n: f"custom: {custom.display_name}" if n == custom_label and custom else n,
    )
    chosen = custom if choice == custom_label else cache.hardware(choice)
    # A toggle, not an expander: an expander's content is built and sent on every rerun, closed or open (the
    # editor's table of some 80 values was a tenth of a batch change's script run, and the browser redrew it)
    if st.toggle("Your own profile (upload or edit)", key="hw_own"):
        st.file_uploader(
            "Profile file (.toml or .json)",
            type=["toml", "json"],
            key="hw_file",
            on_change=_on_profile_upload,
            args=(custom_label,),
        )
        _edit_form(chosen, custom_label)
    for line in session.get().hw_errors:
        st.error(ui.md(line))
    return chosen, choice
