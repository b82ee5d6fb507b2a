"""A PyTorch trace's units tied to the model's ONNX nodes by module scope, and what the trace says beside times.

A unit (a GPU kernel, or a CPU trace's outermost op; `torch_trace`) ran inside a module scope ("layer1.0.conv1")
and for an op ("aten::conv2d"). The built-ins' and exported models' ONNX node names carry the same module paths
("/layer1.0/conv1/Conv"; the dynamo exporter's name scopes), so the unit goes to a node of an op type the ATen op
becomes, in its own module or the nearest module above it that has one ("aten::matmul" in
"encoder.layer.0.attention.self" -> "/encoder/layer.0/attention/MatMul"), then in the modules below it. Where a
module holds several such nodes (four Transposes), the op instances take them in turn, in trace order, as the
exporter numbered them in graph order. What matches nothing keeps its time and the reason. `compare_measured` then
scores each mapped kernel from its nodes' time.

A trace without module scopes (a plain `torch.profiler` run, as most public traces are) is matched in graph order
instead, and only where that is sound: the op instances, in the order their units started, take the graph's nodes
of their types one after another, skipping only nodes that launch nothing (views, shapes, constants), and a new
pass over the graph starts where the last one ended at its last kernel; each pass is a run. Where the trace's order
departs from the graph's (an op where the graph runs a node of another type), nothing is matched and the reason
names the first departure: an order that is only similar is never scored.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from mapper.core.graph import OpClass
from mapper.evidence.profiles import NodeMatch
from mapper.evidence.torch_trace import TorchTrace, Unit
from mapper.model.nodes import module_scope
from mapper.ops import OPS
from mapper.plan.kernel_names import module_of

_MATMUL = frozenset({"MatMul", "Gemm", "FusedMatMul", "MatMulNBits"})
_TRANSPOSE = frozenset({"Transpose"})
_ATTENTION = _MATMUL | {"Softmax", "Attention", "MultiHeadAttention", "GroupQueryAttention"}
# The ONNX op types an ATen op (its name without "aten::" and an in-place "_") becomes when exported.
_ONNX_OF: dict[frozenset[str], frozenset[str]] = {
    frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "mkldnn_convolution"}): frozenset(
        {"Conv", "FusedConv"}
    ),
    frozenset({"cudnn_convolution", "conv_transpose2d"}): frozenset({"Conv", "ConvTranspose"}),
    frozenset({"batch_norm", "native_batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm"}): frozenset(
        {"BatchNormalization"}
    ),
    frozenset({"linear", "addmm", "mm", "matmul", "bmm", "baddbmm", "_addmm_activation"}): _MATMUL,
    frozenset({"layer_norm", "native_layer_norm"}): frozenset({"LayerNormalization", "SkipLayerNormalization"}),
    frozenset({"rms_norm", "_fused_rms_norm"}): frozenset({"SimplifiedLayerNormalization", "RMSNormalization"}),
    frozenset({"gelu"}): frozenset({"Gelu", "FastGelu", "BiasGelu", "Erf", "Tanh"}),
    frozenset({"silu"}): frozenset({"Sigmoid"}),
    frozenset({"softmax", "_softmax", "_safe_softmax"}): frozenset({"Softmax"}),
    frozenset({"max_pool2d", "max_pool2d_with_indices"}): frozenset({"MaxPool"}),
    frozenset({"adaptive_avg_pool2d", "avg_pool2d", "mean"}): frozenset(
        {"GlobalAveragePool", "AveragePool", "ReduceMean"}
    ),
    frozenset({"embedding", "index_select"}): frozenset({"Gather"}),
    frozenset({"transpose", "permute", "contiguous", "clone", "copy"}): _TRANSPOSE,
    frozenset({"view", "reshape", "_unsafe_view", "flatten"}): frozenset({"Reshape", "Flatten"}),
    frozenset({"split", "split_with_sizes", "chunk"}): frozenset({"Split", "Slice"}),
    frozenset({"slice", "select", "narrow"}): frozenset({"Slice", "Gather"}),
    frozenset({"cat", "concat"}): frozenset({"Concat"}),
    frozenset({"where", "masked_fill"}): frozenset({"Where"}),
    frozenset({"to", "_to_copy"}): frozenset({"Cast"}),
    frozenset({"rsub", "sub"}): frozenset({"Sub"}),
    frozenset({"scaled_dot_product_attention", "_scaled_dot_product_flash_attention"}): _ATTENTION,
    frozenset({"_scaled_dot_product_efficient_attention", "_flash_attention_forward"}): _ATTENTION,
}
_SAME_NAME = {"relu": "Relu", "add": "Add", "mul": "Mul", "div": "Div", "pow": "Pow", "tanh": "Tanh", "erf": "Erf"}
_SAME_NAME |= {
    "sigmoid": "Sigmoid",
    "exp": "Exp",
    "sqrt": "Sqrt",
    "rsqrt": "Sqrt",
    "neg": "Neg",
    "unsqueeze": "Unsqueeze",
}
NO_SCOPES = (
    "the trace has no module scopes (wrap each module in record_function(<its path>), which an Nsight Systems run"
    " under emit_nvtx records as NVTX ranges: see bench/torch_cpu_trace.py)"
)


def onnx_types(op: str) -> frozenset[str]:
    """The ONNX op types an ATen op is exported as ("aten::relu_" -> {"Relu"}); empty where none is known."""
    base = op.rsplit("::", 1)[-1].rstrip("_") or op
    if base in _SAME_NAME:
        return frozenset({_SAME_NAME[base]})
    return next((types for names, types in _ONNX_OF.items() if base in names), frozenset())


def _parent(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else ""


@dataclass(frozen=True, slots=True)
class _Index:
    exact: dict[str, list[tuple[str, str]]]  # module path -> its own nodes (name, op type), in graph order
    under: dict[str, list[tuple[str, str]]]  # module path -> the nodes of the modules below it


def _index(model) -> _Index:
    exact: dict[str, list[tuple[str, str]]] = defaultdict(list)
    under: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for node in model.graph.node:
        path = module_of(module_scope(node) or node.name)
        if path is None:
            continue
        exact[path].append((node.name, node.op_type))
        above = path
        while above:
            above = _parent(above)
            under[above].append((node.name, node.op_type))
    return _Index(exact, under)


def _candidates(index: _Index, scope: str, types: frozenset[str]) -> tuple[str, list[str]]:
    """The module whose nodes take the op, and those nodes: the scope's own, then each module above it, then the
    modules below the scope; ("", []) where none has a node of the op's types."""
    path: str | None = scope
    while path is not None:
        hits = [name for name, op in index.exact.get(path, ()) if op in types]
        if hits:
            return path, hits
        path = _parent(path) if path else None
    below = [name for name, op in index.under.get(scope, ()) if op in types] if scope else []
    return (scope, below) if below else ("", [])


def _unit_types(unit: Unit) -> tuple[frozenset[str], str]:
    """The ONNX op types a unit's op may have run as, or ("unmatched: why") where it names none."""
    if unit.why:
        return frozenset(), f"unmatched: {unit.why}"
    types = onnx_types(unit.op)
    return types, "" if types else f"unmatched: no ONNX op is known for {unit.op}"


def _scope_matcher(index: _Index):
    turns: dict[tuple[str, frozenset[str]], int] = defaultdict(int)
    last: dict[tuple[str, frozenset[str]], str] = {}

    def match(unit: Unit) -> tuple[str, str]:
        """(the ONNX node, how) or ("", "unmatched: why")."""
        types, why = _unit_types(unit)
        if why:
            return "", why
        module, hits = _candidates(index, unit.scope, types)
        if not hits:
            where = f"module {unit.scope} or above" if unit.scope else "the model's root"
            return "", f"unmatched: no {'/'.join(sorted(types))} node in {where}"
        key = (module, types)
        if last.get(key) != unit.op_key:  # a new op instance takes the next node; its kernels share one
            last[key] = unit.op_key
            turns[key] += 1
        return hits[(turns[key] - 1) % len(hits)], f"module scope {module or '(root)'}"

    return match


GRAPH_ORDER = "graph order (no module scopes)"
_LAUNCHES_NOTHING = frozenset({OpClass.VIEW, OpClass.SHAPE_ONLY})


@dataclass(frozen=True, slots=True)
class _Order:
    """The graph-order alignment of a trace without module scopes."""

    node_of: dict[str, str]  # op instance (Unit.op_key) -> the ONNX node it ran
    passes: int  # passes over the graph: the trace's runs when it marks no steps
    present: frozenset[str]  # the graph's op types
    departure: str  # "" where the whole trace follows the graph; else its first departure


def _launches_nothing(op_type: str) -> bool:
    entry = OPS.get(op_type)
    return entry is not None and entry.op_class in _LAUNCHES_NOTHING


def _next_node(nodes: list[tuple[str, str]], types: frozenset[str], start: int) -> int:
    """The index of the first node from `start` of one of `types`, past only nodes that launch nothing; -1 where a
    node that launches kernels stands before it, len(nodes) where the graph ends first."""
    for i in range(start, len(nodes)):
        if nodes[i][1] in types:
            return i
        if not _launches_nothing(nodes[i][1]):
            return -1
    return len(nodes)


def _graph_order(model, units: tuple[Unit, ...]) -> _Order:
    nodes = [(n.name, n.op_type) for n in model.graph.node]
    present = frozenset(op for _, op in nodes)
    node_of: dict[str, str] = {}
    cursor, passes = 0, 1
    for u in sorted(units, key=lambda u: u.ts_us):
        types = onnx_types(u.op)
        if u.why or u.op_key in node_of or not types & present:
            continue  # a unit of an op instance already placed, or one that stays unmatched with its own reason
        i = _next_node(nodes, types, cursor)
        if i == len(nodes) and cursor > 0:  # the pass is over: the next one starts at the graph's first node
            i, passes = _next_node(nodes, types, 0), passes + 1
        if not 0 <= i < len(nodes):
            at = nodes[cursor] if cursor < len(nodes) else nodes[0]
            departure = f"{u.op} where the graph runs {at[1]} node {at[0]}"
            return _Order({}, 1, present, f"the trace's op order departs from the graph's ({departure})")
        node_of[u.op_key], cursor = nodes[i][0], i + 1
    return _Order(node_of, passes, present, "")


def _order_matcher(order: _Order):
    def match(unit: Unit) -> tuple[str, str]:
        types, why = _unit_types(unit)
        if why:
            return "", why
        if not types & order.present:
            return "", f"unmatched: no {'/'.join(sorted(types))} node in the graph"
        if order.departure:
            return "", f"unmatched: {NO_SCOPES}, and {order.departure}"
        return order.node_of[unit.op_key], GRAPH_ORDER

    return match


@dataclass(frozen=True, slots=True)
class TraceMatch:
    """A trace's units tied to the model: one row per name, node and reason, and the runs they are averaged over."""

    nodes: tuple[NodeMatch, ...]
    runs: int  # the trace's steps; where it marks none and was matched in graph order, its passes over the graph
    idle_s: float  # idle time between the runs' units on each stream or thread, per run
    outside_s: float = 0.0  # graph order: units before the first pass or after the last (weight copies, inputs)
    outside_units: int = 0


def _within_passes(units: tuple[Unit, ...], order: _Order) -> tuple[tuple[Unit, ...], tuple[Unit, ...]]:
    """(the units inside the graph-order passes, those wholly before the first or after the last)."""
    placed = [u for u in units if u.op_key in order.node_of and not u.why]
    if not placed:
        return units, ()
    start, end = min(u.ts_us for u in placed), max(u.ts_us + u.dur_us for u in placed)
    inside: list[Unit] = []
    outside: list[Unit] = []
    for u in units:
        (inside if u.ts_us + u.dur_us > start and u.ts_us < end else outside).append(u)
    return tuple(inside), tuple(outside)


def match_trace(trace: TorchTrace, model) -> TraceMatch:
    """Each unit's time per run, tied to an ONNX node of `model` (an onnx.ModelProto) by module scope, or in graph
    order where the trace has no scopes, or kept with its reason; units of one name, node and reason are one row.
    In graph order the runs are the passes, and what ran before the first or after the last is counted apart."""
    runs, units = trace.runs, trace.units
    outside: tuple[Unit, ...] = ()
    if any(u.scope for u in trace.units):
        match = _scope_matcher(_index(model))
    else:
        order = _graph_order(model, trace.units)
        match = _order_matcher(order)
        if not order.departure and not trace.step_s:
            runs = order.passes
            units, outside = _within_passes(trace.units, order)
    rows: dict[tuple[str, str, str], list] = {}
    gaps = _gaps_us(units)
    for unit, idle_us in zip(units, gaps, strict=True):
        node, how = match(unit)
        label = f"{unit.scope} · {unit.name}" if trace.device == "CPU" and unit.scope else unit.name
        row = rows.setdefault((label, node, how), [unit.op or unit.name, 0.0, 0.0, 0.0])
        row[1] += unit.dur_us * 1e-6 / runs
        row[2] += idle_us * 1e-6 / runs
        row[3] += unit.launch_us * 1e-6 / runs
    return TraceMatch(
        tuple(
            NodeMatch(label[:240], op, time_s, (node,) if node else (), how, idle_s, launch_s)
            for (label, node, how), (op, time_s, idle_s, launch_s) in rows.items()
        ),
        runs,
        sum(gaps) * 1e-6 / runs,
        sum(u.dur_us for u in outside) * 1e-6,
        len(outside),
    )


def _gaps_us(units: tuple[Unit, ...]) -> list[float]:
    """Each unit's idle gap before it on its thread or stream: the time since the previous unit there ended (none for
    the first, none where they overlap)."""
    gaps, end, thread = [], 0.0, None
    for u in units:  # ordered by thread, then start
        if u.thread != thread:
            thread, end = u.thread, u.ts_us
        gaps.append(max(u.ts_us - end, 0.0))
        end = max(end, u.ts_us + u.dur_us)
    return gaps


def trace_summary(trace: TorchTrace, match: TraceMatch) -> dict:
    """Traced and matched time per run, the matched share, idle gaps and launch cost (JSON-ready)."""
    nodes = match.nodes
    traced = sum(n.time_s for n in nodes)
    matched = sum(n.time_s for n in nodes if n.onnx_nodes)
    reasons: dict[str, float] = defaultdict(float)
    for n in nodes:
        if not n.onnx_nodes:
            reasons[n.how.removeprefix("unmatched: ")] += n.time_s
    return {
        "runtime": f"PyTorch ({trace.device} profiler trace)" if trace.tool == "PyTorch" else f"{trace.tool} export",
        "tool": trace.tool,
        "device": trace.device,
        "runs": match.runs,
        "units": len(trace.units),
        "unit": "GPU kernel" if trace.device == "GPU" else "outermost CPU op",
        "traced_s": traced,
        "matched_s": matched,
        "matched_share": matched / traced if traced > 0 else 0.0,
        "idle_s": match.idle_s,
        "launches_per_run": trace.launches / match.runs,
        "launch_s": trace.launch_s / match.runs,
        "step_s": list(trace.step_s),
        "skipped_events": trace.skipped,
        "unmatched_by_reason": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "outside_runs_s": match.outside_s,
        "outside_runs_units": match.outside_units,
    }
