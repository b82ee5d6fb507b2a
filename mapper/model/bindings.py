"""Import, the bindings: which symbolic dims a model has, what each means, and the user's values on them.

Dims are bound by name (`--dim NAME=VALUE`), or by the `--batch`/`--seq` shortcuts, which find the dims
that mean batch and sequence whatever an exporter calls them (batch_size, sequence_length, s0...). A
boolean graph input an If branches on (Optimum's use_cache_branch) is bound the same way. A dim_param
may be an expression of other dims (`past_sequence_length + sequence_length`), evaluated safely.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping

import numpy as np
import onnx

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.model.branches import branch_inputs

BATCH_NAMES = ("batch", "batch_size", "n", "b", "bs", "batchsize")
SEQ_NAMES = ("seq", "sequence", "seq_len", "sequence_length", "seqlen", "s", "tokens", "num_tokens")

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}


def eval_dim(expr: str, bound: dict[str, int]) -> int | None:
    """Value of a dim_param: a name ('batch') or an exporter's expression ('s0 + s1', '2*s1')."""
    if expr in bound:
        return bound[expr]
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None

    def walk(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            return bound[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](walk(n.left), walk(n.right))
        raise KeyError(expr)

    try:
        return int(walk(tree))
    except (KeyError, ZeroDivisionError, RecursionError):
        return None


def expression_names(expr: str) -> list[str]:
    try:
        return sorted({n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)})
    except (SyntaxError, RecursionError):
        return [expr]


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def symbolic_dims(model: onnx.ModelProto) -> dict[str, tuple[str, int]]:
    """Every free dim name on the graph inputs -> (input name, axis) where it first appears; a boolean
    input an If branches on is bound like a dim (axis -1: its value, 0 or 1, not a size)."""
    found: dict[str, tuple[str, int]] = {name: (name, -1) for name in branch_inputs(model)}
    for vi in graph_inputs(model):
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):  # a fixed size (0 is a legal, empty dim)
                continue
            names = expression_names(d.dim_param) if d.dim_param else [f"{vi.name}:{axis}"]
            for n in names:
                found.setdefault(n, (vi.name, axis))
    return found


SHORTCUT_NAMES = {"batch": BATCH_NAMES, "seq": SEQ_NAMES}
SHOWN_UNBOUND = 8  # unbound dim names listed in the error; the rest are counted ("and N more")
SHORTCUT_AXES = {"batch": 0, "seq": 1}  # where exporters that name dims s0, s1... put them on the ids


def shortcut_targets(free: Mapping[str, tuple[str, int]], bound: dict[str, int], shortcut: str) -> list[str]:
    """The free dims that --batch or --seq binds: by name (batch_size, sequence_length...), else by a name
    containing the word (not a past or total length), else the first unbound dim at the shortcut's axis."""
    matches = [n for n in free if n.lower() in SHORTCUT_NAMES[shortcut]] or [
        n for n in free if shortcut in n.lower() and "past" not in n.lower() and "total" not in n.lower()
    ]
    if not matches:
        matches = [
            n for n, (_, ax) in free.items() if ax == SHORTCUT_AXES[shortcut] and n not in bound and ":" not in n
        ][:1]
    return matches


def dim_roles_of(model: onnx.ModelProto) -> dict[str, str]:
    """Each free dim -> its role: "batch" or "seq" (what the shortcuts bind), "past" (a KV-cache length),
    "total" (a cache-plus-new length an export declares apart), "branch" (an If's boolean input), "other"."""
    free = symbolic_dims(model)
    roles = {n: role for role in ("batch", "seq") for n in shortcut_targets(free, {}, role)}
    for n, (_, axis) in free.items():
        low = n.lower()
        roles.setdefault(
            n, "branch" if axis == -1 else "past" if "past" in low else "total" if "total" in low else "other"
        )
    return {n: roles[n] for n in free}


def resolve_bindings(
    model: onnx.ModelProto,
    dims: dict[str, int] | None,
    batch: int | None,
    seq: int | None,
    free: Mapping[str, tuple[str, int]] | None = None,
) -> dict[str, int]:
    """Map the user's bindings (by name, and the --batch/--seq shortcuts) onto the model's dim names;
    every free dim must end up bound. `free`: the model's `symbolic_dims`, where the caller keeps them."""
    free = symbolic_dims(model) if free is None else free
    bound = apply_bindings(model, dims, batch, seq, free)
    missing = [n for n in free if n not in bound]
    if missing:
        listed = ", ".join(missing[:SHOWN_UNBOUND]) + (
            f" and {len(missing) - SHOWN_UNBOUND} more" if len(missing) > SHOWN_UNBOUND else ""
        )
        branches = [n for n in missing if free[n][1] == -1]
        hint = f"; {', '.join(branches)} chooses the branch of an If (0 or 1)" if branches else ""
        raise MapperError(
            f"unbound dims: {listed}; bind each with --dim NAME=VALUE"
            f" (or --batch/--seq for the batch and sequence dims){hint}"
        )
    return {n: bound[n] for n in free} | {k: v for k, v in bound.items() if k not in free}


def apply_bindings(
    model: onnx.ModelProto,
    dims: dict[str, int] | None,
    batch: int | None,
    seq: int | None,
    free: Mapping[str, tuple[str, int]] | None = None,
) -> dict[str, int]:
    """The user's bindings checked and with --batch/--seq written onto the model's own dim names
    (batch_size, sequence_length...); dims left free stay free (a serving simulation varies the batch)."""
    free = symbolic_dims(model) if free is None else free
    bound = dict(dims or {})
    for key, value in bound.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value <= limits.MAX_DIM:
            raise MapperError(f"dim {key}={value!r} must be an integer from 0 to {limits.limit_text('MAX_DIM')}")
    for shortcut, given in (("batch", batch), ("seq", seq)):
        if given is None:
            continue
        if not isinstance(given, (int, np.integer)) or not 0 < given <= limits.MAX_DIM:
            raise MapperError(f"--{shortcut} {given!r} must be an integer from 1 to {limits.MAX_DIM}")
        matches = shortcut_targets(free, bound, shortcut)
        if not matches and not _fixed_axis_is(model, SHORTCUT_AXES[shortcut], int(given)):
            raise MapperError(
                f"--{shortcut} {given}: this model has no free {shortcut} dim (its inputs are"
                f" {_input_shapes(model)}); bind its dims by name with --dim NAME=VALUE"
            )
        for n in matches:
            bound.setdefault(n, int(given))
    unknown = [k for k in dims or {} if k not in free]
    if unknown:
        raise MapperError(
            f"dim {unknown[0]!r} is not a symbolic dim of this model; its dims are:"
            f" {', '.join(free) or 'none (all input shapes are fixed)'}"
        )
    return bound


def _input_shapes(model: onnx.ModelProto) -> str:
    return "; ".join(
        f"{vi.name} [{', '.join(d.dim_param or str(d.dim_value) for d in vi.type.tensor_type.shape.dim)}]"
        for vi in graph_inputs(model)
    )


def _fixed_axis_is(model: onnx.ModelProto, axis: int, value: int) -> bool:
    for vi in graph_inputs(model):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) > axis and dims[axis].HasField("dim_value") and dims[axis].dim_value == value:
            return True
    return False
