"""The document's JSON text (`report.json_text`): the parse of `json.dumps(doc, indent=1)`, written a row a line.

`mapper map --json`, `review --json`, `measure --json` and the JSON sheet write it; the sheet streams the
document's row sections from the result (`report.document.streamed_document`), holding no kernel record.
"""

from __future__ import annotations

import io
import json
import math

import pytest

import mapper
from mapper.report.document import ROW_SECTIONS, streamed_document
from mapper.report.json_text import json_bytes, json_text, write_json


@pytest.fixture(scope="module")
def result():
    return mapper.map_workload(mapper.load_workload("bert-base", batch=2, seq=32), mapper.load_hardware("h100-sxm"))


def test_text_parses_as_the_indented_dump(result):
    doc = mapper.mapping_document(result)
    text = json_text(doc)
    assert json.loads(text) == json.loads(json.dumps(doc, indent=1, allow_nan=False))
    kernels = len(doc["kernels"])
    assert kernels > 10 and text.count('\n  {"name": ') >= kernels  # a kernel a line (and a node a line)
    assert list(json.loads(text)) == list(doc)  # the key order kept


def test_the_streamed_sheet_is_the_documents_text(result):
    """The JSON sheet, written as its rows are read, is byte for byte the text of the whole document (its one
    changing field, the creation time, is the result's own)."""
    assert mapper.sheet_bytes(result, "json") == json_text(mapper.mapping_document(result)).encode()
    assert json_bytes({"a": [], "b": {}}) == json.dumps({"a": [], "b": {}}, indent=1).encode()


def test_streaming_keeps_no_record():
    """Reading the row sections once writes each record for the pass and keeps none; a record read before
    is the one kept."""
    result = mapper.map_workload(mapper.load_workload("bert-base", batch=2, seq=32), mapper.load_hardware("h100-sxm"))
    first = result.kernels[0]
    doc = streamed_document(result)
    rows = {key: list(doc[key]) for key in ROW_SECTIONS}
    assert len(rows["kernels"]) == len(result.kernels) and len(rows["nodes"]) == len(result.nodes)
    made = result.kernels._made  # type: ignore[attr-defined]
    assert made[0] is first and all(m is None for m in made[1:])
    assert rows["kernels"] == mapper.mapping_document(result)["kernels"]


def test_nan_is_refused_and_the_stream_writer_ends_a_line():
    with pytest.raises(ValueError):
        json_text({"rows": [{"x": math.nan}]})
    with pytest.raises(ValueError):
        json_text({"x": {"y": math.inf}})
    out = io.StringIO()
    write_json({"rows": iter([{"a": 1}, {"a": 2}]), "n": 2}, out)
    assert json.loads(out.getvalue()) == {"rows": [{"a": 1}, {"a": 2}], "n": 2} and out.getvalue().endswith("}\n")


@pytest.mark.slow
def test_the_memory_bench_runs_on_a_small_graph():
    """bench/bench_scale.py --memory's child, on a 2,000-node chain: every figure measured and positive."""
    from bench.bench_scale import memory_per_node

    nodes, held, peak, text = memory_per_node("chain", 2000, "streamed")
    assert nodes >= 2000 and peak > 0 and text > 50
    assert set(held) == {"import", "work", "map", "document"}
