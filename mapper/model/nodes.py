"""Import, step one: an ONNX graph's nodes -> `Node` records in execution order.

Attributes become plain Python values (checked against the types the rules read), each node gets its
`signature` (what besides input shapes decides its outputs and work), and the nodes are put in
topological order. Nodes are the same at every binding, so a model's are converted once per hash.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from dataclasses import replace
from itertools import chain

import onnx

from mapper.core.errors import MapperError
from mapper.core.graph import Node, node_signature
from mapper.model.values import attr_value, is_small_inline

# Attributes the shape and work rules read, by the type ONNX gives them; another type is a malformed file.
ATTR_TYPES = {
    int: (
        "axis",
        "group",
        "transA",
        "transB",
        "keepdims",
        "to",
        "start",
        "end",
        "num_heads",
        "q_num_heads",
        "kv_num_heads",
        "blocksize",
        "allowzero",
        "upper",
        "size",
        "num_outputs",
        "noop_with_empty_axes",
        "k",
        "fmod",
        "ceil_mode",
        "batch_dims",
        "N",
        "K",
        "value_int",
        "output_dtype",
        "channels_last",
    ),
    tuple: (
        "axes",
        "pads",
        "kernel_shape",
        "strides",
        "dilations",
        "starts",
        "ends",
        "split",
        "shape",
        "perm",
        "qkv_hidden_sizes",
        "output_shape",
        "output_padding",
        "value_ints",
    ),
    str: ("equation", "auto_pad"),
    onnx.TensorProto: ("value",),
}
_ATTR_TYPE = {name: kind for kind, names in ATTR_TYPES.items() for name in names}


def _check_attrs(node_name: str, op_type: str, attrs: dict) -> None:
    for key, value in attrs.items():
        kind = _ATTR_TYPE.get(key)
        if kind is not None and not (
            isinstance(value, kind)
            and (kind is not tuple or (isinstance(value, tuple) and all(isinstance(v, int) for v in value)))
        ):
            want = {int: "an integer", tuple: "a list of integers", str: "a string", onnx.TensorProto: "a tensor"}[kind]
            raise MapperError(
                f"node {node_name!r} ({op_type}): attribute {key!r} must be {want}, got"
                f" {type(value).__name__}; the file is malformed, re-export the model"
            )


def _check_text(nodes: list[Node]) -> None:
    """protobuf hands back invalid UTF-8 as bytes, which cannot join text: one join over every name
    finds that at once; only then is the culprit looked for."""
    try:
        "".join(chain.from_iterable((n.name, n.op_type, n.domain, *n.inputs, *n.outputs) for n in nodes))
        return
    except TypeError:
        pass
    for i, n in enumerate(nodes):
        if not all(isinstance(text, str) for text in (n.name, n.op_type, n.domain, *n.inputs, *n.outputs)):
            raise MapperError(f"node {i} ({n.op_type!r}) has a name that is not UTF-8 text; the file is corrupt")


def _tensors_as_bytes(attrs: dict) -> dict:
    """Attributes with each small inline tensor replaced by its serialized bytes (hashable, and equal
    exactly when the tensors are); large or external tensors and graphs stay as they are."""
    return {
        key: value.SerializeToString() if isinstance(value, onnx.TensorProto) and is_small_inline(value) else value
        for key, value in attrs.items()
    }


NAME_SCOPES = "pkg.torch.onnx.name_scopes"  # torch.onnx (dynamo): the module path of each node, as a list literal
SCOPE_PART = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")  # "layers.0", "mlp", "up_proj", "linear_1"
MAX_SCOPE_TEXT = 4096  # characters of the metadata read; a longer value is not a module path list


def module_scope(node: onnx.NodeProto) -> str:
    """The node's name as TorchScript exports write it ("/model/layers.0/mlp/up_proj/linear"), from the dynamo
    exporter's name scopes (['', 'model', 'model.layers.0', 'model.layers.0.mlp', 'model.layers.0.mlp.up_proj',
    'linear']: each scope extends its parent, the last is the op, numbered within its module); "" where
    absent or not plain dotted names (hostile text never becomes a kernel name)."""
    if not node.metadata_props or node.name.startswith("/"):  # a scoped name (TorchScript) says it already
        return ""
    text = next((p.value for p in node.metadata_props if p.key == NAME_SCOPES), "")
    if not text or len(text) > MAX_SCOPE_TEXT:
        return ""
    try:
        scopes = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ""
    if not isinstance(scopes, list) or not all(isinstance(x, str) for x in scopes):
        return ""
    parts, parent = [], ""
    for scope in (x for x in scopes if x):
        local = scope[len(parent) + 1 :] if parent and scope.startswith(parent + ".") else scope
        if not SCOPE_PART.fullmatch(local):
            return ""
        parts.append(local)
        parent = scope
    return "/" + "/".join(parts) if len(parts) > 1 else ""


OP_NUMBER = re.compile(r"_\d+$")  # fx numbers its nodes across the whole graph: "linear_8" in layer 1


def local_leaves(scopes: list[str]) -> list[str]:
    """Each node's scoped name with its op numbered within its module, as TorchScript numbers it ("/.../linear",
    "/.../linear_1" in every layer), so the same op of every layer reads alike and groups."""
    counts: dict[tuple[str, str], int] = {}
    out = []
    for scoped in scopes:
        if not scoped:
            out.append("")
            continue
        module, _, leaf = scoped.rpartition("/")
        base = OP_NUMBER.sub("", leaf)
        n = counts[module, base] = counts.get((module, base), -1) + 1
        out.append(f"{module}/{base}" + (f"_{n}" if n else ""))
    return out


def to_nodes(model: onnx.ModelProto) -> list[Node]:
    nodes: list[Node] = []
    interned: dict[tuple, int] = {}
    for i, n in enumerate(model.graph.node):
        inputs, outputs = tuple(n.input), tuple(n.output)
        op_type, domain = n.op_type, n.domain
        name = n.name or f"{op_type}_{i}"
        attrs = {}
        if n.attribute:
            attrs = {a.name: attr_value(a) for a in n.attribute}
            _check_attrs(name, op_type, attrs)
        signature = node_signature(op_type, domain, attrs, inputs, outputs, interned)
        if signature is None:  # a tensor attribute (ConstantOfShape's fill): a small one signs by its bytes
            signature = node_signature(op_type, domain, _tensors_as_bytes(attrs), inputs, outputs, interned)
        nodes.append(Node(name, op_type, domain, inputs, outputs, attrs, signature, module_scope(n)))
    _check_text(nodes)
    if any(node.scope for node in nodes):
        nodes = [
            replace(n, scope=s) if s != n.scope else n for n, s in zip(nodes, local_leaves([n.scope for n in nodes]))
        ]
    if len({node.name for node in nodes}) == len(nodes):
        return nodes
    seen: dict[str, int] = {}
    unique = []
    for node in nodes:  # duplicate node names (hostile or sloppy exporters) get a suffix
        count = seen.get(node.name, 0)
        seen[node.name] = count + 1
        unique.append(node if count == 0 else replace(node, name=f"{node.name}#{count}"))
    return unique


def topological_order(nodes: list[Node], available: set[str]) -> list[Node]:
    """Kahn's algorithm; inputs produced by no node are taken as given (dangling ones are caught later)."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o in producer or o in available:
                first = nodes[producer[o]].name if o in producer else "a graph input or initializer"
                raise MapperError(
                    f"tensor {o!r} is produced by both {first!r} and node {n.name!r};"
                    " an ONNX graph assigns each tensor once"
                )
            if o:
                producer[o] = i
    done: set[str] = set()
    for n in nodes:  # exporters write nodes in order: check that first, in one pass
        if any(name in producer and name not in done and name not in available for name in n.inputs):
            break
        done.update(n.outputs)
    else:
        return nodes
    indeg = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in set(n.inputs):
            j = producer.get(name)
            if name and j is not None and name not in available:
                indeg[i] += 1
                users.setdefault(j, []).append(i)
    ready = deque(i for i, d in enumerate(indeg) if d == 0)
    order = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for u in users.get(i, ()):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        stuck = next(nodes[i].name for i, d in enumerate(indeg) if d > 0)
        raise MapperError(f"the graph has a cycle through node {stuck!r}; an ONNX graph must be acyclic")
    return [nodes[i] for i in order]


def ordered_nodes(model: onnx.ModelProto, available: frozenset[str]) -> list[Node]:
    """The model's nodes in execution order, `available` the tensors there before any node runs. Nodes are
    plain data, the same at every binding: the model handle keeps them (`ModelCaches.ordered_nodes`)."""
    return topological_order(to_nodes(model), set(available))
