"""Sweep: the sidebar's model and profile over a batch x seq grid; heatmaps of MFU, latency and the
dominant bottleneck class, with the cells where the best plan flips marked. Runs in-process."""

import plotly.graph_objects as go
import streamlit as st

import mapper
from app_pages import session, ui

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
SEQS = (64, 128, 256, 512, 1024, 2048, 4096)
MAX_PAGE_SLICES = 400  # a dashboard sweep stays interactive; bigger grids belong to `mapper sweep`


def selection():
    """The sidebar's model, profile and bindings (resnet50 on h100-sxm when the page runs alone); the grid
    sweeps batch and seq and holds the model's other dims (a KV-cache length...) where the sidebar has them."""
    sel = session.get().selection
    if sel is None:
        return "resnet50", "resnet50", mapper.load_hardware("h100-sxm"), ()
    return sel.model_label, sel.source, sel.hw, sel.dims


label, source, hw, held = selection()
st.title("Sweep")
st.caption(
    f"{ui.md(label)} on {ui.md(hw.name)} · every (batch, seq, dtype, fusion) slice mapped in-process;"
    " the best plan is the lowest latency"
)
c = st.columns(4)
batches = c[0].multiselect("batch", BATCHES, default=[1, 8, 32], key="sweep_batches")
seqs = c[1].multiselect(
    "seq", SEQS, default=[128, 512, 2048], key="sweep_seqs", help="ignored by models without a sequence dim"
)
dtypes = c[2].multiselect("dtype", mapper.PLAN_DTYPES, default=["bf16"], key="sweep_dtypes")
fusions = c[3].multiselect("fusion", mapper.FUSION_POLICIES, default=["none", "aggressive"], key="sweep_fusions")
n = len(batches) * max(len(seqs), 1) * len(dtypes) * len(fusions)
st.caption(
    f"{n} slices at most"
    + (f" (over the page limit of {MAX_PAGE_SLICES}: use `mapper sweep`)" if n > MAX_PAGE_SLICES else "")
)


def first_failing_slice() -> None:
    """Where a KPI target first fails along batch and length, from the sidebar's slice and plan (one mapping per
    point of a round-value search: mapper.first_failing_slice, as the Review page and review.json have it)."""
    sel = session.get().selection
    options = sel.options if sel else mapper.PlanOptions()
    c = st.columns([1, 3])
    text = c[0].text_input(
        "KPI target", "p99=50", key="sweep_target", help="p99=MILLISECONDS, mfu=FRACTION or fit (memory fit)"
    )
    if c[1].button("Find the first failing slice", key="sweep_first_fail"):
        try:
            model = mapper.open_model(source)
            dims = dict(model.bind(dict(held)).graph.dims)
            found = mapper.first_failing_slice(model, dims, hw, options, mapper.parse_target(text))
            session.store_run("sweep_first_fail", (label, hw.sha256, held, options, text), found)
        except mapper.MapperError as e:
            ui.show_error("Cannot search this target", e)
    stored = session.stored_run("sweep_first_fail")
    if stored is not None and stored[0] == (label, hw.sha256, held, options, text):
        st.markdown(f"**First failing slice:** {ui.md(stored[1]['sentence'])}.")


key = (label, hw.sha256, tuple(sorted(batches)), tuple(sorted(seqs)), tuple(dtypes), tuple(fusions), held)
result = ui.run_stored(
    "sweep_result",
    key,
    "Run sweep",
    not (batches and seqs and dtypes and fusions) or n > MAX_PAGE_SLICES,
    lambda progress: mapper.run_sweep(
        mapper.SweepSpec((source,), (hw,), tuple(batches), tuple(seqs), tuple(dtypes), tuple(fusions), dims=held),
        progress=progress,
    ),
    "Cannot sweep this selection",
    "Choose the grid and press **Run sweep**.",
)
table = result.table
failed = table[table["status"] != "ok"]
if len(failed):
    st.warning(f"{len(failed)} slice(s) failed: {ui.md(failed['error'].iloc[0])}")
if table["note"].iloc[0]:
    st.info(ui.md(table["note"].iloc[0]))
ok = table[table["status"] == "ok"].copy()
if ok.empty:
    st.stop()


def seq_labels(seq):
    """Heatmap columns: the seq value, or "-" for a model without a sequence dim."""
    return [("-" if seq.isna().iloc[i] else str(int(seq.iloc[i]))) for i in range(len(seq))]


ok["seq_label"] = seq_labels(ok["seq"])


def heatmap(values, title: str, fmt: str, colorscale="Viridis", text=None, hover=None):
    """A batch x seq grid; each cell's text `fmt` of its value (or `text`), the colour its value."""
    z = values.to_numpy(dtype=float)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(values.columns),
            y=[str(b) for b in values.index],
            colorscale=colorscale,
            text=text if text is not None else [[fmt.format(v) for v in row] for row in z],
            texttemplate="%{text}",
            hovertext=hover,
            showscale=colorscale is not None,
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="seq",
        yaxis_title="batch",
        template="plotly_white",
        height=360,
        margin=dict(l=60, r=20, t=50, b=50),
        xaxis_type="category",
        yaxis_type="category",
    )
    return fig


plans = [f"{d} · fusion {f}" for d in dtypes for f in fusions] + ["best plan"]
which = st.radio("plan", plans, index=len(plans) - 1, horizontal=True, key="sweep_plan")
if which == "best plan":
    view = result.best.copy()
    view["seq_label"] = seq_labels(view["seq"])
else:
    d, f = which.split(" · fusion ")
    view = ok[(ok["dtype"] == d) & (ok["fusion"] == f)]
grid = lambda col: view.pivot_table(
    index="batch", columns="seq_label", values=col, aggfunc="first", sort=False
).reindex(sorted(view["batch"].unique()))
c1, c2 = st.columns(2)
mfu = grid("mfu")
c1.plotly_chart(heatmap(mfu * 100, "MFU (%)", "{:.1f}"), key="sweep_mfu")
lat = grid("latency_s")
scale, unit = ui.unit_for(float(lat.abs().max().max()))  # the colour bar in the unit of the longest slice
cells = [[ui.duration(v) for v in row] for row in lat.to_numpy(dtype=float)]  # each cell in its own unit
c2.plotly_chart(heatmap(lat / scale, f"Latency ({unit})", "", colorscale="Reds", text=cells), key="sweep_latency")

classes = sorted(view["dominant_bottleneck"].unique())
code = {c: i for i, c in enumerate(classes)}
cls = view.pivot_table(
    index="batch", columns="seq_label", values="dominant_bottleneck", aggfunc="first", sort=False
).reindex(mfu.index)
flip_cells = set()
for row in result.flips.itertuples():
    fixed_name, fixed_value = row.at.split("=")
    cell = (int(fixed_value), str(row.to)) if row.axis == "seq" else (int(row.to), fixed_value)
    flip_cells.add((cell, row.changed))
marks = {cell: changed for cell, changed in flip_cells}
text = [
    [
        (c.split(" ")[0] if isinstance(c, str) else "")
        + (f"<br>◆ {marks[(b, s)]}" if which == "best plan" and (b, s) in marks else "")
        for s, c in zip(cls.columns, row)
    ]
    for b, row in zip(cls.index, cls.to_numpy())
]
colors = [ui.color_of(c) for c in classes]
scale = (
    [[i / max(len(classes) - 1, 1), colors[i]] for i in range(len(classes))]
    if len(classes) > 1
    else [[0, colors[0]], [1, colors[0]]]
)
fig = heatmap(
    cls.map(lambda c: code.get(c, 0)),
    "Dominant bottleneck class" + (" (◆ the best plan flips here: what changed)" if which == "best plan" else ""),
    "{}",
    colorscale=scale,
    text=text,
    hover=cls.to_numpy(),
)
fig.update_traces(showscale=False)
st.plotly_chart(fig, key="sweep_class")
st.caption("Classes: " + ", ".join(classes))

st.subheader("Where the best plan flips")
if result.flips.empty:
    st.write("The best plan is the same on every slice.")
else:
    st.dataframe(ui.people_table(result.flips), hide_index=True, width="stretch")
st.subheader("First failing slice")
first_failing_slice()  # after the sweep's own button: the grid's run comes first on this page
with st.expander("Every slice"):
    every = table.drop(columns=["model_sha256", "hardware_sha256"])  # the CSV below keeps the keys and numbers
    st.dataframe(ui.people_table(every), hide_index=True, width="stretch", column_config=ui.people_config(every))
st.download_button(
    "Download the table (CSV)", mapper.csv_bytes(table), "sweep.csv", "text/csv"
)  # no formula from a name
