"""Compare: a baseline plan against a candidate over a validation matrix (slices x metrics), each cell
colored by its verdict, the rollback boundary, and the kernels whose bottleneck class changed."""

import json

import streamlit as st

import mapper
from app_pages import cache, session, ui

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
SEQS = (64, 128, 256, 512, 1024, 2048, 4096)
COLORS = {
    "improved": "background-color: #c6efce",
    "neutral": "background-color: #ededed",
    "regressed": "background-color: #ffc7ce",
    "error": "background-color: #ffeb9c",
    "candidate": "background-color: #c6efce",
    "baseline": "background-color: #ffc7ce",
}
# Every plan option can differ (the engine's one table of them, mapper.PLAN_FIELDS), or the profile.
FIELDS = {f.name: f for f in mapper.PLAN_FIELDS}
DEFAULT_PAIR = {"fusion": ("none", "aggressive"), "dtype": ("bf16", "fp8"), "hw": ("h100-sxm", "h200-sxm")}
NUMBER_PAIR = {"int": (1, 2), "float": (1.0, 2.0), "optional-float": (0.0, 500.0)}  # a numeric option's two plans
# A plan's own serving (mapper.COMPARE_SERVING_FIELDS): the two plans' starting values. Unset, both are served
# in static batches of the slice's batch at the same load.
SERVING_PAIR = {"rate": (100.0, 200.0), "max_batch": (1, 8), "max_wait_ms": (0.0, 2.0)}
METRIC_LABELS = {m.name: m.label for m in mapper.COMPARE_METRICS}


def selection():
    """The sidebar's model, profile, options and bindings (bert-base on h100-sxm when the page runs alone);
    the matrix sweeps batch and seq and holds the model's other dims at the sidebar's values."""
    sel = session.get().selection
    if sel is None:
        roles = {"batch": "batch", "seq": "seq"}
        return "bert-base", "bert-base", mapper.load_hardware("h100-sxm"), mapper.PlanOptions(dtype="bf16"), (), roles
    return sel.model_label, sel.source, sel.hw, sel.options, sel.dims, cache.model_of(sel).roles


label, source, hw, options, held, roles = selection()
# The matrix starts at the sidebar's batch and sequence (a person compares the slice they are looking at);
# a model without a seq dim gets no seq axis.
bound = {roles.get(name, ""): value for name, value in held}
has_seq = "seq" in roles.values()
st.title("Compare")
st.caption(
    f"{ui.md(label)} · baseline against candidate, every (batch, seq) slice; a slice that regresses on any"
    " metric keeps the baseline (the rollback boundary)"
)


def plan_values(field: str, c) -> tuple[str, str]:
    """The baseline's and the candidate's value of `field` (columns c[1] and c[2]), as plan settings write them."""
    if field in SERVING_PAIR:
        _, kind, least, most = mapper.COMPARE_SERVING_FIELDS[field]
        values = [
            c[i].number_input(role, min_value=kind(least), max_value=kind(most), value=v, key=f"compare_{role}_{field}")
            for i, role, v in zip((1, 2), ("baseline", "candidate"), SERVING_PAIR[field])
        ]
        return tuple(f"{v:g}" for v in values)
    f = FIELDS.get(field)
    if f is not None and not f.choices:  # a number: TP, PP, DP, EP, power cap (0: the profile's TDP), imbalance
        low, high = NUMBER_PAIR[f.kind]
        values = [
            c[i].number_input(role, min_value=low, value=v, key=f"compare_{role}_{field}")
            for i, role, v in ((1, "baseline", low), (2, "candidate", high))
        ]
        return tuple(mapper.format_option(f, (v or None) if f.kind == "optional-float" else v) for v in values)
    choices = f.choices if f is not None else tuple(mapper.list_hardware())
    low, high = DEFAULT_PAIR.get(field, (choices[0], choices[-1]))
    base = c[1].selectbox("baseline", choices, index=choices.index(low), key=f"compare_base_{field}")
    cand = c[2].selectbox("candidate", choices, index=choices.index(high), key=f"compare_cand_{field}")
    return base, cand


c = st.columns(3)
differs = [*FIELDS, "hw", *SERVING_PAIR]
labels = {"hw": "hardware profile"} | {k: f"serving: {v[0]}" for k, v in mapper.COMPARE_SERVING_FIELDS.items()}
field = c[0].selectbox(
    "what differs",
    differs,
    index=differs.index("fusion"),
    format_func=lambda name: labels.get(name) or FIELDS[name].label,
    key="compare_field",
)
base_value, cand_value = plan_values(field, c)
c = st.columns(2)
batch_choices = tuple(sorted({*BATCHES, bound.get("batch", 1)}))
batches = c[0].multiselect("batch", batch_choices, default=[bound.get("batch", 1)], key="compare_batches")
if has_seq:
    seqs = c[1].multiselect("seq", SEQS, default=[128, 512, 4096], key="compare_seqs")
else:
    seqs = []
    c[1].caption("No seq axis: this model has no sequence dim.")
with st.expander("Thresholds (relative change that counts)"):
    cols = st.columns(len(mapper.COMPARE_METRICS))
    thresholds = {
        m.name: cols[i].number_input(
            m.label,
            min_value=0.0,
            max_value=9.99,
            value=m.default_threshold,
            step=0.01,
            format="%.3f",
            key=f"compare_thr_{m.name}",
        )
        for i, m in enumerate(mapper.COMPARE_METRICS)
    }

key = (
    label,
    hw.sha256,
    field,
    base_value,
    cand_value,
    tuple(sorted(batches)),
    tuple(sorted(seqs)),
    tuple(sorted(thresholds.items())),
    options,
    held,
)


def _compare(progress):
    profile = hw if field != "hw" else None
    baseline = mapper.plan_spec(f"{field}={base_value}", source, profile or base_value, options)
    candidate = mapper.plan_spec(f"{field}={cand_value}", source, profile or cand_value, options)
    settings = mapper.CompareSettings(thresholds=thresholds)
    return mapper.compare_plans(
        baseline, candidate, tuple(batches), tuple(seqs), settings, progress=progress, dims=held
    )


result = ui.run_stored(
    "compare_result",
    key,
    "Compare",
    not batches or (has_seq and not seqs),
    _compare,
    "Cannot compare these plans",
    "Choose the two plans and the slices, then press **Compare**.",
)
tone = {"improved": st.success, "neutral": st.info, "mixed": st.warning, "regressed": st.error}[result.overall]
tone(f"**{ui.md(result.summary)}**")
for caveat in result.caveats:
    st.warning(f"**Quality caveat:** {ui.md(caveat)}")
if result.fallback:
    st.caption(f"Fallback: {ui.md(result.fallback)}")
st.caption(f"baseline: {ui.md(result.baseline.describe())} · candidate: {ui.md(result.candidate.describe())}")

st.subheader("Validation matrix")
m = result.matrix
slices = m["batch"].astype(str) + " / " + m["seq"].astype("string").fillna("-")
change = m.assign(slice=slices).pivot_table(
    index="slice", columns="metric", values="change", aggfunc="first", sort=False
)
verdict = m.assign(slice=slices).pivot_table(
    index="slice", columns="metric", values="verdict", aggfunc="first", sort=False
)
order = [x.name for x in mapper.COMPARE_METRICS]
change, verdict = (t[order].rename(columns=METRIC_LABELS) for t in (change, verdict))
styled = change.style.format("{:+.1%}").apply(lambda _: verdict.map(lambda v: COLORS.get(v, "")), axis=None)
st.caption("relative change of the candidate (lower is better for p99 latency and footprint); rows: batch / seq")
st.dataframe(styled, width="stretch")

st.subheader("Rollback boundary")
st.dataframe(
    result.boundary.rename(columns=ui.header_text).style.map(lambda v: COLORS.get(v, ""), subset=["plan kept"]),
    hide_index=True,
    width="stretch",
)

st.subheader("Kernels whose bottleneck class changed")
changes = result.kernel_changes
if changes.empty:
    st.write("No kernel changed class.")
else:
    counts = changes.groupby(["baseline_class", "candidate_class"]).size().rename("kernels").reset_index()
    counts = counts.sort_values("kernels", ascending=False).rename(columns=ui.header_text)
    st.dataframe(counts, hide_index=True, width="stretch")
    with st.expander(f"All {len(changes)} kernels"):
        st.dataframe(ui.people_table(changes), hide_index=True, width="stretch")
with st.expander("Provenance and assumptions"):
    st.json(result.provenance, expanded=False)
doc = mapper.comparison_document(result)
st.download_button(
    "Download the comparison (JSON)", json.dumps(doc, indent=1).encode(), "comparison.json", "application/json"
)
