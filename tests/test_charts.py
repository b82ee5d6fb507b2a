"""The roofline chart carries every ceiling the review asks for: DRAM and L2 roofs, matrix and vector peaks."""

from __future__ import annotations

import pytest

import mapper
from mapper.report.charts import roofline_figure


def test_roofline_has_dram_l2_matrix_and_vector_ceilings(h100):
    doc = mapper.mapping_document(
        mapper.map_workload(mapper.load_workload("bert-base"), h100, mapper.PlanOptions(dtype="bf16"))
    )
    fig = roofline_figure(doc)
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    assert set(lines) == {"DRAM roof", "L2 roof", "matrix peak", "vector peak"}
    assert lines["matrix peak"].y[0] == pytest.approx(h100.matrix_peak("bf16"))
    assert lines["vector peak"].y[0] == pytest.approx(h100.vector_peak("bf16"))
    x0, y0 = lines["L2 roof"].x[0], lines["L2 roof"].y[0]
    assert y0 / x0 == pytest.approx(h100.l2_bandwidth_bytes_per_s)
    x0, y0 = lines["DRAM roof"].x[0], lines["DRAM roof"].y[0]
    assert y0 / x0 == pytest.approx(h100.dram_bandwidth_bytes_per_s)
    points = sum(len(t.x) for t in fig.data if t.mode == "markers")
    assert points == len(
        [k for k in doc["kernels"] if (k["intensity_flop_per_byte"] or 0) > 0 and k["achieved_flops_per_s"] > 0]
    )
