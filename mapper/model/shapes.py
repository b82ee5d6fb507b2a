"""Shape inference's entry point: a node's output shapes and dtypes from its op's rule in the registry.

The importer calls `infer_node` for every node in topological order (`walk.py`). The rules are the registry's
(`mapper.ops`, each `OpDef.shape`); an op without one raises `NoRule`, and the importer falls back to the
model's value_info, onnx's inference and, for com.microsoft ops, ONNX Runtime's (`ort_shapes`), and finally
marks the node unmodeled.
"""

from __future__ import annotations

from mapper.ops import OPS, Ctx, NoRule, OpDef
from mapper.ops.shape import Out

__all__ = ["Ctx", "NoRule", "check_ranks", "infer_node"]


def check_ranks(entry: OpDef, ctx: Ctx) -> None:
    """The least ranks of the inputs the op's rules index (ONNX requires them; a hostile file need not honour
    them), checked before the rule and before any fallback to declared shapes. A quantized op's are its twin's,
    at its data operands' positions."""
    if not (entry.min_ranks or entry.optional_min_ranks or entry.quantized):  # most ops: nothing to check
        return
    if entry.quantized is not None:
        positions = entry.quantized.positions(len(ctx.node.inputs))
        required = dict(zip(positions, entry.min_ranks))
    else:
        required = dict(enumerate(entry.min_ranks))
    for i, least in (required | dict(entry.optional_min_ranks)).items():
        if (i in required or ctx.has(i)) and len(ctx.shape(i)) < least:
            raise ValueError(f"input {i} of {entry.op_type} has rank {len(ctx.shape(i))}, below {least}")


def infer_node(ctx: Ctx) -> Out:
    entry = OPS.get(ctx.node.op_type)
    if entry is None or entry.shape is None:
        raise NoRule(f"no shape rule for {ctx.node.op_type}")
    check_ranks(entry, ctx)
    return entry.shape(ctx)
