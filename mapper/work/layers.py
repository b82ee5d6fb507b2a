"""Layer types for roll-ups, and recognition of attention and normalization blocks.

Part of the work stage (stage 2, after each node's work). Exporters decompose attention into
MatMul -> scale -> mask -> Softmax -> MatMul (with GQA's K/V Expand) and
RMSNorm/LayerNorm into ReduceMean chains; this module finds those subgraphs so
their nodes roll up as one Attention or Normalization layer.
"""

from __future__ import annotations

from mapper.core.caches import ModelCaches
from mapper.core.graph import Graph, LayerType, Node, OpClass
from mapper.ops import OPS
from mapper.work.ops import LayerPlacer

# A layer type by work class, for an op whose entry names none (an elementwise op, a reshape...)
LAYER_OF_CLASS: dict[OpClass, LayerType] = {
    OpClass.ELEMENTWISE: LayerType.ELEMENTWISE,
    OpClass.TRANSCENDENTAL: LayerType.ELEMENTWISE,
    OpClass.DATA_MOVEMENT: LayerType.DATA_MOVEMENT,
    OpClass.VIEW: LayerType.DATA_MOVEMENT,
    OpClass.REDUCTION: LayerType.NORMALIZATION,
}

# Between QK^T and Softmax: scale, mask, casts, Gemma-2's soft-capping (cap * tanh(s / cap)). After Softmax:
# casts, dropout.
SCORE_OPS = frozenset({"Add", "Mul", "Div", "Sub", "Where", "Cast", "Max", "Min", "Clip", "Tanh"})
PROB_OPS = frozenset({"Cast", "Dropout", "Identity", "IsNaN", "Where"})  # SDPA exports zero NaN rows
# How K and V reach the attention MatMuls: head split, transposes, GQA's repeat_kv, scaling.
KV_PATH_OPS = frozenset(
    {"Transpose", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Tile", "Cast", "Mul", "Div", "Identity"}
)
NORM_CHAIN_OPS = frozenset(
    {"Pow", "ReduceMean", "ReduceSumSquare", "Add", "Sub", "Sqrt", "Reciprocal", "Div", "Mul", "Cast"}
)
MATMUL_OPERANDS = 2  # MatMul's inputs A and B (ONNX operator spec); in QK^T both are activations
# A decomposed norm's walk from its reduction: it stops at this many nodes (LayerNorm's Sub, Pow, two
# ReduceMeans, Add eps, Sqrt, Div, Mul gamma, Add beta, with Casts around them, fit), and a block of fewer
# than NORM_MIN_NODES is a lone reduction with one op after it, not a norm.
NORM_MAX_NODES = 14
NORM_MIN_NODES = 3


def _is_activation(graph: Graph, tensor: str) -> bool:
    return tensor not in graph.weights and tensor in graph.producers or tensor in graph.input_set


def _walk_back(graph: Graph, tensor: str, allowed: frozenset[str], limit: int = 8) -> tuple[list[Node], Node | None]:
    """Follow single producers through `allowed` ops; return the path and the first other producer."""
    path: list[Node] = []
    node = graph.producer(tensor)
    while node is not None and node.op_type in allowed and len(path) < limit:
        path.append(node)
        nxt = next((i for i in node.inputs if i and _is_activation(graph, i)), None)
        node = graph.producer(nxt) if nxt else None
    return path, node


def find_attention(graph: Graph) -> list[list[Node]]:
    """Each recognized attention block as its nodes: QK^T MatMul .. Softmax .. PV MatMul + K/V paths."""
    blocks = []
    for softmax in graph.nodes:
        if softmax.op_type != "Softmax" or not softmax.inputs or not softmax.outputs:  # a hostile file's node
            continue  # may lack either
        score_path, qk = _walk_back(graph, softmax.inputs[0], SCORE_OPS)
        if (
            qk is None
            or qk.op_type != "MatMul"
            or len(qk.inputs) < MATMUL_OPERANDS
            or not all(_is_activation(graph, i) for i in qk.inputs[:MATMUL_OPERANDS])
        ):
            continue
        pv, prob_path = _find_pv(graph, softmax)
        if pv is None:
            continue
        block = [qk, *score_path, softmax, *prob_path, pv]
        for operand in (qk.inputs[0], qk.inputs[1], pv.inputs[1]):
            path, _ = _walk_back(graph, operand, KV_PATH_OPS, limit=6)
            block.extend(n for n in path if all(u in block or u in path for u in _users_of(graph, n)))
        blocks.append(block)
    return blocks


def _find_pv(graph: Graph, softmax: Node) -> tuple[Node | None, list[Node]]:
    """The MatMul that multiplies the probabilities by V, and the casts/dropout/NaN guards before it."""
    path: list[Node] = []
    on_path: set[str] = set()  # the path's names: a Softmax read by 10^5 Casts is no quadratic search
    frontier = [softmax.outputs[0]]
    for _ in range(4):
        nxt: list[str] = []
        for tensor in frontier:
            for user in graph.users(tensor):
                if user.op_type == "MatMul" and user.inputs[0] == tensor and len(user.inputs) > 1:
                    return user, path
                if user.op_type in PROB_OPS and user.name not in on_path:
                    path.append(user)
                    on_path.add(user.name)
                    nxt.extend(o for o in user.outputs if o)
        frontier = nxt
    return None, []


def _users_of(graph: Graph, node: Node) -> list[Node]:
    return [u for o in node.outputs for u in graph.users(o)]


def find_norms(graph: Graph, taken: set[str]) -> list[list[Node]]:
    """Decomposed LayerNorm/RMSNorm: a ReduceMean and the elementwise chain it feeds, up to the affine."""
    blocks = []
    for start in graph.nodes:
        if start.op_type not in ("ReduceMean", "ReduceSumSquare") or start.name in taken or not start.inputs:
            continue
        x = start.inputs[0]
        block = {start.name: start}
        # the square (RMSNorm) or centring (LayerNorm) that feeds the reduction
        feeder = graph.producer(x)
        if feeder is not None and feeder.op_type in ("Pow", "Mul", "Sub") and feeder.name not in taken:
            block[feeder.name] = feeder
            root = next((i for i in feeder.inputs if i and _is_activation(graph, i)), x)
        else:
            root = x
        frontier = [start]
        while frontier and len(block) < NORM_MAX_NODES:
            node = frontier.pop()
            for user in _users_of(graph, node):
                if user.name in block or user.name in taken or user.op_type not in NORM_CHAIN_OPS:
                    continue
                if not all(
                    i in graph.weights or i == root or (maker := graph.producer(i)) is None or maker.name in block
                    for i in user.inputs
                    if i
                ):
                    continue  # an outside activation joins here (a residual): the norm ended before
                block[user.name] = user
                frontier.append(user)
        if len(block) >= NORM_MIN_NODES:
            blocks.append(list(block.values()))
    return blocks


def recognized_blocks(graph: Graph, caches: ModelCaches) -> dict[str, tuple[LayerType, int]]:
    """Node name -> (Attention or Normalization, block id) for the nodes of recognized blocks.
    Found from the graph's structure alone (op types and dataflow), so kept per model structure."""

    def find() -> dict[str, tuple[LayerType, int]]:
        layer: dict[str, tuple[LayerType, int]] = {}
        for gid, block in enumerate(find_attention(graph)):
            for n in block:
                layer.setdefault(n.name, (LayerType.ATTENTION, gid))
        offset = len(layer) + 1_000_000  # norm group ids never collide with attention ids
        for gid, block in enumerate(find_norms(graph, set(layer))):
            for n in block:
                layer.setdefault(n.name, (LayerType.NORMALIZATION, offset + gid))
        return layer

    return caches.blocks(graph.structure, find)


def layer_placer(graph: Graph, caches: ModelCaches) -> LayerPlacer:
    """(node name, op type, op class) -> (layer type, block id): a recognized block's type and id,
    else the op's own layer type and no block (-1)."""
    blocks = recognized_blocks(graph, caches)

    plain: dict[tuple[str, OpClass], tuple[LayerType, int]] = {}  # one lookup per op type, not per node

    def place(name: str, op_type: str, op_class: OpClass) -> tuple[LayerType, int]:
        found = blocks.get(name)
        if found is None:
            found = plain.get((op_type, op_class))
            if found is None:
                found = plain[op_type, op_class] = (plain_layer(op_type, op_class), -1)
        return found

    return place


def plain_layer(op_type: str, op_class: OpClass) -> LayerType:
    """The op's own layer type (its entry's; a QOperator op's is its float twin's), else its class's."""
    entry = OPS.get(op_type)
    if entry is not None and entry.layer is not None:
        return entry.layer
    return LAYER_OF_CLASS.get(op_class, LayerType.OTHER)
