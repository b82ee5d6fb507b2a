"""Validation: predicted against measured. Measure the model on this machine (ONNX Runtime CPU) with a
probed profile, or score an ORT profile / PyTorch trace made elsewhere against the selected profile;
calibrate the probed profile and see the error before and after."""

import dataclasses
import html
import tempfile

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import mapper
from app_pages import cache, session, ui

MAX_LOCAL_FLOPS = 50e9  # run on this machine only what finishes in a few seconds per run
MAX_LOCAL_WEIGHT_BYTES = 1e9
PEOPLE_FORMAT = {  # ui.people_table's headers: shares as percentages
    header: st.column_config.NumberColumn(format="percent")
    for header in ("error", "measured MFU", "roofline efficiency", "class agreement")
}
LAYER_COLUMNS = (
    "layer_type", "predicted_s", "measured_s", "error", "achieved_flops_per_s", "achieved_bytes_per_s",
    "roofline_efficiency", "measured_mfu", "predicted_class", "measured_class", "class_agreement",
)  # fmt: skip
KERNEL_COLUMNS = (
    "kernel", "layer_type", "predicted_s", "measured_s", "error", "achieved_flops_per_s", "achieved_bytes_per_s",
    "roofline_efficiency", "predicted_class", "measured_class",
)  # fmt: skip

doc, result, sel = ui.current()
st.title("Validation")
header = st.empty()  # filled at the end, once this run knows the profile it measured on


def write_header() -> None:
    """What each tab maps against: the local run on this machine's probed CPU profile (never the sidebar's
    accelerator), an imported run against the sidebar's profile."""
    stored = session.get().validation
    measured_on = stored[3] if stored and stored[0] == sel.key else "a profile probed on this machine's CPU"
    header.caption(
        f"{ui.md(doc['model']['name'])} · measured here on {ui.md(measured_on)} (ONNX Runtime CPU, fp32); "
        f"an uploaded run is scored against {ui.md(sel.hw.display_name)} · model sha {doc['model']['sha256'][:12]}"
    )


st.write(
    "An analytical model that is never checked against a real run is a guess. Measure this model here, or "
    "upload a profile of a real run elsewhere (any ONNX Runtime execution provider, a PyTorch Chrome trace, or an "
    "Nsight Systems SQLite export)."
)


@st.cache_resource(show_spinner=False)
def probed_profile() -> mapper.HardwareProfile:
    with tempfile.TemporaryDirectory() as tmp:
        mapper.probe_machine(f"{tmp}/probed.toml")
        return mapper.load_hardware(f"{tmp}/probed.toml")


@st.cache_data(show_spinner=False, max_entries=8)
def measured(model_key: str, dims: tuple, _source, runs: int, _on_wait=None):
    """One run at a time per two cores across every session (mapper.measure_model waits its turn, telling
    _on_wait its place in line, or refuses in one line after a while)."""
    return mapper.measure_model(_source, dict(dims), threads=1, runs=runs, on_wait=_on_wait)


def _scatter(kernels: pd.DataFrame, label: str) -> go.Figure:
    """Each measured kernel group at (measured, predicted), one trace per layer type, and the diagonal; both
    axes in the unit of the longest time (µs, ms or s)."""
    times = kernels[["measured_s", "predicted_s"]]
    scale, unit = ui.unit_for(float(times.max().max()))
    fig = go.Figure()
    for layer, group in kernels.groupby("layer_type"):
        fig.add_scatter(
            x=group["measured_s"] / scale,
            y=group["predicted_s"] / scale,
            mode="markers",
            name=html.escape(layer),
            text=[html.escape(k[0]) for k in group["kernels"]],
            customdata=[[ui.duration(m), ui.duration(p)] for m, p in zip(group["measured_s"], group["predicted_s"])],
            hovertemplate="%{text}<br>measured %{customdata[0]}, predicted %{customdata[1]}<extra></extra>",
        )
    lo, hi = times.min().min() / scale, times.max().max() / scale
    fig.add_scatter(
        x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured", line=dict(dash="dash", color="#444")
    )
    fig.update_layout(
        title=f"Kernels: predicted against measured ({html.escape(label)})",
        height=460,
        **mapper.CHART_LAYOUT,
        xaxis=dict(type="log", title=f"measured ({unit}, log scale)"),
        yaxis=dict(type="log", title=f"predicted ({unit}, log scale)"),
    )
    return fig


def show(comparison: dict, label: str) -> None:
    row = comparison["model"]
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("Predicted", ui.ms(row["predicted_s"]))
    c2.metric(
        "Measured p50",
        ui.ms(row["measured_p50_s"]),
        help=f"p95 {ui.ms(row['measured_p95_s'])}, p99 {ui.ms(row['measured_p99_s'])}",
    )
    c3.metric("Error", "—" if row["error"] is None else f"{row['error']:+.0%}", help=comparison["definitions"]["error"])
    c4.metric("Measured MFU", ui.pct(row["measured_mfu"]), help=f"predicted {ui.pct(row['predicted_mfu'])}")
    c5.metric(
        "Measured memory stall",
        ui.pct(row["measured_memory_stall_fraction"]),
        help=f"{comparison['definitions']['measured_memory_stall_fraction']}; predicted"
        f" {ui.pct(row['predicted_memory_stall_fraction'])} of the predicted latency",
    )
    kernels = pd.DataFrame([k for k in comparison["kernels"] if k["measured_s"] > 0 and k["predicted_s"] > 0])
    if not kernels.empty:
        st.plotly_chart(_scatter(kernels, label), key=f"scatter_{label}")
    layers = pd.DataFrame(comparison["layers"])
    st.subheader("Error by layer type")
    st.dataframe(
        ui.people_table(layers[list(LAYER_COLUMNS)]),
        hide_index=True,
        width="stretch",
        column_config=PEOPLE_FORMAT,
    )
    st.subheader("Largest mispredictions")
    top = pd.DataFrame(comparison["kernels"][:10])
    if not top.empty:
        top = top.assign(kernel=top["kernels"].map(lambda ks: ks[0]))
        st.dataframe(
            ui.people_table(top[list(KERNEL_COLUMNS)]),
            hide_index=True,
            width="stretch",
            column_config=PEOPLE_FORMAT,
        )
    if comparison["unmatched"]:
        st.caption(
            f"Measured time not matched to any kernel: {ui.ms(row['unmatched_s'])} in "
            f"{len(comparison['unmatched'])} nodes."
        )


local, imported = st.tabs(["Measure on this machine", "Upload a profile from a real run"])
with local:
    small = doc["totals"]["flops"] <= MAX_LOCAL_FLOPS and doc["totals"]["weight_bytes"] <= MAX_LOCAL_WEIGHT_BYTES
    if not small:
        st.info(
            "This model is too large to run on this machine's CPU in the page; use `mapper measure` on a "
            "machine that can, and upload its profile in the next tab."
        )
    else:
        runs = st.slider("timed runs", 3, 30, 5, key="validation_runs")
        if st.button("Probe this machine and measure", type="primary"):
            with st.spinner("Probing this machine (a few seconds) and running the model on ONNX Runtime ..."):
                waiting = st.empty()
                try:
                    hw = probed_profile()
                    m = measured(
                        sel.model_key,
                        sel.dims,
                        sel.source,
                        runs,
                        lambda place: waiting.info(
                            f"Other sessions are measuring on this machine: waiting for a turn, #{place} in line."
                        ),
                    )
                    waiting.empty()
                    options = dataclasses.replace(sel.options, dtype="fp32", tp=1, pp=1, dp=1)
                    workload = cache.workload(sel.model_key, sel.dims, sel.source, sel.model_label)
                    before = mapper.compare_measured(mapper.map_workload(workload, hw, options), m)
                    tuned = mapper.load_hardware(
                        {k: v for k, v in mapper.calibrate(hw.to_dict(), [m]).items() if k != "calibration"}
                    )
                    after = mapper.compare_measured(mapper.map_workload(workload, tuned, options), m)
                    session.update(validation=(sel.key, before, after, f"{hw.display_name} ({hw.name})"))
                except mapper.MapperError as e:
                    waiting.empty()
                    ui.show_error("Cannot measure this model", e)
        stored = session.get().validation
        if stored and stored[0] == sel.key:
            _, before, after, _ = stored
            show(before, "probed profile")
            st.subheader("Calibration: before and after")
            calibration = pd.DataFrame(
                [
                    {"profile": "probed", **{k: before["model"][k] for k in ("predicted_s", "error")}},
                    {"profile": "calibrated on this run", **{k: after["model"][k] for k in ("predicted_s", "error")}},
                ]
            )
            st.dataframe(ui.people_table(calibration), hide_index=True, column_config=PEOPLE_FORMAT)
            st.caption(
                "Calibrated on this very run (in-sample): the held-out errors over twelve models are in "
                "docs/validation.md (`bench/validate_cpu.py`)."
            )
            session.update(measured=(sel.key, before))
with imported:
    upload = st.file_uploader(
        "ONNX Runtime profile JSON, PyTorch profiler trace (.json, .json.gz) or Nsight Systems export (.sqlite)",
        type=["json", "gz", "sqlite"],
        key="profile_upload",
    )
    if upload is not None:
        try:
            m = mapper.measurement_from_profile(upload.getvalue(), sel.source)
            comparison = mapper.compare_measured(result, m)
            show(comparison, f"{upload.name} against {sel.hw.display_name}")
            if m.trace:  # a PyTorch trace or an Nsight export: how much of its time the mapping accounts for
                st.caption(
                    f"{m.trace['runtime']}: {m.trace['matched_share']:.1%} of {m.trace['unit']} time matched a "
                    f"mapped kernel; idle between them {m.trace['idle_s'] * 1e3:.2f} ms per run."
                )
            session.update(measured=(sel.key, comparison), trace=(sel.key, upload.name, upload.getvalue()))
        except mapper.MapperError as e:
            ui.show_error("Cannot use this profile", e)
if (session.get().measured or (None,))[0] == sel.key:
    st.caption("The Export page's sheet now carries a Measured section for this comparison.")
write_header()
