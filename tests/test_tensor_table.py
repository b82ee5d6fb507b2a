"""A binding's tensors as columns (`core.graph.TensorTable`): a mapping of name -> TensorSpec, equal, pickled and
written as the dict of specs it replaced, holding no record a tensor for the garbage collector to walk."""

from __future__ import annotations

import gc
import pickle

import mapper
from mapper.core.graph import TensorSpec, TensorTable


def _dict(table: TensorTable) -> dict[str, TensorSpec]:
    return {name: table[name] for name in table}


def test_a_table_reads_as_the_dict_of_its_specs():
    specs = [TensorSpec("x", (2, 3), "float16"), TensorSpec("w", (3, 4)), TensorSpec("y", (2, 4), "bfloat16")]
    table = TensorTable(specs)
    assert _dict(table) == {s.name: s for s in specs} and list(table) == ["x", "w", "y"] and len(table) == 3
    assert table == {s.name: s for s in specs} and table["w"].dtype == "float32" and table["w"].bytes == 48
    assert table.get("nope") is None and table.get("nope", 7) == 7 and "x" in table and "nope" not in table
    assert (table.shape("y"), table.dtype("y"), table.shape_of("y"), table.shape_of("nope")) == (
        (2, 4),
        "bfloat16",
        (2, 4),
        None,
    )
    table.put("x", (5,), "int64")  # written again: the new shape and type, in its old place
    assert table["x"] == TensorSpec("x", (5,), "int64") and list(table) == ["x", "w", "y"]
    assert table != TensorTable(specs) and table.copy() == table and table.copy() is not table


def test_a_copy_is_written_apart_and_put_like_copies_rows():
    table = TensorTable([TensorSpec("a", (1, 2), "float16"), TensorSpec("b", (3,), "int64")])
    copy = table.copy()
    copy.put_like(["a2", "b2"], ["a", "b"])  # all new: appended at once
    assert "a2" not in table and copy["a2"] == TensorSpec("a2", (1, 2), "float16") and copy.shape("b2") == (3,)
    copy.put_like(["b2", "c"], ["a", "a"])  # one written again: row by row
    assert copy["b2"] == TensorSpec("b2", (1, 2), "float16") and copy["c"].shape == (1, 2) and len(copy) == 5
    assert pickle.loads(pickle.dumps(copy)) == copy and isinstance(pickle.loads(pickle.dumps(copy)), TensorTable)


def test_a_bound_graph_holds_its_tensors_as_three_objects_the_collector_walks():
    """A Llama-2-70B binding's ~6,900 tensors were as many records the collector tracked; the table is its name
    index (strings and ints: untracked), its shape and dtype lists, and the shapes (untracked once seen)."""
    graph = mapper.open_model("llama2-70b").bind({"batch": 1, "seq": 1, "past": 16}).graph
    assert len(graph.tensors) > 6000
    gc.collect()  # tuples of ints are untracked at a collection
    tracked = [x for x in gc.get_referents(graph.tensors) if gc.is_tracked(x) and x is not TensorTable]
    assert len(tracked) == 2 and not gc.is_tracked(graph.tensors._rows)
    assert sum(map(gc.is_tracked, graph.tensors._shapes)) == 0
    assert pickle.loads(pickle.dumps(graph)).tensors == graph.tensors
