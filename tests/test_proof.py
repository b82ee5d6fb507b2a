"""Review step 3's proving artifact (mapper.proving_artifact, app_pages/proof.py): the failing class marked on
the roofline, the class split, the failing kernels in people's words, the measured evidence, and the page."""

from __future__ import annotations

import dataclasses
import pickle
import re

import pytest
from streamlit.testing.v1 import AppTest

import mapper
from mapper.evidence.compare import compare_measured
from mapper.evidence.measure import Measurement, NodeMatch
from mapper.review.measured import measured_verdict

# (model, dims, profile, plan options, the failing class): a prefill that is compute-bound at fp32 and a
# decode step that is memory-bound (the dominant class the review finds: `mapper review` on each slice).
SLICES = {
    "bert-base prefill": (
        "bert-base", {"batch": 8, "seq": 384}, "h100-sxm", mapper.PlanOptions(), "compute-bound (matrix)"
    ),
    "llama2-7b decode": (
        "llama2-7b", {"batch": 32, "past": 2048, "seq": 1}, "a100-sxm-80gb", mapper.PlanOptions(dtype="fp16"),
        "memory-bound",
    ),
}  # fmt: skip
RAW = re.compile(r"^-?\d[\d.]*(e[+-]?\d+)?$|e[+-]\d\d|^\[|^\(|^None$|^nan$")  # a bare number, a list, None


def mapped(name: str):
    model, dims, hw, options, cls = SLICES[name]
    result = mapper.map_workload(mapper.load_workload(model, dims), mapper.load_hardware(hw), options)
    return result, cls


@pytest.fixture(scope="module", params=sorted(SLICES))
def slice_(request):
    result, cls = mapped(request.param)
    doc = mapper.mapping_document(result)
    return doc, cls, mapper.proving_artifact(doc, cls)


def test_the_failing_class_is_the_documents_dominant_one(slice_):
    doc, cls, _ = slice_
    times: dict[str, float] = {}
    for k in doc["kernels"]:
        times[k["bottleneck"]] = times.get(k["bottleneck"], 0.0) + k["time_s"]
    assert max(times, key=times.__getitem__) == cls  # so the marked kernels below are the review's step 3


def test_the_marked_kernels_are_exactly_the_failing_class(slice_):
    doc, cls, a = slice_
    points = dict(zip(a.points.column("name"), a.points.column("failing"), strict=True))
    on_axes = {
        k["name"]: k for k in doc["kernels"] if k["intensity_flop_per_byte"] > 0 and k["achieved_flops_per_s"] > 0
    }
    assert set(points) == set(on_axes)
    assert {n for n, failing in points.items() if failing} == {n for n, k in on_axes.items() if k["bottleneck"] == cls}
    assert any(points.values()) and not all(points.values())  # the check cannot pass on an all-or-nothing marking
    assert a.off_axes == len(doc["kernels"]) - len(on_axes)
    assert a.kernels_of_class == sum(k["bottleneck"] == cls for k in doc["kernels"])


def test_class_shares_sum_to_one_and_hold_the_kernels_sums(slice_):
    doc, cls, a = slice_
    assert pickle.loads(pickle.dumps(a)) == a  # st.cache_data can hold it
    assert sum(a.classes.column("share")) == pytest.approx(1.0, abs=1e-9)
    assert sum(a.classes.column("kernels")) == len(doc["kernels"])
    assert sum(a.classes.column("flops")) == pytest.approx(sum(k["flops"] for k in doc["kernels"]))
    assert sum(a.classes.column("dram_bytes")) == pytest.approx(sum(k["dram_bytes"] for k in doc["kernels"]))
    assert a.classes.rows[0][0] == cls  # longest first: the failing class leads
    unit = "FLOP" if cls.startswith("compute") else "B"
    assert a.classes.rows[0][-1].endswith(unit) and a.headline.startswith(f"{a.kernels_of_class} {cls} kernels")


def test_the_kernel_table_is_in_peoples_words(slice_):
    _, _, a = slice_
    assert a.kernels.rows and all(len(row) == len(a.kernels.columns) for row in a.kernels.rows)
    cells = [cell for row in a.kernels.rows for cell in row]
    assert all(isinstance(cell, str) and cell and not RAW.search(cell) for cell in cells), [
        c for c in cells if not isinstance(c, str) or RAW.search(c)
    ]
    col = a.kernels.column
    assert all(re.fullmatch(r"[\d.,]+ (ns|µs|ms|s)", t) for t in col("time"))
    assert all(re.fullmatch(r"[\d.]+%|<0\.1%", s) for s in col("share"))
    assert all(re.fullmatch(r"[\d.,]+ (B|KB|MB|GB|TB)", b) for b in col("DRAM bytes"))
    assert all(re.fullmatch(r"[\d.,]+ [kMGTP]?FLOP", f) for f in col("FLOPs"))
    assert any(re.fullmatch(r"\d+×\d+×\d+", t) for t in col("tile"))  # the GEMMs' tile as M×N×K
    assert any(" x " in k for k in col("kernel"))  # a repeated layer is one row with its count


def test_every_point_lies_at_or_under_the_roof(slice_):
    _, _, a = slice_
    peak, bandwidth = a.roof.peak_flops_per_s, a.roof.dram_bandwidth_bytes_per_s
    assert a.roof.source == "the mapping document" and a.roof.ridge_flop_per_byte == pytest.approx(peak / bandwidth)
    over = [
        (name, flops / min(peak, x * bandwidth))
        for name, x, flops in zip(
            a.points.column("name"),
            a.points.column("intensity_flop_per_byte"),
            a.points.column("achieved_flops_per_s"),
            strict=True,
        )
        if flops > 1.01 * min(peak, x * bandwidth)
    ]
    assert over == []


def test_a_document_without_the_bandwidth_derives_a_roof_every_point_stays_under(slice_):
    doc, cls, a = slice_
    bare = {**doc, "assumptions": []}
    derived = mapper.proving_artifact(bare, cls)
    assert "DRAM bandwidth" in derived.roof.source
    assert derived.roof.dram_bandwidth_bytes_per_s <= a.roof.dram_bandwidth_bytes_per_s
    bw = derived.roof.dram_bandwidth_bytes_per_s
    for x, flops in zip(
        derived.points.column("intensity_flop_per_byte"), derived.points.column("achieved_flops_per_s"), strict=True
    ):
        assert flops <= 1.01 * min(derived.roof.peak_flops_per_s, x * bw)


def with_measurement(scale: float = 1.25):
    """llama2-7b's decode step with a synthetic measurement: each kernel ran `scale` times its prediction."""
    result, cls = mapped("llama2-7b decode")
    nodes = tuple(NodeMatch(e.kernel.name, "", e.time_s * scale, (e.kernel.nodes[-1],), "name") for e in result.kernels)
    latency = result.totals.latency_s * scale
    m = Measurement("llama2-7b", (), 1, (latency,) * 3, nodes, "synthetic", "", "", (), "llama2-7b")
    return dataclasses.replace(result, measured=compare_measured(result, m)), cls


def test_measured_evidence_rows_where_the_document_has_a_measurement(slice_):
    _, _, a = slice_
    assert a.measured is None and a.measured_summary.startswith("Not measured")
    result, cls = with_measurement()
    m = mapper.proving_artifact(mapper.mapping_document(result), cls)
    assert m.measured is not None and m.measured.rows
    assert set(m.measured.column("predicted class")) == {cls}
    assert set(m.measured.column("error")) == {"-20%"}  # predicted / measured - 1 at a 1.25x slower run
    assert all(isinstance(c, str) and not RAW.search(c) for row in m.measured.rows for c in row)
    assert m.measured_points.rows and "error -20%" in m.measured_summary


def test_the_run_proves_a_class_it_ran_in_and_refutes_one_it_did_not():
    """llama2-7b's decode step is memory-bound: a run 1.25x slower stays memory-bound (proves); a run whose kernels
    each took under two launches' time is launch-bound by the measured-class rule, not memory-bound (refutes).
    Achieved rates are shares of the document's own roofs."""
    result, cls = with_measurement()
    doc = mapper.mapping_document(result)
    proves = measured_verdict(doc, cls)
    assert proves["verdict"] == "proves" and proves["agreeing_share"] > 0.5
    assert proves["achieved_dram_bytes_per_s"] < proves["dram_bandwidth_bytes_per_s"]
    assert "The run proves it" in mapper.proving_artifact(doc, cls).measured_summary
    achieved = mapper.proving_artifact(doc, cls).measured.column("achieved DRAM B/s")
    assert all(cell.endswith("%)") and "B/s" in cell for cell in achieved if cell != "—")
    fast, _ = with_measurement(1e-4)
    refutes = measured_verdict(mapper.mapping_document(fast), cls)
    assert refutes["verdict"] == "refutes" and refutes["agreeing_share"] < 0.5
    assert measured_verdict(mapper.mapping_document(mapped("llama2-7b decode")[0]), cls) == {}


def proof_page():
    """An AppTest script: step 3 of llama2-7b's decode review, measured, drawn by app_pages.proof.show."""
    import mapper
    from app_pages import proof
    from tests.test_proof import with_measurement

    result, cls = with_measurement()
    proof.show(mapper.proving_artifact(mapper.mapping_document(result), cls))


def test_the_page_draws_the_artifact():
    at = AppTest.from_function(proof_page, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.dataframe) == 2  # the failing kernels, then the measured evidence
    assert at.dataframe[0].value.columns[0] == "kernel" and at.dataframe[1].value.columns[0] == "kernels"
    assert len(at.get("plotly_chart")) == 2  # the roofline and the class split
    assert re.sub(r"\\(.)", r"\1", at.markdown[0].value).startswith("**386 memory-bound kernels take")


@pytest.mark.parametrize(
    ("flops", "shown"),
    [(0.0, "0 FLOP"), (9216.0, "9.22 kFLOP"), (565_976_236_032.0, "566 GFLOP"), (2.5e15, "2.50 PFLOP"), (None, "—")],
)
def test_flops_read_in_the_unit_that_keeps_three_figures(flops, shown):
    from mapper.core.units import format_flops

    assert format_flops(flops) == shown
