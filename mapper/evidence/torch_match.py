"""A PyTorch trace's units tied to the model's ONNX nodes by module scope, and what the trace says beside times.

A unit (a GPU kernel, or a CPU trace's outermost op; `torch_trace`) ran inside a module scope ("layer1.0.conv1")
and for an op ("aten::conv2d"). The built-ins' and exported models' ONNX node names carry the same module paths
("/layer1.0/conv1/Conv"; the dynamo exporter's name scopes), so the unit goes to a node of an op type the ATen op
becomes, in its own module or the nearest module above it that has one ("aten::matmul" in
"encoder.layer.0.attention.self" -> "/encoder/layer.0/attention/MatMul"), then in the modules below it. Where a
module holds several such nodes (four Transposes), the op instances take them in turn, in trace order, as the
exporter numbered them in graph order. What matches nothing keeps its time and the reason. `compare_measured` then
scores each mapped kernel from its nodes' time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from mapper.evidence.profiles import NodeMatch
from mapper.evidence.torch_trace import TorchTrace, Unit
from mapper.model.nodes import module_scope
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


def _matcher(index: _Index, scoped: bool):
    turns: dict[tuple[str, frozenset[str]], int] = defaultdict(int)
    last: dict[tuple[str, frozenset[str]], str] = {}

    def match(unit: Unit) -> tuple[str, str]:
        """(the ONNX node, how) or ("", "unmatched: why")."""
        if unit.why:
            return "", f"unmatched: {unit.why}"
        if not scoped:
            return "", f"unmatched: {NO_SCOPES}"
        types = onnx_types(unit.op)
        if not types:
            return "", f"unmatched: no ONNX op is known for {unit.op}"
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


def match_trace(trace: TorchTrace, model) -> tuple[NodeMatch, ...]:
    """Each unit's time per run, tied to an ONNX node of `model` (an onnx.ModelProto) or kept with its reason;
    units of one name, node and reason are one row."""
    match = _matcher(_index(model), any(u.scope for u in trace.units))
    rows: dict[tuple[str, str, str], list] = {}
    for unit, idle_us in zip(trace.units, _gaps_us(trace), strict=True):
        node, how = match(unit)
        label = f"{unit.scope} · {unit.name}" if trace.device == "CPU" and unit.scope else unit.name
        row = rows.setdefault((label, node, how), [unit.op or unit.name, 0.0, 0.0, 0.0])
        row[1] += unit.dur_us * 1e-6 / trace.runs
        row[2] += idle_us * 1e-6 / trace.runs
        row[3] += unit.launch_us * 1e-6 / trace.runs
    return tuple(
        NodeMatch(label[:240], op, time_s, (node,) if node else (), how, idle_s, launch_s)
        for (label, node, how), (op, time_s, idle_s, launch_s) in rows.items()
    )


def _gaps_us(trace: TorchTrace) -> list[float]:
    """Each unit's idle gap before it on its thread or stream: the time since the previous unit there ended (none for
    the first, none where they overlap). Their sum is `_idle_s`."""
    gaps, end, thread = [], 0.0, None
    for u in trace.units:  # ordered by thread, then start
        if u.thread != thread:
            thread, end = u.thread, u.ts_us
        gaps.append(max(u.ts_us - end, 0.0))
        end = max(end, u.ts_us + u.dur_us)
    return gaps


def _idle_s(trace: TorchTrace) -> float:
    """Time between consecutive units on each thread or stream (units overlapping count none)."""
    return sum(_gaps_us(trace)) * 1e-6


def trace_summary(trace: TorchTrace, nodes: tuple[NodeMatch, ...]) -> dict:
    """Traced and matched time per run, the matched share, idle gaps and launch cost (JSON-ready)."""
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
        "runs": trace.runs,
        "units": len(trace.units),
        "unit": "GPU kernel" if trace.device == "GPU" else "outermost CPU op",
        "traced_s": traced,
        "matched_s": matched,
        "matched_share": matched / traced if traced > 0 else 0.0,
        "idle_s": _idle_s(trace) / trace.runs,
        "launches_per_run": trace.launches / trace.runs,
        "launch_s": trace.launch_s / trace.runs,
        "step_s": list(trace.step_s),
        "skipped_events": trace.skipped,
        "unmatched_by_reason": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
    }
