"""No string stands in for a vocabulary member: the engine compares an enum-typed field (`core.vocab`,
`core.classes`, `core.graph`) with the member, never with its text, so renaming a value or adding a member is
one edit the type checker follows. An AST walk over mapper/ and app_pages/ finds every comparison of such a
field (by its name: `engine`, `rule`, `options.dtype`, `k["layer_type"]` ...) with a string literal that is one
of its vocabulary's values."""

from __future__ import annotations

import ast
from pathlib import Path

from mapper.core import classes, graph, vocab

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {
    "engine": vocab.Engine,
    "rule": vocab.KernelRule,
    "bottleneck": classes.Bottleneck,
    "owner": classes.Owner,
    "layer_type": graph.LayerType,
    "op_class": graph.OpClass,
    "fusion": vocab.FusionPolicy,
    "weight_dtype": vocab.WeightDtype,
    "runtime": vocab.Runtime,
    "kv_cache": vocab.KvCache,
    "launch": vocab.Launch,
    "sparsity": vocab.Sparsity,
    "layout": vocab.Layout,
    "shard": vocab.Shard,
    "role": vocab.Shard,
    "collective": vocab.Collective,
    "kind": (vocab.Collective, vocab.ExecutorKind, classes.CandidateKind, classes.TargetKind),
    "options.dtype": vocab.PlanDtype,  # a tensor's dtype is another vocabulary: only the plan's is read here
    "matrix.kind": vocab.MatrixKind,  # a MatrixShape's kind: `k.matrix.kind`, `shape.kind`, `s.kind`
}
MATRIX_SHAPES = ("matrix", "shape", "s")  # the names a MatrixShape goes by


def _field(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        if node.attr == "dtype" and isinstance(node.value, ast.Name) and node.value.id in ("options", "opts"):
            return "options.dtype"
        if node.attr == "kind" and _field(node.value) in MATRIX_SHAPES:
            return "matrix.kind"
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value  # a document's row: k["engine"]
    return None


def _texts(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def string_compares(source: str) -> list[str]:
    """Each comparison in `source` of a vocabulary-typed field with one of its values' text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for side in sides:
            vocabulary = FIELDS.get(_field(side) or "")
            if vocabulary is None:
                continue
            vocabularies = vocabulary if isinstance(vocabulary, tuple) else (vocabulary,)
            values = {m.value for v in vocabularies for m in v}
            if any(t in values for other in sides if other is not side for t in _texts(other)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_walk_finds_a_string_compare():
    assert string_compares('if k.engine == "matrix" or options.dtype in ("auto", "bf16"): pass') == [
        "1: k.engine == 'matrix'",
        "1: options.dtype in ('auto', 'bf16')",
    ]
    assert string_compares("if k.engine == Engine.MATRIX and tensor.dtype == 'float16': pass") == []
    assert string_compares('if k.matrix.kind != "gemm" or shape.kind in ("conv", "attention"): pass') == [
        "1: k.matrix.kind != 'gemm'",
        "1: shape.kind in ('conv', 'attention')",
    ]
    assert string_compares('if c.kind == "plan" or target.kind != "fit": pass') == [
        "1: c.kind == 'plan'",
        "1: target.kind != 'fit'",
    ]


def test_no_vocabulary_field_is_compared_with_a_string():
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for folder in ("mapper", "app_pages")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in string_compares(path.read_text())
    ]
    assert not found, "compare with the vocabulary's member instead: " + "; ".join(found)
