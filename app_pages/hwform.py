"""The sidebar's hardware section: a built-in profile, or the user's own (an uploaded profile
file, or a built-in's values edited in a form). The engine validates; its message names the field.
"""
from __future__ import annotations

import copy

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, ui


def flatten(profile: dict) -> pd.DataFrame:
    """Every numeric {value, source} leaf of a profile dict as a row: field, value, source."""
    rows = []

    def walk(node: dict, path: str) -> None:
        for key, item in node.items():
            here = f"{path}.{key}" if path else key
            if isinstance(item, dict) and "value" in item:
                if isinstance(item["value"], (int, float)) and not isinstance(item["value"], bool):
                    rows.append({"field": here, "value": float(item["value"]), "source": item.get("source", "")})
            elif isinstance(item, dict):
                walk(item, here)

    walk(profile, "")
    return pd.DataFrame(rows, columns=["field", "value", "source"])


def unflatten(profile: dict, table: pd.DataFrame) -> dict:
    """The profile dict with the table's values written back (ints stay ints)."""
    out = copy.deepcopy(profile)
    for row in table.itertuples(index=False):
        node = out
        *parents, leaf = row.field.split(".")
        for p in parents:
            node = node[p]
        old = node[leaf]["value"]
        node[leaf]["value"] = int(row.value) if isinstance(old, int) and float(row.value).is_integer() else row.value
    return out


def _errors(message: str) -> list[str]:
    """One line per field when the engine's message lists several ('a: ...; b: ...')."""
    return [part.strip() for part in message.split("; ") if part.strip()] or [message]


def _accept(spec, label: str) -> None:
    ss = st.session_state
    try:
        ss["custom_hw"] = mapper.load_hardware(spec)
        ss.pop("hw_errors", None)
        ss["hw"] = ss["_custom_label"]
    except mapper.MapperError as e:
        ss["hw_errors"] = [f"{label}: {line}" for line in _errors(str(e))]


def _on_profile_upload() -> None:
    f = st.session_state.get("hw_file")
    if f is not None:
        _accept(f.getvalue(), f.name)


def _on_apply(base: mapper.HardwareProfile) -> None:
    """Form callback: the editor's edited rows written into the base profile, then validated."""
    table = flatten(base.to_dict())
    for row, changes in st.session_state.get("hw_editor", {}).get("edited_rows", {}).items():
        if "value" in changes and changes["value"] is not None:
            table.loc[int(row), "value"] = float(changes["value"])
    edited = unflatten(base.to_dict(), table)
    edited["meta"]["display_name"] = base.display_name.removesuffix(" (edited)") + " (edited)"
    _accept(edited, "edited profile")


def _edit_form(base: mapper.HardwareProfile) -> None:
    with st.form("hw_form", border=False):
        st.caption(f"Values of {ui.md(base.display_name)}; edit, then apply. Units are in the field names.")
        st.data_editor(flatten(base.to_dict()), key="hw_editor", hide_index=True, height=260,
                       disabled=["field", "source"], width="stretch",
                       column_config={"value": st.column_config.NumberColumn(format="engineering")})
        st.form_submit_button("Apply edited profile", on_click=_on_apply, args=(base,))


def hardware_section(custom_label: str) -> mapper.HardwareProfile | None:
    ss = st.session_state
    ss["_custom_label"] = custom_label
    st.subheader("Hardware")
    names = mapper.list_hardware() + ([custom_label] if "custom_hw" in ss else [])
    if ss.get("hw") not in names:
        ss["hw"] = "h100-sxm"
    custom = ss.get("custom_hw")
    st.selectbox("Hardware", names, key="hw", label_visibility="collapsed",
                 format_func=lambda n: f"custom: {custom.display_name}" if n == custom_label and custom else n)
    chosen = custom if ss["hw"] == custom_label else cache.hardware(ss["hw"])
    with st.expander("Your own profile (upload or edit)"):
        st.file_uploader("Profile file (.toml or .json)", type=["toml", "json"], key="hw_file",
                         on_change=_on_profile_upload)
        _edit_form(chosen)
    for line in ss.get("hw_errors", []):
        st.error(ui.md(line))
    return chosen
