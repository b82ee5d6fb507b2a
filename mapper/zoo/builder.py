"""GraphBuilder: the one place the zoo turns layer code into an ONNX ModelProto.

Weights become initializers that point at external data ("<model>.weights.bin", offset and
length set, file never written), so a graph carries only dims; small constants (shape vectors,
scalars) stay inline so the importer can fold shape arithmetic. Node and weight names follow
the PyTorch exporter's scoping ("/model/layers.0/self_attn/MatMul_3", "layers.0.self_attn.q_proj.weight").
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # PyTorch's TorchScript exporter default; first opset with LayerNormalization
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
Dim = int | str | None  # concrete size, symbolic name, or unknown


def _modules(path: str) -> list[str]:
    """A dotted module path as the exporter scopes it: "model.layers.0.mlp" -> ["model", "layers.0", "mlp"]."""
    parts: list[str] = []
    for part in path.split(".") if path else ():
        if part.isdigit() and parts:
            parts[-1] += f".{part}"
        else:
            parts.append(part)
    return parts


class GraphBuilder:
    """Accumulates nodes, inputs, outputs and initializers for one model.

    `inline_weights=True` stores random weights inline instead of external data: tests use it
    with tiny configs to run a zoo graph in onnxruntime. The spread (0.5) is wide on purpose:
    with 0.02 attention scores are ~0, softmax is uniform, and mask or position bugs go unseen.
    """

    def __init__(self, model_name: str, *, inline_weights: bool = False, seed: int = 0):
        self.model_name = model_name
        self.weights_file = f"{model_name}.weights.bin"
        self.inline_weights = inline_weights
        self._rng = np.random.default_rng(seed)
        # nodes and initializers are added in place (a list of protos copied into a graph at the end costs a
        # 70B decoder's 6,000 nodes twice); inputs and outputs go in at `build`
        self._model = onnx.ModelProto()
        self._graph = self._model.graph  # built in place: no copy of the graph at `build` either
        self._graph.name = model_name
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._consts: dict[tuple, str] = {}
        self._scope: list[str] = []
        self._counts: dict[tuple[str, str], int] = {}  # (module prefix, op type) -> nodes named so far
        self._prefixes: dict[tuple[str, ...], str] = {}  # scope -> its node-name prefix (a decoder reuses each)
        self._offset_bytes = 0

    # -- naming -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nest node and weight names under `name` (a module path such as "layers.3.mlp")."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _node_name(self, op_type: str) -> str:
        """The TorchScript exporter's name: the module path with "/" between modules (a ModuleList index
        stays on its list: "/model/layers.0/mlp/up_proj/MatMul"), then the op type, numbered from the
        second of its type in that module ("MatMul_1")."""
        scope = tuple(self._scope)
        prefix = self._prefixes.get(scope)
        if prefix is None:
            modules = "/".join(_modules(".".join(scope)))
            prefix = self._prefixes[scope] = f"/{modules}/" if modules else "/"
        count = self._counts.get((prefix, op_type), 0)
        self._counts[prefix, op_type] = count + 1
        return f"{prefix}{op_type}" + (f"_{count}" if count else "")

    # -- graph boundary -----------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[Dim], elem_type: int = FLOAT) -> str:
        self._inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, value: str, name: str, shape: Sequence[Dim], elem_type: int = FLOAT) -> str:
        """Expose `value` as graph output `name` (an Identity renames it when the names differ)."""
        if value != name:
            self._graph.node.append(helper.make_node("Identity", [value], [name], name=self._node_name("Identity")))
        self._outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    # -- tensors ------------------------------------------------------------------------------
    def weight(self, leaf: str, shape: Sequence[int]) -> str:
        """A float32 parameter named "<scope>.<leaf>", stored as external data (dims only)."""
        name = ".".join([*self._scope, leaf])
        if self.inline_weights:
            values = self._rng.normal(0.0, 0.5, size=tuple(shape)).astype(np.float32)
            self._graph.initializer.append(numpy_helper.from_array(values, name))
            return name
        tensor = self._graph.initializer.add(name=name, data_type=FLOAT, dims=shape, data_location=TensorProto.EXTERNAL)
        length = math.prod(shape) * 4  # exact ints (numpy's prod costs ~50 us a call on a short list)
        for key, value in (
            ("location", self.weights_file),
            ("offset", str(self._offset_bytes)),
            ("length", str(length)),
        ):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self._offset_bytes += length
        return name

    def const(self, values, dtype=np.int64) -> str:
        """A small inline constant (shape vector, axis list, scalar), shared by value."""
        array = np.asarray(values, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            name = f"onnx::Constant_{len(self._consts)}"
            self._graph.initializer.append(numpy_helper.from_array(array, name))
            self._consts[key] = name
        return self._consts[key]

    def scalar(self, value: float) -> str:
        """A float32 0-D constant, the way exporters emit literals in arithmetic."""
        return self.const(value, np.float32)

    # -- nodes --------------------------------------------------------------------------------
    def op(self, op_type: str, *inputs: str, outputs: int | Sequence[str] = 1, **attrs):
        """Append one node; returns its output name (or a tuple when it has several)."""
        node_name = self._node_name(op_type)
        if isinstance(outputs, int):
            names = [f"{node_name}_output_{i}" for i in range(outputs)]
        else:
            names = list(outputs)
        # the NodeProto helper.make_node would build (attributes sorted by name), without its per-call checks:
        # the same bytes, a third of the time over a 70B decoder's 6,000 nodes
        node = self._graph.node.add(op_type=op_type, input=inputs, output=names, name=node_name)
        if attrs:
            node.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(attrs.items()) if v is not None)
        return names[0] if len(names) == 1 else tuple(names)

    def dim(self, value: str, axis: int) -> str:
        """0-D int64 size of `value` along `axis`: Shape -> Gather, as the exporter traces x.size(i)."""
        return self.op("Gather", self.op("Shape", value), self.const(axis), axis=0)

    def dims_1d(self, value: str, axes: Sequence[int]) -> list[str]:
        """1-D sizes ready for a Concat-built shape: Shape -> Gather -> Unsqueeze per axis."""
        return [self.op("Unsqueeze", self.dim(value, axis), self.const([0])) for axis in axes]

    def shape_of(self, *parts: str | Sequence[int]) -> str:
        """Concat of 1-D pieces (tensor names or literal int lists) into a target shape."""
        pieces = [part if isinstance(part, str) else self.const(list(part)) for part in parts]
        return self.op("Concat", *pieces, axis=0)

    # -- result -------------------------------------------------------------------------------
    def build(self, doc_string: str | None) -> onnx.ModelProto:
        """The model (the fields helper.make_model would set, on the graph built in place). Call once. `doc_string`:
        the building function's `__doc__`, None under `python -OO` (then the model has none)."""
        model = self._model
        model.graph.input.extend(self._inputs)
        model.graph.output.extend(self._outputs)
        model.opset_import.append(helper.make_opsetid("", OPSET))
        model.producer_name, model.doc_string = "mapper.zoo", doc_string or ""
        model.ir_version = 8  # the IR that opset 17 shipped with; readable by onnxruntime >= 1.13
        return model
