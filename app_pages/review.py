"""Review: the meeting in five steps (workload and KPI, first mechanism failure, proving artifact, bounded
fix with owner, validation matrix and rollback), one screen each, and the root-cause packet to download.
A client of mapper.run_review; no math here."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import proof, session, training, ui

if (training_doc := training.current()) is not None:  # the sidebar's training mode: the step's view instead
    training.review(training_doc)
    st.stop()

TABLE_PX, ROW_PX = 160, 35  # a step's table height at most, and Streamlit's dataframe row height (px)
STEPS = ("1 Workload and KPI", "2 First failure", "3 Proving artifact", "4 Fix and owner", "5 Validation")

sel = session.get().selection
if sel is None:
    st.info("No selection yet: choose a model and a valid hardware profile in the sidebar.")
    st.stop()
st.title("Review")
bindings = ", ".join(f"{k} {v}" for k, v in sel.dims)
st.caption(f"{ui.md(sel.model_label)} on {ui.md(sel.hw.name)} · {ui.md(bindings)} · the five steps of the review")
row = st.columns([1, 1.4, 3])  # one row above the steps: run, download, the review's inputs folded
with row[2].expander("your fix, owner, note", expanded=session.stored_run("review_result") is None):
    c = st.columns(2)
    fix = c[0].text_input("fix (KEY=VALUE,...; empty = the best proposed)", key="review_fix")
    owner = c[1].selectbox("owner", ("(the fix's own)", *mapper.REVIEW_OWNERS), key="review_owner")
    note = c[0].text_input("note", key="review_note")
    c[1].caption("The load and the latency targets are the sidebar's (Serving): the Overview's assessment.")
attached = session.get().trace  # the run uploaded on the Validation page for this slice: step 3's evidence
trace_name, trace = attached[1:] if attached and attached[0] == sel.key else ("", b"")
request = mapper.ReviewRequest(
    model=sel.source,
    dims=dict(sel.dims),
    hardware=sel.hw,
    options=sel.options,
    question=sel.serving,
    fix=fix.strip(),
    owner="" if owner.startswith("(") else owner,
    note=note,
    file_name=sel.model_label if isinstance(sel.source, bytes) else "",
    trace=trace,
    trace_name=trace_name,
)
key = (sel.key, fix.strip(), owner, note, trace_name, hash(trace))
assessed = session.get().assessment  # the Overview's: the review's steps 1, 2 and 4 are this one answer


def run(request: mapper.ReviewRequest) -> tuple:
    """The review and its packet, built once per run (not on every rerun of the page)."""
    done = mapper.run_review(request, assessment=assessed)
    return done, mapper.packet_bytes(done)


with row[0]:
    review, packet = ui.run_stored(
        "review_result",
        key,
        "Run review",
        False,
        lambda _progress: run(request),
        "Cannot run the review",
        "Press **Run review** to map the slice, find its first failure, propose fixes and validate one.",
    )
row[1].download_button(
    "Download packet (zip)",
    packet,
    file_name="review-packet.zip",
    mime="application/zip",
    key="review_packet",
)
step = st.radio("step", STEPS, horizontal=True, key="review_step", label_visibility="collapsed")
doc = mapper.review_document(review)
baseline_doc = mapper.mapping_document(review.baseline)  # the assessed slice: its load, percentiles and fix
k = review.kpis


FRACTIONS = ("share", "mfu", "stall_fraction", "memory_stall_fraction")  # columns shown as percentages


def table(df: pd.DataFrame) -> None:
    """A step's table for people (headers in words, times in one unit, shares as percentages), at most
    TABLE_PX tall (it scrolls inside): each step stays one 1280x720 screen."""
    shown = ui.people_table(df)
    percent = {
        ui.header_text(c): st.column_config.NumberColumn(format="percent")
        for c in df.columns
        if c in FRACTIONS and pd.api.types.is_numeric_dtype(df[c])
    }
    st.dataframe(
        shown, hide_index=True, height=min(ROW_PX * (len(df) + 1) + 3, TABLE_PX), column_config=percent or None
    )


def step_one() -> None:
    f = review.frozen
    st.caption(
        f"**Frozen slice** · model {ui.md(f['model'])} sha256 `{f['model_sha256'][:16]}`"
        f" · {ui.md(', '.join(f'{k} {v}' for k, v in f['dims'].items()))}"
        f" · profile {ui.md(f['hardware'])} sha256 `{f['hardware_sha256'][:16]}` · engine {f['engine_version']}"
    )
    st.code(mapper.review_command(review), language="sh", wrap_lines=True)
    decode = k["latency_is_tpot"]
    m = st.columns(5)
    m[0].metric("TPOT (decode step)" if decode else "batch latency", ui.duration(k["latency_s"]))
    m[1].metric("throughput", ui.num(k["throughput_per_s"], "tok/s" if decode else "/s"))
    m[2].metric("MFU", ui.pct(k["mfu"]))
    m[3].metric("memory stall", ui.pct(k["memory_stall_fraction"]))
    m[4].metric("perf per watt", ui.num(k["perf_per_watt"], "/s/W"))
    rows = [r for r in mapper.answer_rows(baseline_doc) if r.section in ("load", "latency", "target")]
    st.markdown("  \n".join(f"**{ui.md(r.name.capitalize())}:** {ui.md(r.text)}" for r in rows))
    table(pd.DataFrame(k["layer_types"]))


def step_two() -> None:
    st.subheader(f"First mechanism failure: {ui.md(review.failure.check)}")
    st.markdown(f"**{ui.md(review.mechanism)}**")
    st.caption(f"Owner: {review.failure.owner}. First failing slice: {ui.md(review.first_slice['sentence'])}.")
    table(pd.DataFrame(review.behind))


def step_three() -> None:
    """What proves the class: the roofline with the failing kernels marked, the time split by class with the
    bytes or FLOPs behind it, measured evidence where there is some, and the kernels in people's words."""
    proof.show(mapper.proving_artifact(baseline_doc, review.dominant))  # its fusion rules are a column of the table
    if review.trace_file is not None:  # none: the artifact's own line says how to attach a run
        st.caption(
            f"Measured evidence: {ui.md(review.trace_file['name'])}, sha256 `{review.trace_file['sha256'][:16]}`."
        )


def step_four() -> None:
    rows = [
        {
            "fix": c["label"],
            "status": f"rejected: {c['rejected']}" if c.get("rejected") else "can be adopted",
            "change": ",".join(
                f"{o}={v}"
                for o, v in {**c["plan_options"], **c["slice_changes"], **c.get("serving_changes", {})}.items()
            ),
            "expected gain": c["gain_text"] + (f"; {c['cost']}" if c["cost"] else ""),
            "owner": c["owner"],
            "blast radius": f"{c['blast_radius']['kernels']} kernels: {', '.join(c['blast_radius']['layer_types'])}",
            "quality evidence": "needed, with a fallback" if c["quality_evidence_and_fallback"] else "-",
        }
        for c in doc["candidates"]
    ]
    table(pd.DataFrame(rows).astype(str))
    chosen = doc["chosen_fix"]
    if not chosen:
        st.warning(ui.md(review.chosen_reason or "No candidate applies to the failing check on this slice."))
    if chosen:
        st.markdown(
            f"**Chosen: {ui.md(chosen['label'])}** · owner {ui.md(review.owner)} · {ui.md(chosen['gain_text'])}"
        )
        evidence = chosen["quality_evidence_and_fallback"]
        st.caption(
            ui.md(chosen["chosen_because"])
            + (f". Quality evidence and fallback: {ui.md(evidence)}" if evidence else "")
        )
    c = st.columns(2)
    with c[0].expander("Best-fix rule: the first key that differs decides"):
        st.dataframe(pd.DataFrame(doc["best_fix_rule"]), hide_index=True)
    with c[1].expander("Follow-ups: measure and calibrate"):
        for f in review.follow_ups:
            st.caption(f"{f['owner']}: {ui.md(f['action'])}")


def step_five() -> None:
    v = review.validation
    if v is None:
        st.info("No fix to validate.")
        return
    st.markdown(f"**{ui.md(v.summary)}**")
    table(v.verdicts.astype(str))
    st.caption(f"Rollback boundary (slices that keep the baseline): {ui.md(v.rollback_text())}")


{STEPS[0]: step_one, STEPS[1]: step_two, STEPS[2]: step_three, STEPS[3]: step_four, STEPS[4]: step_five}[step]()
