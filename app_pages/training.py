"""The training mode's views: Overview, Layers, Devices and Review render the training step's document
(`mapper.training_document`, made once for the sidebar's choice by app_pages/cache.py) instead of the inference
slice's. Nothing here is computed: every figure is the document's, as `mapper train` prints it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, session, ui


def current() -> dict | None:
    """The training step's document while the sidebar's training mode is on (its error shown, the page stopped,
    where the step cannot be mapped); None in the inference mode."""
    state = session.get()
    if state.training_error:
        st.error(ui.md(state.training_error))
        st.stop()
    return state.training


def _header(title: str, doc: dict) -> None:
    o = doc["options"]
    st.title(title)
    st.caption(
        f"Training step · {ui.md(doc['model'])} on {ui.md(doc['hardware'])} · TP {o['tp']} x PP {o['pp']} x DP"
        f" {o['dp']} x CP {o['cp']} = {o['devices']} devices · {doc['totals']['dtype']} · recompute {o['recompute']}"
        f" · ZeRO {o['zero']} · {o['global_batch']} x {o['seq']} tokens, micro-batch {o['micro_batch']}"
    )


def overview(doc: dict) -> None:
    """The step's KPIs, its memory per device and the first failure with its fix."""
    _header("Overview", doc)
    t, m, review = doc["totals"], doc["memory"], doc["review"]
    st.markdown(f"**First failure.** {ui.md(review['first_failure'])}")
    if review["fix"]:
        st.markdown(f"**Fix.** `{review['fix']['change']}`: {ui.md(review['fix']['text'])}")
    cols = st.columns(4)
    cols[0].metric("Step time", mapper.format_duration(t["step_time_s"]), border=True)
    cols[1].metric("Tokens/s a device", mapper.format_number(t["tokens_per_s_per_device"], "tok/s"), border=True)
    cols[2].metric("MFU", ui.pct(t["mfu"]), f"HFU {ui.pct(t['hfu'])}", delta_color="off", border=True)
    fits = "fits" if m["fits"] else "does not fit"
    cols[3].metric(
        "Memory a device", mapper.format_bytes(m["per_device_bytes"]),
        f"{fits} in {mapper.format_bytes(m['capacity_bytes'])}", delta_color="off", border=True,
    )  # fmt: skip
    shares = st.columns(4)
    for col, (label, key) in zip(
        shares,
        (("Bubble", "bubble_share"), ("Exposed communication", "exposed_communication_share"),
         ("TP collectives", "tensor_parallel_share"), ("Recompute", "recompute_share")),
    ):  # fmt: skip
        col.metric(label, ui.pct(t[key]), border=True)
    st.caption(ui.md(f"FLOP convention: {t['flop_convention']}."))


def layers(doc: dict) -> None:
    """The step's time by layer type (and the bubble, DP, optimizer), and the slowest stage's micro-batch."""
    _header("Layers", doc)
    frame = pd.DataFrame({"share of the step": doc["layer_shares"]})
    st.bar_chart(frame)
    st.dataframe(frame.style.format("{:.1%}"), use_container_width=True)
    st.subheader("The slowest stage's micro-batch")
    st.dataframe(pd.DataFrame({"seconds": doc["micro_batch_s"]}), use_container_width=True)


def devices(doc: dict) -> None:
    """Memory per device broken down, each stage's micro-batch, the data-parallel gradient sync."""
    _header("Devices", doc)
    m = doc["memory"]
    st.subheader(f"Memory per device (pipeline stage {m['stage']}, the busiest)")
    rows = [r for r in mapper.training_sheet(doc) if r["section"] == "memory per device"]
    st.dataframe(
        pd.DataFrame({r["item"]: mapper.format_bytes(r["value"]) for r in rows}, index=["bytes"]).T,
        use_container_width=True,
    )
    st.subheader("Pipeline stages")
    times = {f"stage {i}": mapper.format_duration(s) for i, s in enumerate(doc["stage_times_s"])}
    st.dataframe(pd.DataFrame({"micro-batch": times}), use_container_width=True)
    sync = doc["gradient_sync"]
    st.subheader("Data-parallel gradient sync")
    st.markdown(
        f"{ui.md(sync['kind'])}: {mapper.format_bytes(sync['gradient_bytes'])} of gradients a device,"
        f" {sync['buckets']} buckets, {mapper.format_duration(sync['time_s'])} in all,"
        f" {mapper.format_duration(sync['exposed_s'])} exposed"
    )


def review(doc: dict) -> None:
    """The first failure, its fix and the levers re-mapped (`mapper train --review`: each lever a whole step)."""
    _header("Review", doc)
    sel = session.get().selection
    with st.spinner("Re-mapping the levers (recompute, ZeRO, micro-batch, TP/PP/CP, fp8, overlap) ..."):
        doc = cache.training(sel.model_key, sel.training, sel.hw.sha256, sel.source, sel.hw, sel.model_label, True)
    r = doc["review"]
    st.markdown(f"**First failure.** {ui.md(r['first_failure'])}")
    if r["fix"]:
        st.markdown(f"**Smallest plan that fits.** `{r['fix']['change']}`: {ui.md(r['fix']['text'])}")
    levers = r["levers"]
    st.subheader("Levers, each re-mapped (fitting ones first, then by gain)")
    st.dataframe(
        pd.DataFrame(
            {
                "change": [lever["change"] for lever in levers],
                "tokens/s a device": [
                    mapper.format_number(lever["tokens_per_s_per_device"], "tok/s") for lever in levers
                ],
                "gain": [ui.pct(lever["gain"]) for lever in levers],
                "memory a device": [mapper.format_bytes(lever["per_device_bytes"]) for lever in levers],
                "fits": [lever["fits"] for lever in levers],
                "owner": [lever["owner"] for lever in levers],
                "rollback": [lever["rollback"] for lever in levers],
            }
        ),
        use_container_width=True,
        hide_index=True,
    )
