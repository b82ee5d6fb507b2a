"""The operator graph the importer produces and every later stage reads.

Frozen dataclasses only: a `Graph` holds nodes with concrete shapes at the
user's bindings, so fusion, tiling and cost never see a symbolic dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from mapper.core.records import record
from mapper.core.vocab import PlanDtype

# Bytes per element of the ONNX element types we model (onnx.TensorProto enum names, lower case).
DTYPE_BYTES: dict[str, float] = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float16": 2,
    "bfloat16": 2,
    "float8e4m3fn": 1,
    "float8e4m3fnuz": 1,
    "float8e5m2": 1,
    "float8e5m2fnuz": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
    "int4": 0.5,
    "uint4": 0.5,
    "string": 8,
    "complex64": 8,
    "complex128": 16,
    "undefined": 4,
}

# Control-flow ops, whose bodies are subgraphs: never folded at import, and not entered by the work model.
SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


class OpClass(StrEnum):
    """What kind of work an operator is (the work model's first column)."""

    MATRIX = "matrix"
    ELEMENTWISE = "elementwise"
    TRANSCENDENTAL = "transcendental"
    REDUCTION = "reduction/normalization"
    DATA_MOVEMENT = "data movement"
    VIEW = "view"
    SHAPE_ONLY = "shape-only"
    CONTROL = "control/host"
    UNMODELED = "unmodeled"


class LayerType(StrEnum):
    """Roll-up buckets for the layer-type views."""

    CONV = "Conv"
    LINEAR = "Linear/GEMM"
    ATTENTION = "Attention"
    NORMALIZATION = "Normalization"
    ELEMENTWISE = "Activation/Elementwise"
    POOLING = "Pooling"
    EMBEDDING = "Embedding/Gather"
    DATA_MOVEMENT = "Data movement"
    OTHER = "Other"
    COLLECTIVE = "Collective (interconnect)"


@record
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> float:
        return tensor_bytes(self.elements, self.dtype)


def tensor_bytes(elements: int, dtype: str) -> float:
    """Bytes of `elements` of an ONNX element type (`DTYPE_BYTES`; one not listed counts 4)."""
    return elements * DTYPE_BYTES.get(dtype, 4)


class TensorTable(Mapping[str, TensorSpec]):
    """Every tensor of a binding as columns: name -> row, each row's shape and element type. A Llama-2-70B
    binding has ~6,900 tensors: as records they were as many objects for the garbage collector to walk at each
    full pass (a search keeps 256 bindings), here they are three (the name index holds only strings and ints,
    which the collector does not track; the shapes are tuples, shared by a repeated layer's copies). Reading a
    name gives its `TensorSpec`, made for the read; `shape` and `dtype` read the columns alone. The
    import's walk writes rows (`put`); every later stage only reads."""

    __slots__ = ("_dtypes", "_rows", "_shapes")

    def __init__(self, specs: Iterable[TensorSpec] = ()):
        self._rows: dict[str, int] = {}
        self._shapes: list[tuple[int, ...]] = []
        self._dtypes: list[str] = []
        for spec in specs:
            self.put(spec.name, spec.shape, spec.dtype)

    def put(self, name: str, shape: tuple[int, ...], dtype: str) -> None:
        """Write a tensor's row (a name written again takes the new shape and type, as a dict's key would)."""
        row = self._rows.get(name)
        if row is None:
            self._rows[name] = len(self._shapes)
            self._shapes.append(shape)
            self._dtypes.append(dtype)
        else:
            self._shapes[row], self._dtypes[row] = shape, dtype

    def put_like(self, names: Sequence[str], sources: Sequence[str]) -> None:
        """Write each name with its source's shape and type (a repeated layer's copies, from their twins)."""
        rows, shapes, dtypes = self._rows, self._shapes, self._dtypes
        if not rows.keys().isdisjoint(names):  # a name written again: row by row, as `put`
            for name, source in zip(names, sources):
                row = rows[source]
                self.put(name, shapes[row], dtypes[row])
            return
        taken = list(map(rows.__getitem__, sources))  # all new: appended at once (a name twice keeps its last row)
        rows.update(zip(names, range(len(shapes), len(shapes) + len(taken))))
        shapes.extend(map(shapes.__getitem__, taken))
        dtypes.extend(map(dtypes.__getitem__, taken))

    @classmethod
    def _of_columns(cls, rows: dict[str, int], shapes: list[tuple[int, ...]], dtypes: list[str]) -> TensorTable:
        table = cls()
        table._rows, table._shapes, table._dtypes = rows, shapes, dtypes
        return table

    def copy(self) -> TensorTable:
        return self._of_columns(dict(self._rows), list(self._shapes), list(self._dtypes))

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[self._rows[name]]

    def dtype(self, name: str) -> str:
        return self._dtypes[self._rows[name]]

    def shape_of(self, name: str) -> tuple[int, ...] | None:
        """The tensor's shape, or None where the table has no such tensor."""
        row = self._rows.get(name)
        return None if row is None else self._shapes[row]

    def __getitem__(self, name: str) -> TensorSpec:
        row = self._rows[name]
        return TensorSpec(name, self._shapes[row], self._dtypes[row])

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        row = self._rows.get(name)
        return default if row is None else TensorSpec(name, self._shapes[row], self._dtypes[row])

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TensorTable):
            return self._facts() == other._facts()
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # a table is written by its walk: no hash, as a dict has none

    def _facts(self) -> dict[str, tuple[tuple[int, ...], str]]:
        shapes, dtypes = self._shapes, self._dtypes
        return {name: (shapes[row], dtypes[row]) for name, row in self._rows.items()}

    def __reduce__(self):
        return _table_of, (list(self._rows), [self._shapes[r] for r in self._rows.values()],
                           [self._dtypes[r] for r in self._rows.values()])  # fmt: skip

    def __repr__(self) -> str:
        return f"TensorTable({len(self)} tensors)"


def _table_of(names: list[str], shapes: list[tuple[int, ...]], dtypes: list[str]) -> TensorTable:
    """A pickled table back (`TensorTable.__reduce__`)."""
    return TensorTable._of_columns({n: r for r, n in enumerate(names)}, list(shapes), list(dtypes))


@dataclass(frozen=True, slots=True)
class Node:
    """One ONNX node with its attributes as plain Python values."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    # `node_signature`, or None where an attribute is a tensor or a graph:
    # nodes of one signature at the same input shapes have the same output shapes and work (the
    # importer infers and costs each such combination once; 80 identical decoder layers are one).
    signature: int | None = field(default=None, compare=False, repr=False)
    # The exporter's module path where the node's name does not carry it (torch.onnx's dynamo exporter names
    # nodes "node_linear_3" and writes the path in its `pkg.torch.onnx.name_scopes` metadata): "" otherwise.
    scope: str = field(default="", compare=False, repr=False)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


def node_signature(
    op_type: str,
    domain: str,
    attrs: dict[str, Any],
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    interned: dict[tuple, int],
) -> int | None:
    """What, besides input shapes, decides a node's output shapes and work: the op, its attributes
    and which of its optional inputs and outputs are present, as a small integer (one per distinct
    combination in `interned`, shared by the nodes of one model)."""
    items = tuple(attrs.items())
    try:
        hash(items)
    except TypeError:  # a TensorProto or GraphProto attribute
        return None
    return interned.setdefault(
        (op_type, domain, items, tuple(map(bool, inputs)), tuple(map(bool, outputs))), len(interned)
    )


# `ReleasedPrecision.source` of a model file or upload: the precision of its own weight tensors.
FILE_TENSORS = "the file's tensors"
_MISSING = object()  # `Graph.derived`: a kept value may be None
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ReleasedPrecision:
    """The precision a model is published in (what `--dtype auto` maps at) and where that was read: a built-in's
    table row (mapper/zoo), a Hugging Face config's torch_dtype, or `FILE_TENSORS`."""

    dtype: PlanDtype
    source: str


@dataclass(frozen=True, slots=True)
class Graph:
    """A model at concrete shapes.

    `tensors` maps every tensor name to its spec (a `TensorTable`); `weights` names the tensors
    that are parameters (initializers, Constant outputs and ConstantOfShape
    results of constant shapes); `folded` names the nodes whose outputs were
    computed at import (shape arithmetic): they are not kernels.
    """

    name: str
    nodes: tuple[Node, ...]
    tensors: TensorTable
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    weights: frozenset[str]
    folded: frozenset[str]
    opset: int
    sha256: str
    dims: tuple[tuple[str, int], ...] = ()
    producers: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unresolved: tuple[tuple[str, str], ...] = ()  # (node name, why its shapes are unknown)
    # Weights stored narrower than their tensor type: in a QDQ-quantized model a Conv reads
    # DequantizeLinear(int8 constant), folded at import to a float weight that memory holds as int8.
    stored_dtypes: dict[str, str] = field(default_factory=dict)
    # Each node's twin: the index of the node one period earlier whose outputs, class and folding it copied at
    # import (`model.repeats`: a repeated layer's node); -1 where none, () where the import copied not all.
    twins: tuple[int, ...] = field(default=(), compare=False, repr=False)
    # `inputs` and `outputs` as sets, for the membership tests of every later stage: a graph may have
    # 10^5 outputs, and a test against the tuple per tensor would make each stage quadratic.
    input_set: frozenset[str] = field(init=False, repr=False, compare=False)
    output_set: frozenset[str] = field(init=False, repr=False, compare=False)
    # the live nodes' op types: what a stage that looks for one kind of node (a router's TopK, a KV-cache Concat, a
    # QuantizeLinear) asks before it walks every node; structural, so the import passes its live structure's (left
    # out or empty: the nodes' own, computed here)
    op_types: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    # The weights a folded node computes (a Gather of constant indices, a ConstantOfShape): the only weights whose
    # specs may change with the bindings, as initializers' and Constant outputs' cannot; None where not known (a
    # graph built by hand: then any weight may)
    derived_weights: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    # The precision the model is published in (a built-in's or a config's); None: its weight tensors' (a file's)
    released: ReleasedPrecision | None = None
    # What later stages find in this graph once and read at every mapping of it (`derived`): kept on the graph
    # itself, so the key is the graph (a copy made by `replace` starts empty)
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "input_set", frozenset(self.inputs))
        object.__setattr__(self, "output_set", frozenset(self.outputs))
        if not self.op_types:
            object.__setattr__(self, "op_types", frozenset(n.op_type for n in self.nodes))

    def derived(self, name: str, make: Callable[[Graph], _T]) -> _T:
        """`make(self)`, found once per graph: a value of this graph alone (its KV-cache updates, its tiny operands,
        its cache Concats) that every mapping of it asks for; two threads racing compute equal values."""
        found = self._derived.get(name, _MISSING)
        if found is _MISSING:
            found = self._derived[name] = make(self)
        return found

    @property
    def structure(self) -> tuple[str, frozenset[str]]:
        """What the graph's structure (live nodes, weights, dataflow) depends on: the model and which of
        its nodes folded away. Bindings that fold the same nodes share it; so do caches keyed by it."""
        return self.sha256, self.folded

    def stored_spec(self, spec: TensorSpec) -> TensorSpec:
        """The tensor as memory holds it: itself, or a weight at the narrower type it is stored in."""
        stored = self.stored_dtypes.get(spec.name)
        return spec if stored is None else TensorSpec(spec.name, spec.shape, stored)

    def spec(self, name: str) -> TensorSpec | None:
        return self.tensors.get(name) if name else None

    def producer(self, tensor: str) -> Node | None:
        k = self.producers.get(tensor)
        return None if k is None else self.nodes[k]

    def users(self, tensor: str) -> tuple[Node, ...]:
        return tuple(self.nodes[k] for k in self.consumers.get(tensor, ()))
