"""Shared page helpers: units formatted at the edge, the current result, KPI tiles, notices,
the verdict sentence and the one kernel drill-down (used by Kernels and Roofline).

Names come from the model, the upload's file name and the profile, so they can hold markdown (an
image beacon), HTML or streamlit directives: every one goes into markdown through md(), and no page
passes data with unsafe_allow_html.
"""

from __future__ import annotations

import gc
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pandas as pd
import streamlit as st

import mapper
from app_pages import session
from app_pages.people import (  # noqa: F401  people's units for tables and axes, read as ui.* by the pages
    BYTE_UNITS,
    TABLE_TIME_UNITS,
    field_text,
    header_text,
    people_config,
    people_table,
    unit_for,
)


def md(value) -> str:
    """Data as markdown that shows it verbatim (mapper.markdown_text): escape the interpolated data, never the
    template."""
    return mapper.markdown_text(value)


def show_error(what: str, exc: BaseException) -> None:
    """One line in the page for a rejected input: the message escaped and bounded (mapper.core.errors)."""
    st.error(f"{what}: {md(mapper.error_line(exc))}")


LOG = logging.getLogger("mapper.app")
TIMING_LOG = os.environ.get("MAPPER_APP_TIMING")  # a file: each timed section's seconds are appended to it


@contextmanager
def timed(section: str) -> Iterator[None]:
    """Time a part of a script run into the MAPPER_APP_TIMING file (bench/bench_dashboard.py reads it): its
    name, seconds and the wall-clock time it ended, to set beside a browser's clock."""
    if not TIMING_LOG:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        with open(TIMING_LOG, "a", encoding="utf-8") as log:
            log.write(f"{section}\t{time.perf_counter() - start:.4f}\n")


OLDEST_GENERATION = 2  # the cyclic collector's pass over the whole heap (gc.get_threshold has three)
_pass_started = [0.0]


def _time_full_passes(phase: str, info: dict) -> None:
    """gc callback: each full pass of the cyclic collector into the timing log (it stops every thread)."""
    if phase == "start":
        _pass_started[0] = time.perf_counter()
    elif info["generation"] == OLDEST_GENERATION:
        with open(TIMING_LOG, "a", encoding="utf-8") as log:
            log.write(f"full gc pass\t{time.perf_counter() - _pass_started[0]:.4f}\n")


if TIMING_LOG:
    gc.callbacks.append(_time_full_passes)


def guarded(run: Callable[[], None]) -> None:
    """Run the sidebar and the page; an error nobody expected is one line in the page, never a traceback
    with the server's paths (the traceback goes to the server's log). st.stop, st.rerun and
    st.switch_page raise ScriptControlException, a BaseException, which passes through."""
    try:
        run()
    except mapper.MapperError as e:
        show_error("Cannot show this page", e)
    except Exception as e:
        LOG.exception("the page failed")
        st.error(f"This page stopped on an unexpected error ({type(e).__name__}); the details are in the server's log.")


def color_of(bottleneck: str) -> str:
    """The class colour the engine's charts use, so a class looks the same on every page."""
    return mapper.class_color(bottleneck)


def verdict(doc: dict) -> str:
    """One sentence: the first mechanism failure (capacity, latency target, dominant class) and who acts,
    in the sheet's own wording."""
    return mapper.verdict_sentence(doc)


PRESENTATION_FONT_PX = 18  # chart type in presentation mode (plotly's default is 12 px): legible on a 720p screen


def scaled(fig):
    """A chart with its type scaled up in presentation mode (the sidebar's toggle), else as it is."""
    if st.session_state.get("presentation"):  # read only: state.py owns the toggle
        fig.update_layout(font=dict(size=PRESENTATION_FONT_PX))
    return fig


def chart(figure, doc: dict, key: str) -> None:
    """One of the engine's document charts (mapper.timeline_figure, mapper.layer_share_figure) in the page."""
    st.plotly_chart(scaled(figure(doc)), key=key)


def run_stored(name: str, key: tuple, label: str, disabled: bool, work, failure: str, hint: str):
    """A button that runs `work(progress)` with a progress bar and keeps the result for `key` in the
    session under `name`; the stored result, or the hint and a stop when there is none for this key."""
    if st.button(label, type="primary", disabled=disabled):
        bar = st.progress(0.0, text="mapping ...")
        try:
            session.store_run(
                name, key, work(lambda done, total: bar.progress(done / max(total, 1), text=f"{done}/{total} slices"))
            )
        except mapper.MapperError as e:
            show_error(failure, e)
        bar.empty()
    stored = session.stored_run(name)
    if stored is None or stored[0] != key:
        st.info(hint)
        st.stop()
    return stored[1]


def roofline(doc: dict, hw, highlight: str | None = None, height: int = 480):
    """The engine's roofline figure at this profile's roofs, with one kernel ringed."""
    fig = mapper.roofline_figure(doc, hw_peak=doc["totals"]["peak_flops_per_s"], dram_bw=hw.dram_bandwidth_bytes_per_s)
    k = next((k for k in doc["kernels"] if k["name"] == highlight), None)
    if k and (k["intensity_flop_per_byte"] or 0) > 0 and k["achieved_flops_per_s"] > 0:
        fig.add_scatter(
            x=[k["intensity_flop_per_byte"]],
            y=[k["achieved_flops_per_s"]],
            mode="markers",
            name="selected kernel",
            hoverinfo="skip",
            marker=dict(symbol="circle-open", size=34, color="#000", line=dict(width=3)),
        )
    fig.update_layout(height=height)
    return scaled(fig)


duration = mapper.format_duration  # times for people (µs, ms, s, min), shared with the CLI and the sheet
ms = duration  # the older name some pages still call
energy = mapper.format_energy  # µJ, mJ, J, kJ
num = mapper.format_number  # 3 significant figures, thousands separated, with a unit


def lower_percentiles(p50: float, p95: float) -> str:
    """'p50 512 µs · p95 984 µs': the note under a p99 tile."""
    return f"p50 {duration(p50)} · p95 {duration(p95)}"


def tflops(flops_per_s: float | None) -> str:
    return "—" if flops_per_s is None else f"{flops_per_s / 1e12:,.1f} TFLOP/s"


def gbps(bytes_per_s: float | None) -> str:
    return "—" if bytes_per_s is None else f"{bytes_per_s / 1e9:,.0f} GB/s"


size = mapper.format_bytes  # bytes in KB/MB/GB/TB, shared with the CLI


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f}%"


def current() -> tuple[dict, object, object]:
    """(mapping document, MappingResult, Selection) of this run; stops the page if there is none."""
    state = session.get()
    if state.map_error:
        st.error(md(state.map_error))
    if state.doc is None:
        st.info("No mapping yet: choose a model and a valid hardware profile in the sidebar.")
        st.stop()
    if state.map_error:
        st.warning("Showing the last mapping that succeeded.")
    return state.doc, state.result, state.selection


def header(title: str, doc: dict) -> None:
    dims = ", ".join(f"{k}={v}" for k, v in doc["model"]["dims"].items())
    st.title(title)
    st.caption(
        f"{md(doc['model']['name'])} ({md(dims)}) on {md(doc['hardware']['name'])} · "
        f"{md(mapper.precision_text(doc))} · "
        f"fusion {doc['options']['fusion']} · model sha {doc['model']['sha256'][:12]} · "
        f"profile sha {doc['hardware']['sha256'][:12]} · engine {doc.get('engine_version', '')}"
    )
    reproduce(doc)


def reproduce(doc: dict) -> None:
    """The `mapper map` line that maps this slice again (st.code shows names verbatim: no markdown)."""
    st.code(doc["reproduce"], language="bash", wrap_lines=True)
    files = []
    if shlex.split(doc["reproduce"])[-1] == "MODEL.onnx":  # an upload, whatever its name (the engine checks sha)
        files.append(f"MODEL.onnx is the uploaded file (sha256 {doc['model']['sha256']})")
    if doc["hardware"]["name"] not in mapper.list_hardware():
        files.append(f"{doc['hardware']['name']}.json is the user's own profile (the Export page writes it)")
    if files:
        st.caption(md("; ".join(files)))


def notices(doc: dict) -> None:
    """Unmodeled ops and precision caveats, always visible where they matter."""
    if doc["unmodeled"]:
        ops = sorted({u["op_type"] for u in doc["unmodeled"]})
        st.warning(
            f"**{len(doc['unmodeled'])} unmodeled op(s)** ({md(', '.join(ops))}): their time is not in the totals."
        )
        with st.expander("Unmodeled ops"):
            unmodeled = pd.DataFrame(doc["unmodeled"]).rename(columns={"op_type": "op type"})
            st.dataframe(unmodeled, hide_index=True, width="stretch")
    for caveat in doc["caveats"]:
        st.warning(f"**Precision caveat:** {md(caveat)}")


def kernel_table(doc: dict) -> pd.DataFrame:
    """One row per kernel, numbers kept numeric (the dataframe formats them)."""
    total = doc["totals"]["latency_s"] or 1.0
    rows = [
        {
            "kernel": k["name"],
            "class": k["bottleneck"],
            "owner": k["owner"],
            "layer type": k["layer_type"],
            "ops": " + ".join(k["ops"]),
            "time (µs)": k["time_s"] * 1e6,
            "share": k["time_s"] / total,
            "stall": k["stall_fraction"],
            "TFLOP/s": k["achieved_flops_per_s"] / 1e12,
            "FLOP/B": k["intensity_flop_per_byte"],
            "engine": k["engine"],
            "tile": k["tile"],
            "evidence": k["evidence"],
        }
        for k in doc["kernels"]
    ]
    return pd.DataFrame(rows)


TABLE_FORMAT = {
    "time (µs)": st.column_config.NumberColumn(format="%.1f"),
    "share": st.column_config.ProgressColumn(format="percent", min_value=0.0, max_value=1.0),
    "stall": st.column_config.NumberColumn(format="percent"),
    "TFLOP/s": st.column_config.NumberColumn(format="%.1f"),
    "FLOP/B": st.column_config.NumberColumn(format="%.1f"),
}


def drilldown(doc: dict, hw, name: str, chart: bool = True) -> None:
    """Everything the engine says about one kernel: fusion, placement, tiling, headroom, the tile search's
    runners-up on the kernel's own basis, its roofline point (`chart=False` where the page draws it)."""
    k = next((k for k in doc["kernels"] if k["name"] == name), None)
    if k is None:
        return
    st.subheader(f"Kernel {md(k['name'])}")
    st.markdown(f"**{md(k['bottleneck'])}** — {md(k['evidence'])}  \n**Owner:** {md(k['owner'])}")
    c = st.columns(4)
    c[0].metric("Time", duration(k["time_s"]), help="launch, sync and the power cap included")
    c[1].metric("At its roofline", duration(k["roofline_time_s"]), help=ROOFLINE_HELP)
    c[2].metric(
        "Speed-up without its bottleneck",
        f"{k['speedup_if_removed']:.2f}×",
        help=f"its time over its time with the {k['bottleneck']} cost removed",
    )
    c[3].metric(
        "Achieved", tflops(k["achieved_flops_per_s"]), help=f"intensity {num(k['intensity_flop_per_byte'], 'FLOP/B')}"
    )
    left, right = st.columns(2)
    with left:
        st.markdown("**Fusion and placement**")
        st.table(_placement_table(k))
    with right:
        st.markdown("**Tiling assumptions**")
        st.table(_tiling_table(k))
    st.markdown(
        f"**Time split**: compute {duration(k['compute_time_s'])} · memory {duration(k['memory_time_s'])}"
        f" · launch {duration(k['overhead_s'])} · sync {duration(k['sync_s'])} · stall {pct(k['stall_fraction'])}"
        f" · DRAM {size(k['dram_bytes'])} · {num(k['flops'] / 1e9, 'GFLOP')}"
    )
    if k["alternatives"]:
        st.markdown(
            "**Alternatives considered**: the tile search's runners-up, each timed as the kernel (launch incl.)"
        )
        st.dataframe(alternatives_table(k), hide_index=True, width="stretch", column_config=ALTERNATIVES_FORMAT)
    if chart:
        st.plotly_chart(roofline(doc, hw, highlight=k["name"], height=380), key=f"drill_roof_{k['name']}")


ROOFLINE_HELP = "its FLOPs at the engine's peak or its bytes at DRAM bandwidth, whichever is longer"
ALTERNATIVES_FORMAT = {
    "wave efficiency": st.column_config.NumberColumn(format="percent"),
    "time (µs)": st.column_config.NumberColumn(format="%.2f"),
}


def alternatives_table(k: dict) -> pd.DataFrame:
    """The chosen tile and its runners-up, all on the kernel's basis (the document's alternatives' time_s)."""
    chosen = {"tile": k["tile"], "split_k": k["split_k"], "waves": k["waves"], "wave_efficiency": k["wave_efficiency"]}
    rows = [("chosen", chosen | {"time_s": k["time_s"]})] + [("runner-up", a) for a in k["alternatives"]]
    return pd.DataFrame(
        [
            {
                "": role,
                "tile": a["tile"],
                "split-K": a["split_k"],
                "waves": a["waves"],
                "wave efficiency": a["wave_efficiency"],
                "time (µs)": a["time_s"] * 1e6,
            }
            for role, a in rows
        ]
    )


def _field_table(rows: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame({"": [label for label, _ in rows], "value": [value for _, value in rows]}).set_index("")


def _placement_table(k: dict) -> pd.DataFrame:
    return _field_table(
        [
            ("fused ops", " + ".join(k["ops"])),
            ("rule", k["rule"]),
            ("engine", k["engine"]),
            ("layout", k["layout"] or "—"),
            ("dtype", k["dtype"]),
            ("nodes", ", ".join(k["nodes"][:8]) + (" …" if len(k["nodes"]) > 8 else "")),
            ("note", k["note"] or "—"),
        ]
    )


def _tiling_table(k: dict) -> pd.DataFrame:
    sram = k["sram_bytes"]
    return _field_table(
        [
            ("tile (m×n×k)", k["tile"] or "—"),
            ("stages", num(k["stages"])),
            ("split-K", num(k["split_k"])),
            ("tiles", num(k["tiles"])),
            ("waves", num(k["waves"])),
            ("wave efficiency", pct(k["wave_efficiency"])),
            ("padding efficiency", pct(k["padding_efficiency"])),
            ("SRAM per unit", "—" if sram is None else f"{sram / 1024:,.0f} KiB"),
            ("block size", num(k["block_size"])),
            ("passes", num(k["passes"])),
        ]
    )
