"""Weights and inputs synthesized for a measured run: deterministic, in memory, naming no file.

A shape-only model (the built-ins' weights are external data that does not exist) gets random tensors of its
external tensors' dims and types; its inputs get values at the engine's bound shapes, index inputs in range.
evidence/measure.py runs the result on ONNX Runtime.
"""

from __future__ import annotations

import zlib

import numpy as np

from mapper.core.errors import MapperError
from mapper.model.sandbox import external_tensors

MATRIX_RANK = 2  # a [in, out] MatMul weight: its fan-in is dims[0]; a conv's [out, in, k...] has it in dims[1:]


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _synthesized(t, seed: str):
    """A deterministic random tensor of t's dims and type, named as t (see synthesize_weights)."""
    from onnx import helper, numpy_helper

    dims = tuple(int(d) for d in t.dims)
    np_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    rng = _rng(seed)
    if np.issubdtype(np_dtype, np.floating):
        if len(dims) <= 1:
            values = rng.uniform(0.5, 1.5, dims)
        else:
            fan_in = int(np.prod(dims[1:])) if len(dims) > MATRIX_RANK else dims[0]
            values = rng.uniform(-1.0, 1.0, dims) / np.sqrt(max(fan_in, 1))
    elif np_dtype.kind in "iub":
        values = np.zeros(dims)
    else:
        raise TypeError(np_dtype)
    return numpy_helper.from_array(values.astype(np_dtype), t.name)


def synthesize_weights(model) -> int:
    """Replace every external-data tensor anywhere in the model (initializers, a Constant's value, any tensor
    attribute, in every If/Loop/Scan body: mapper.model.sandbox.external_tensors) by a deterministic random tensor of
    its dims/dtype, in place, so that the copy ONNX Runtime runs names no file. Returns how many were replaced.

    Matrices get U(-1,1)/sqrt(fan-in) (activations stay O(1), no denormals); 1-D tensors (biases, norm scales,
    BatchNorm variances) get U(0.5, 1.5), positive so that variances are valid. Integer tensors get zeros.
    Tensors with data (ConstantOfShape-made or inline) stay as they are. An external part of a sparse tensor,
    or one of a type that cannot be synthesized (strings), is refused: MapperError naming it."""
    found = external_tensors(model)
    for where, t, sparse in found:
        if sparse:
            raise MapperError(f"measure: {where[:160]} is external data; only dense external tensors are replaced")
        try:
            tensor = _synthesized(t, t.name or where)
        except (TypeError, ValueError):
            raise MapperError(
                f"measure: {where[:160]} is external data of a type that cannot be synthesized "
                f"(data_type {t.data_type})"
            ) from None
        t.Clear()
        t.CopyFrom(tensor)
    if external_tensors(model):  # each was replaced in place; checked again since a miss would read a file
        raise MapperError("measure: an external-data reference is left after synthesis; not running the model")
    return len(found)


def synthesize_inputs(model, graph) -> dict[str, np.ndarray]:
    """Feeds at the engine's bound shapes: floats U(0,1); integer inputs feeding a Gather get ids below that table's
    row count (deterministic), other integer inputs (attention masks) ones."""
    from onnx import helper

    table_rows = {}
    inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in inits and inits[node.input[0]]:
            table_rows[node.input[1]] = int(inits[node.input[0]][0])
    declared = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    feeds = {}
    for name in graph.inputs:
        shape = graph.tensors[name].shape
        np_dtype = helper.tensor_dtype_to_np_dtype(declared[name])
        rng = _rng(name)
        if np.issubdtype(np_dtype, np.floating):
            feeds[name] = rng.uniform(0.0, 1.0, shape).astype(np_dtype)
        elif name in table_rows or "ids" in name:
            feeds[name] = rng.integers(0, table_rows.get(name, 2), shape).astype(np_dtype)
        else:
            feeds[name] = np.ones(shape, np_dtype)
    return feeds
