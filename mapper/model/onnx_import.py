"""Import: ONNX bytes -> `Graph` with concrete shapes at the user's bindings.

Stage one of the pipeline. Reads exactly the file (or bytes) it is given, and of it only the
graph structure (mapper/model/wire.py: the weights stay on disk), never external data, binds
symbolic dims by name, folds shape arithmetic with numpy, and infers every tensor's shape with
our own rules (`shape_rules`), falling back to the model's own value_info, then onnx's
inference, then (com.microsoft ops) ONNX Runtime's in a capped child process (`ort_shapes`).
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import onnx
from google.protobuf.message import DecodeError

from mapper.core import limits
from mapper.core.caches import ModelCaches
from mapper.core.errors import MapperError, path_text
from mapper.core.graph import Graph, Node, ReleasedPrecision, TensorSpec
from mapper.model.bindings import graph_inputs, resolve_bindings, symbolic_dims
from mapper.model.branches import inline_bound_branches
from mapper.model.nodes import ordered_nodes
from mapper.model.repeats import Repeats, find_repeats
from mapper.model.sandbox import open_regular_file
from mapper.model.walk import Walk, initializer_walk, value_info_shape
from mapper.model.wire import Structure, read_structure
from mapper.zoo.hf_config import read_config

# Graph names exporters give every model (PyTorch's "main_graph", Optimum's merged decoders "merged"): the file's
# name says more on a sheet and in the dashboard.
GENERIC_GRAPH_NAMES = frozenset({"", "main_graph", "torch_jit", "torch-jit-export", "tf2onnx", "graph", "merged"})


def read_model_structure(source: str | os.PathLike | bytes) -> tuple[Structure, str]:
    """The model's structure and a display name. An ONNX file (up to MAX_MODEL_FILE_BYTES, weights inside
    included) is memory-mapped and only its graph is read: every large tensor comes back as a shape-only
    external reference (`wire.read_structure`). A Hugging Face config.json (a path ending .json, or bytes
    starting with '{') becomes its decoder's graph (`hf_config`), with its torch_dtype as `Structure.released`.
    A path is opened once, as given; nothing beside it is read."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        _check_file_size(len(data), "the uploaded model")
        if data.lstrip()[:1] == b"{":
            return _built(*read_config(data, "upload")), "upload"
        return read_structure(data, "upload"), "upload"
    path = Path(source)
    try:  # a path the system refuses (ENAMETOOLONG, EACCES) or a FIFO is bad input, not a crash
        with open_regular_file(path) as f:
            size = os.fstat(f.fileno()).st_size
            _check_file_size(size, f"model file {path.name}")
            if path.suffix.lower() == ".json":
                return _built(*read_config(f.read(limits.MAX_CONFIG_BYTES + 1), path.name)), path.stem
            if size == 0:
                raise MapperError(f"model file {path.name} is empty; give an .onnx file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return read_structure(mapped, path.name), path.stem
    except FileNotFoundError:
        raise MapperError(
            f"model file {path_text(path)} not found; give the path of an .onnx file, a config.json or a built-in name"
        ) from None
    except OSError as exc:
        raise MapperError(f"model file {path_text(path)}: {exc.strerror}; check the path") from None


def _built(data: bytes, released: ReleasedPrecision) -> Structure:
    return Structure(data, 0, 0, released)  # a graph built from a config: nothing of a model file read


def _check_file_size(size: int, what: str) -> None:
    if size > limits.MAX_MODEL_FILE_BYTES:
        raise MapperError(
            f"{what} is {size} bytes, over {limits.limit_text('MAX_MODEL_FILE_BYTES')} (protobuf's limit);"
            " export it with external_data=True, or give its graph alone (mapper strip)"
        )


def parse_model(data: bytes, name: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MapperError(
            f"{name} is not a valid ONNX model (protobuf parse failed: {str(exc)[:80]}); upload the .onnx file itself"
        ) from exc
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise MapperError(f"{name} is not an ONNX model (no graph nodes found); upload an .onnx file")
    count = count_nodes(model.graph)
    if count > limits.MAX_NODES:
        raise MapperError(
            f"{name} has {count} or more nodes (control-flow bodies included), over {limits.limit_text('MAX_NODES')}"
        )
    return model


def count_nodes(graph: onnx.GraphProto) -> int:
    """Nodes of the graph and of every If/Loop/Scan body inside it, at any depth: a body runs as many
    times as its trip count says, so a small top level can hide any amount of work. An explicit stack,
    not recursion: a hostile file nests bodies as deep as protobuf allows. Stops once over MAX_NODES."""
    count, stack = 0, [graph]
    while stack and count <= limits.MAX_NODES:
        g = stack.pop()
        count += len(g.node)
        for node in g.node:
            for a in node.attribute:  # by field, not by the declared type (a damaged file may mislabel it)
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return count


# The oldest default-domain opset read: ONNX 1.2's (opset 7) is where today's broadcasting and op
# signatures start, which the shape rules are written for.
OLDEST_OPSET = 7


def default_opset(model: onnx.ModelProto) -> int:
    versions = [int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise MapperError("the model declares no default-domain opset; re-export it with opset 7 or newer")
    if versions[0] < OLDEST_OPSET:
        raise MapperError(
            f"opset {versions[0]} is older than {OLDEST_OPSET}, which this tool reads; re-export with a newer opset"
        )
    return versions[0]


def import_graph(
    model: onnx.ModelProto,
    sha256: str,
    name: str,
    caches: ModelCaches,
    dims: dict[str, int] | None = None,
    batch: int | None = None,
    seq: int | None = None,
) -> tuple[Graph, dict[str, int]]:
    """The model's graph at concrete shapes, and each node's class from the walk (`Walk.classes`: nodes of
    one class have the same output specs), which the work model reads to estimate each class once. `dims`
    binds symbolic dims by name; `batch`/`seq` bind the dims that mean batch and sequence. An unbound dim
    raises MapperError listing the names."""
    opset = default_opset(model)
    free = caches.free_dims(sha256, lambda: MappingProxyType(symbolic_dims(model)))
    bound = resolve_bindings(model, dims, batch, seq, free)
    branches = {n: bound[n] for n, (_, axis) in free.items() if axis == -1}  # branch inputs, as symbolic_dims has them
    if branches:  # the graph depends on the branch taken: so do the caches keyed by the model's hash
        choice = tuple(sorted(branches.items()))
        model = caches.branch_model(choice, lambda: inline_bound_branches(model, branches))
        sha256 = hashlib.sha256(f"{sha256} {list(choice)}".encode()).hexdigest()
    walk = Walk(model, bound, sha256, caches)
    initialized = caches.initializers(sha256, lambda: initializer_walk(model))
    walk.seed(initialized)
    inputs = caches.graph_inputs(sha256, lambda: graph_inputs(model))
    for vi in inputs:
        spec = value_info_shape(vi, bound)
        if spec is None:
            raise MapperError(f"graph input {vi.name!r} has no tensor shape; re-export with static ranks")
        walk.set(vi.name, spec, None)
    available = frozenset(walk.specs)
    ordered = caches.ordered_nodes(sha256, available, lambda: ordered_nodes(model, available))
    repeats = caches.repeats(sha256, available, lambda: find_repeats(ordered, initialized.kid), Repeats())
    copied = walk.visit_all(ordered, repeats)
    folded = frozenset(walk.folded)
    live, weights, producers, consumers, stored, live_at, op_types, derived = caches.live_structure(
        sha256, folded, lambda: live_structure(ordered, folded, walk.const, walk.specs)
    )  # keyed as `Graph.structure`
    twins = caches.twins(sha256, folded, lambda: live_twins(live_at, repeats)) if repeats.copies and copied else ()
    graph = Graph(
        name=name,
        nodes=live,
        tensors=walk.specs,
        inputs=tuple(vi.name for vi in inputs),
        outputs=tuple(o.name for o in model.graph.output),
        weights=weights,
        folded=folded,
        opset=opset,
        sha256=sha256,
        dims=tuple(sorted(bound.items())),
        producers=producers,
        consumers=consumers,
        unresolved=tuple(sorted(walk.unresolved.items())),
        stored_dtypes=stored,
        twins=twins,
        op_types=op_types,
        derived_weights=derived,
    )
    return graph, walk.classes


def _dequantized_weights(
    ordered: list[Node], folded: frozenset[str], specs: Mapping[str, TensorSpec]
) -> dict[str, str]:
    """Float weights that a folded DequantizeLinear makes from an 8- or 4-bit integer constant (QDQ
    models): weight name -> the integer type memory holds them in."""
    stored = {}
    for n in ordered:
        if n.op_type == "DequantizeLinear" and n.name in folded and n.inputs and n.outputs and n.outputs[0] in specs:
            source = specs.get(n.inputs[0])
            if source is not None and source.dtype in ("int8", "uint8", "int4", "uint4"):
                stored[n.outputs[0]] = source.dtype
    return stored


def live_structure(ordered: list[Node], folded: frozenset[str], const: set[str], specs: Mapping[str, TensorSpec]):
    """The nodes left after folding, the weights they read, who makes and uses each tensor, the storage types
    of QDQ weights, and each live node's position in `ordered`. Decided by which nodes folded (and so which
    tensors are constants) and the initializers' types, not by sizes: every binding that folds the same nodes
    shares one (read-only) structure. Last, the live nodes' op types (`Graph.op_types`) and the weights a folded
    node computes (`Graph.derived_weights`)."""
    live_at = tuple(k for k, n in enumerate(ordered) if n.name not in folded)  # live index -> position
    live = tuple(ordered[k] for k in live_at)
    weights = frozenset(i for n in live for i in n.inputs if i in const)
    producers = {o: k for k, n in enumerate(live) for o in n.outputs if o}
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(live):
        for i in n.inputs:
            if i:
                consumers.setdefault(i, []).append(k)
    return (
        live,
        weights,
        producers,
        {k: tuple(v) for k, v in consumers.items()},
        _dequantized_weights(ordered, folded, specs),
        live_at,
        frozenset(n.op_type for n in live),
        tuple(
            sorted(
                o for n in ordered if n.name in folded and n.op_type != "Constant" for o in n.outputs if o in weights
            )
        ),
    )


def live_twins(live_at: tuple[int, ...], repeats: Repeats) -> tuple[int, ...]:
    """Each live node's twin as a live index (`Graph.twins`): the node `repeats` says it copies, -1 for none."""
    index_of = {pos: k for k, pos in enumerate(live_at)}
    return tuple(index_of.get(repeats.twin[pos], -1) for pos in live_at)
