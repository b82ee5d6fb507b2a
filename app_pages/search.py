"""Search: the deployment search (mapper.run_search) for the sidebar's model and profile on N devices under the
sidebar's latency targets: the frontier as a scatter (a click on a point opens that plan in the Overview and the
Review), the top configurations with why the others miss, energy per token beside throughput, the sheet, and the
run store. A client of mapper.run_search and its outputs; no math here."""

from dataclasses import replace

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, link, session, ui

TOP_ROWS = 20  # configurations in the table (the sheet has every one)
PAGE_REQUESTS = 64  # requests each configuration serves on the page (the CLI's default 200: `mapper search`)
TPS, PPS, CHUNKS, CAPS = mapper.SEARCH_TPS, mapper.SEARCH_PPS, mapper.SEARCH_CHUNKS, mapper.SEARCH_BATCH_CAPS
QUEUE_NAMES = {"tokens_per_s_per_device": "requests/s per device", "energy_per_token_j": "J per request"}
TARGET_KEYS = {"p99_s": "p99_target_ms", "ttft_p99_s": "ttft_p99_ms", "tpot_p99_s": "tpot_p99_ms"}  # the link's names
SHOWN = {  # the table's columns, by the engine's row keys, in people's words
    "configuration": "configuration",
    "tokens_per_s_per_device": "tok/s per device",
    "energy_per_token_j": "J per token",
    "tokens_per_s_per_user": "tok/s per user",
    "ttft_p99_s": "TTFT p99 (ms)",
    "tpot_p99_s": "TPOT p99 (ms)",
    "latency_p99_s": "request p99 (ms)",
    "failure": "why it misses the SLA",
}

sel = session.get().selection
if sel is None:
    st.info("No selection yet: choose a model and a valid hardware profile in the sidebar.")
    st.stop()
st.title("Search")
st.caption(
    f"{ui.md(sel.model_label)} on N x {ui.md(sel.hw.name)} · the deployment with the most tokens/s per device that"
    " meets the sidebar's latency targets (Serving), the frontier and why the others miss"
)
question = sel.serving
targets = question.targets
c = st.columns(4)
devices = c[0].number_input("devices", min_value=1, max_value=4096, value=2, step=1, key="search_devices")
prompt = c[1].number_input(
    "prompt tokens", min_value=1, value=question.prompt_tokens or 512, step=64, key="search_prompt"
)
output = c[2].number_input(
    "output tokens", min_value=1, value=question.serve.output_tokens, step=16, key="search_output"
)
max_batch = c[3].selectbox("largest batch cap", (8, 32, 128, 512), index=1, key="search_max_batch")
c = st.columns(4)
tps = c[0].multiselect("TP", TPS, default=[1, 2], key="search_tps")
pps = c[1].multiselect("PP", PPS, default=[1], key="search_pps")
kv = c[2].multiselect("KV cache", mapper.KV_DTYPES, default=["same"], key="search_kv")
chunks = c[3].multiselect("chunk tokens", CHUNKS, default=[512], key="search_chunks")
if not targets.given():
    st.warning("Set a latency target in the sidebar (Serving: TTFT, TPOT or request p99): the search needs an SLA.")
    st.stop()
st.caption(
    "Targets (the sidebar's): "
    + ", ".join(
        f"{r.label} {getattr(targets, r.field) * 1e3:g} ms" for r in mapper.TARGET_ROWS if getattr(targets, r.field)
    )
    + f" · other plan options as the sidebar sets them ({ui.md(sel.options.dtype)}, fusion {sel.options.fusion})"
)
spec = mapper.SearchSpec(
    int(devices),
    int(prompt),
    int(output),
    targets=targets,
    requests=PAGE_REQUESTS,
    dtypes=(str(sel.options.dtype),),
    weight_dtypes=(str(sel.options.weight_dtype),),
    kv_dtypes=tuple(kv),
    launches=(str(sel.options.launch),),
    chunks=tuple(sorted(chunks)),
    caps=tuple(b for b in CAPS if b <= max_batch),
    tps=tuple(sorted(tps)),
    pps=tuple(sorted(pps)),
    base=replace(sel.options, tp=1, pp=1, dp=1, ep=1),
)
key = (sel.model_key, sel.hw.sha256, spec)
result = ui.run_stored(
    "search_result",
    key,
    "Search",
    not (tps and pps and kv and chunks),
    lambda progress: mapper.run_search(cache.model_of(sel), sel.hw, spec, sel.model_label),
    "Cannot search this selection",
    "Choose the fleet and the space, then press **Search**.",
)
if cache.STORE is not None:  # recorded like every result: the chosen plan's figures, the sheet beside them
    try:
        cache.recorded_search(key, mapper.session_owner(session.token()), result)
    except mapper.MapperError as e:
        ui.show_error("Not recorded in the run store", e)

doc = result.document()
best = result.best
if best is None:
    st.error("None of the configurations meets the targets: the table says what each one misses.")
elif result.queue:
    st.success(
        f"**Chosen:** {ui.md(best.label)}: {best.tokens_per_s_per_device:,.0f} requests/s per device, request p99"
        f" {ui.duration(best.latency_p99_s)}, {ui.energy(best.energy_per_token_j)} per request."
    )
else:
    st.success(
        f"**Chosen:** {ui.md(best.label)}: {best.tokens_per_s_per_device:,.0f} tok/s per device,"
        f" {best.tokens_per_s_per_user:,.1f} tok/s per user, TTFT p99 {ui.duration(best.ttft_p99_s)},"
        f" TPOT p99 {ui.duration(best.tpot_p99_s)}, {ui.energy(best.energy_per_token_j)} per token."
    )
counts = doc["evaluated"]
pruned = ", ".join(f"{n} {reason}" for reason, n in counts["pruned"].items() if n) or "none"
st.caption(
    f"{counts['configurations']} configurations served ({counts['mapped_steps']} steps mapped), pruned: {pruned};"
    f" {result.wall_s:.1f} s. Click a point to open its plan."
)
event = st.plotly_chart(
    mapper.search_frontier_figure(result), key="search_frontier", on_select="rerun", selection_mode="points"
)
picked = next((p["customdata"] for p in event.selection.points if p.get("customdata") is not None), None)
if picked is not None:
    point = result.points[int(picked)]
    st.markdown(f"**Picked:** {ui.md(point.label)} · {ui.md(point.failure or 'meets the SLA')}")
    view = mapper.options_query(replace(point.plan.options, dp=1)) | {
        "max_batch": str(point.max_batch),
        "scheduler": "chunked",
        "chunk_tokens": str(point.chunk_tokens),
        "prompt_tokens": str(spec.prompt_tokens),
        "output_tokens": str(spec.output_tokens),
        "rate_per_s": repr(point.rate_per_s),
    }
    view |= {name: f"{getattr(targets, f) * 1e3:g}" for f, name in TARGET_KEYS.items() if getattr(targets, f)}
    b = st.columns(2)
    for column, (title, path) in zip(b, (("Overview", "app_pages/overview.py"), ("Review", "app_pages/review.py"))):
        if column.button(f"Open in {title}", key=f"search_open_{title}", icon=":material/open_in_new:"):
            link.queue_view(view)  # the sidebar takes it at the next run's start, before its widgets are drawn
            st.switch_page(path)
if doc["neighbours"]:
    st.markdown("**Beside the choice:** " + "; ".join(ui.md(line) for line in doc["neighbours"]))
for line in doc["sensitivity"]:
    st.markdown(f"- {ui.md(line)}")
if best is not None:
    st.code(doc["best"]["command"], language="bash")

st.subheader("Top configurations")
rows = pd.DataFrame(mapper.search_configurations(result))
columns = [c for c in SHOWN if not (result.queue and c in ("ttft_p99_s", "tpot_p99_s", "tokens_per_s_per_user"))]
shown = rows.head(TOP_ROWS)[columns].copy()
for column in ("ttft_p99_s", "tpot_p99_s", "latency_p99_s"):
    if column in shown:
        shown[column] = shown[column] * 1e3
shown["failure"] = shown["failure"].replace("", "meets the SLA")
st.dataframe(
    shown.rename(columns=SHOWN | (QUEUE_NAMES if result.queue else {})),
    hide_index=True,
    width="stretch",
    column_config={
        SHOWN["tokens_per_s_per_device"]: st.column_config.NumberColumn(format="%.0f"),
        SHOWN["energy_per_token_j"]: st.column_config.NumberColumn(format="%.3f"),
        SHOWN["tokens_per_s_per_user"]: st.column_config.NumberColumn(format="%.1f"),
        **{
            SHOWN[k]: st.column_config.NumberColumn(format="%.1f")
            for k in ("ttft_p99_s", "tpot_p99_s", "latency_p99_s")
        },
    },
)
if doc["pruned"]:
    with st.expander(f"{len(doc['pruned'])} pruned before serving, and why"):
        st.dataframe(pd.DataFrame(doc["pruned"]), hide_index=True, width="stretch")
d = st.columns(2)
stem = f"search_{sel.model_label}_{sel.hw.name}".replace("/", "_").replace(" ", "_")
for column, fmt, label in ((d[0], "xlsx", "Excel workbook (.xlsx)"), (d[1], "json", "Search answer (.json)")):
    column.download_button(
        label,
        cache.search_sheet(key, fmt, result),
        file_name=f"{stem}.{fmt}",
        key=f"search_download_{fmt}",
        icon=":material/download:",
        width="stretch",
    )
