"""ONNX Runtime's symbolic shape inference: the importer's last fallback, run in a child process.

ONNX Runtime knows the output shapes of about a hundred com.microsoft ops (MoE, SparseAttention,
DecoderMaskedMultiHeadAttention, PagedAttention...) that neither our rules nor onnx's inference
cover; without them one such node would leave every node after it without shapes. Its inference evaluates constant
subgraphs with numpy and sympy, so a hostile model could make it allocate or loop without bound:
it runs in a child process (mapper.model.sandbox.run_child) under `ORT_SHAPES_MEMORY_BYTES` and
`ORT_SHAPES_SECONDS`, killed with its process group at the wall limit, in a scratch folder (where
ONNX Runtime writes a model it could not fully infer), on a copy of the model whose
external-data references are gone (an external initializer becomes a graph input of its dims), so
it can read no file. Any failure leaves the nodes as they were: unresolved.
"""

from __future__ import annotations

import importlib.util

import onnx
from onnx import numpy_helper

from mapper.core import limits
from mapper.core.dtypes import dtype_code
from mapper.core.errors import MapperError
from mapper.core.graph import Node
from mapper.model.sandbox import CHILD_STDOUT, drop_external_reference, external_tensors, is_external, run_child

CHILD = r"""
import sys
answer, sys.stdout = sys.stdout.buffer, sys.stderr  # anything printed on the way goes to stderr
import onnx
from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
model = onnx.ModelProto()
model.ParseFromString(sys.stdin.buffer.read())
inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=False)
out = onnx.GraphProto()
out.value_info.extend(inferred.graph.value_info)
answer.write(out.SerializeToString())
"""


def without_external_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy that names no file: external initializers of the main graph become inputs of their dims;
    elsewhere (sparse initializers, tensor attributes, subgraphs: mapper.model.sandbox.external_tensors)
    external references are dropped, leaving dims only."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    external = [t for t in m.graph.initializer if is_external(t)]
    for t in external:
        m.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        m.graph.initializer.remove(t)
    for found in external_tensors(m):
        drop_external_reference(found.tensor)
    return m


def ort_inferred_value_info(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """ONNX Runtime's inferred value_info for the model (dims bound by the caller); [] on any failure, and
    without a child when ONNX Runtime is not installed (the `measure` extra: mapper/core/extras.py)."""
    if importlib.util.find_spec("onnxruntime") is None:
        return []
    data = without_external_data(model).SerializeToString()
    try:  # in a scratch folder: where it cannot infer every shape, ONNX Runtime saves the model into its cwd
        result = run_child(
            CHILD,
            [],
            data,
            memory_limit="ORT_SHAPES_MEMORY_BYTES",
            cpu_limit="ORT_SHAPES_SECONDS",
            wall_limit="ORT_SHAPES_SECONDS",
            keep={CHILD_STDOUT: limits.MAX_MODEL_BYTES},
        )
    except (MapperError, OSError):
        return []
    if result.returncode != 0 or CHILD_STDOUT not in result.files:
        return []
    graph = onnx.GraphProto()
    try:
        graph.ParseFromString(result.files[CHILD_STDOUT])
    except Exception:  # noqa: BLE001 - a garbled answer is no answer
        return []
    return list(graph.value_info)


def ort_node_value_info(node: Node, specs: tuple, values: tuple, opset_import) -> list[onnx.ValueInfoProto]:
    """ONNX Runtime's inference for one node alone, its inputs at their known shapes (small constant inputs
    as initializers): the fallback when inference over the whole model gives up on another node's handler.
    [] when the node cannot be written back (an attribute onnx's helper does not take) or ORT fails."""
    try:
        proto = onnx.helper.make_node(
            node.op_type, list(node.inputs), list(node.outputs), domain=node.domain, **node.attrs
        )
    except (TypeError, ValueError):
        return []
    inputs, constants = [], []
    for name, spec, value in zip(node.inputs, specs, values):
        if not name or spec is None:
            continue
        if value is not None:
            constants.append(numpy_helper.from_array(value, name))
        inputs.append(onnx.helper.make_tensor_value_info(name, dtype_code(spec.dtype), list(spec.shape)))
    graph = onnx.helper.make_graph(
        [proto], "node", inputs, [onnx.ValueInfoProto(name=o) for o in node.outputs if o], initializer=constants
    )
    return ort_inferred_value_info(onnx.helper.make_model(graph, opset_imports=list(opset_import)))
