"""Overview: the slice's one assessment (mapper.assess_slice, made once for the sidebar's selection): the verdict
(the first failure, in the decision table's order), the load its percentiles are at (given or derived), the KPI
tiles, the chosen fix, and the top bottlenecks with their owners. Nothing here is computed: every figure is
the assessment's, as the Review, the sheet and `mapper map` show it."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import training, ui

if (training_doc := training.current()) is not None:  # the sidebar's training mode: the step's view instead
    training.overview(training_doc)
    st.stop()

doc, result, sel = ui.current()
t, a = doc["totals"], doc["assessment"]
decode = a["decode_step"]
ui.header("Overview", doc)
first = mapper.assessed_failure(doc)
with st.container(key="verdict"):  # styled by its key (style.BASE_CSS): no HTML around the model's name
    st.markdown(
        f"**Verdict.** {ui.md(mapper.verdict_sentence(doc))} *First failure: {first.check}; owner: {first.owner}.*"
    )
if first.kpis_unreachable:
    st.warning("Unreachable on this device as mapped: the figures below assume memory it does not have.")
load_line = a["load"]["sentence"]
answer = mapper.answer_rows(doc)  # the assessment's rows, as the Review, the sheet and `mapper map` print them


def tile(column, label: str, value: str, help_text: str, note: str | None = None) -> None:
    """One KPI, with a grey note under its value (what it assumes); marked unreachable where the model does
    not fit the device (the verdict says why)."""
    if first.kpis_unreachable:
        label, help_text = f"{label} (unreachable)", f"unreachable on one device as mapped. {help_text}"
    column.metric(label, value, note, delta_color="off", delta_arrow="off", help=help_text, border=True)


def percentile_tiles(columns) -> None:
    """The p99 of each latency the assessment served at its load (a decoder: TTFT and TPOT per request), with
    the load in the note; "—" at the saturation rate, where no percentile exists."""
    rows = {r.name: r.text for r in answer if r.section == "latency"}
    note = mapper.load_text(doc)
    shown = mapper.headline(doc)
    for column, (label, value) in zip(columns, shown.items(), strict=False):
        name = label.removesuffix(" p99")
        help_text = f"{rows.get(name, 'no percentile: give a rate or a target')}; load {load_line}"
        tile(column, label, value, help_text, note if value != "—" else "give a rate or a target")
    if len(shown) < len(columns):  # a request queue has one latency: the stall takes the second tile
        tile(columns[1], "Memory stall", ui.pct(t["memory_stall_fraction"]), mapper.MEMORY_STALL_DEFINITION)


row1 = st.columns(3)
per = "tok/s" if decode else "/s"
tile(
    row1[0],
    "Throughput",
    ui.num(t["throughput_per_s"], per),
    f"batch {t['batch']} per {ui.duration(t['latency_s'])}" + (" (one decode step: a token each)" if decode else ""),
)
tile(
    row1[1],
    "TPOT (decode step)" if decode else "Batch latency",
    ui.duration(t["latency_s"]),
    "one decode step of the whole batch" if decode else "one batch, end to end on the device",
)
tile(
    row1[2], "MFU", ui.pct(t["mfu"]), f"model FLOPs / (latency × {ui.tflops(t['peak_flops_per_s'])} {t['dtype']} peak)"
)
row2 = st.columns(3)
percentile_tiles(row2[:2])
tile(
    row2[2],
    "Energy / inference",
    ui.energy(t["energy_per_inference_j"]),
    f"{ui.num(t['perf_per_watt'])} inferences/s per W at {ui.num(t['avg_power_w'], 'W')} average",
)
st.caption(f"Load: {ui.md(load_line)}")
fix = [r for r in answer if r.section == "fix"]
if fix:
    st.markdown(" · ".join(f"**{ui.md(r.name.capitalize())}:** {ui.md(r.text)}" for r in fix[:1]))

st.subheader("Top bottlenecks")
with ui.timed("overview group"):
    top = mapper.group_kernels(doc["kernels"], t["latency_s"])[:5]  # repeated layers as one row: "... x 32"
st.dataframe(
    pd.DataFrame(
        [
            {
                "kernel": k["kernel"],
                "share": k["share"],
                "class": k["bottleneck"],
                "owner": k["owner"],  # before the long evidence: in view on a 1280 px screen
                "evidence": k["evidence"],
            }
            for k in top
        ]
    ),
    hide_index=True,
    width="stretch",
    column_config={
        "share": ui.TABLE_FORMAT["share"],
        "kernel": st.column_config.TextColumn(width="medium"),
        "owner": st.column_config.TextColumn(width="medium"),
        "evidence": st.column_config.TextColumn(width="large"),
    },
)
ui.notices(doc)
