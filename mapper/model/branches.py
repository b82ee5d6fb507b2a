"""Import, before the walk: If nodes that branch on a boolean graph input the user binds.

Hugging Face Optimum's merged decoders (`decoder_model_merged.onnx`, common on the hub) hold the whole
model inside one If on the input `use_cache_branch`: the then-branch is the decoder that reads a KV cache,
the else-branch the one that does not. As it stands the graph is a single host-side node. Such an input
is bound like a dim (`--dim use_cache_branch=1`); the If is then replaced by the nodes of the branch it
takes, which read the outer graph's tensors by name as the branch did, and whose outputs take the If's
names. Ifs on computed conditions are left as they are (control flow, reported on the host).
"""

from __future__ import annotations

import onnx
from onnx import helper

from mapper.core import limits
from mapper.core.errors import MapperError

BRANCH_VALUES = (0, 1)
MAX_INLINE_ROUNDS = 8  # nested Ifs on bound inputs, inlined a level per round


def branch_inputs(model: onnx.ModelProto) -> list[str]:
    """Boolean graph inputs of at most one element that a top-level If branches on."""
    inits = {t.name for t in model.graph.initializer}
    flags = {
        vi.name
        for vi in model.graph.input
        if vi.name not in inits
        and vi.type.tensor_type.elem_type == onnx.TensorProto.BOOL
        and all(d.HasField("dim_value") and d.dim_value == 1 for d in vi.type.tensor_type.shape.dim)
    }
    if not flags:  # most models: no node scan
        return []
    return sorted({n.input[0] for n in model.graph.node if n.op_type == "If" and n.input and n.input[0] in flags})


def _branch(node: onnx.NodeProto, taken: int) -> onnx.GraphProto:
    key = "then_branch" if taken else "else_branch"
    for a in node.attribute:
        if a.name == key and a.type == onnx.AttributeProto.GRAPH:
            return a.g
    raise MapperError(f"If node {node.name!r} has no {key} graph; the file is malformed")


def inline_bound_branches(model: onnx.ModelProto, values: dict[str, int]) -> onnx.ModelProto:
    """A copy of the model with each If on a bound branch input replaced by the branch it takes."""
    for name, value in values.items():
        if value not in BRANCH_VALUES:
            raise MapperError(f"branch input {name!r}={value} must be 0 or 1 (which branch of its If runs)")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for _ in range(MAX_INLINE_ROUNDS):
        nodes, changed = [], False
        for node in out.graph.node:
            if node.op_type != "If" or not node.input or node.input[0] not in values:
                nodes.append(node)
                continue
            branch = _branch(node, values[node.input[0]])
            if len(branch.output) != len(node.output):
                raise MapperError(
                    f"If node {node.name!r}: its branch has {len(branch.output)} outputs for"
                    f" {len(node.output)}; the file is malformed"
                )
            nodes.extend(branch.node)
            out.graph.initializer.extend(branch.initializer)
            nodes.extend(
                helper.make_node("Identity", [inner.name], [outer], name=f"{node.name}/{outer}")
                for inner, outer in zip(branch.output, node.output)
                if outer and inner.name != outer
            )
            changed = True
        if not changed:
            return out
        if len(nodes) > limits.MAX_NODES:
            raise MapperError(
                f"with its If branches in place the graph has {len(nodes)} nodes, over {limits.limit_text('MAX_NODES')}"
            )
        del out.graph.node[:]
        out.graph.node.extend(nodes)
    return out
