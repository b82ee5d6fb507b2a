"""Power for the Power page: the engine's power curve against batch size (mapper.power_curve), cached by
content keys, and the model's batch dims. Serving is the assessment's (session.assessment): no page serves."""

from __future__ import annotations

import streamlit as st

import mapper
from app_pages import cache


def batch_dims(sel) -> set[str]:
    """The model's batch dims by the engine's reading (batch, batch_size...)."""
    return {name for name, role in cache.model_of(sel).roles.items() if role == "batch"}


@st.cache_data(max_entries=32, show_spinner=False)
def power(key: tuple, batches: tuple, _sel):
    """Power figures against batch size (mapper.power_curve)."""
    return mapper.power_curve(cache.model_of(_sel), _sel.hw, _sel.options, batches, dict(_sel.dims))
