"""Before an uploaded model runs: estimate its peak memory and its work, and refuse what exceeds the limits.

A gate, not a model: simple and on the high side. The child that runs the model is capped anyway
(mapper/model/sandbox.py); the gate refuses, with the limit named, what would only hit those caps after minutes
or gigabytes: a ConstantOfShape of [2^16, 2^17] floats (32 GiB) rated small by the work model, a Loop whose
trip count is 2^62, a thousand runs of a large model.

Memory: every tensor of the graph at the bound shapes (no reuse between them counted), the weights and
every tensor stored in the file (in any subgraph or attribute) `WEIGHT_COPIES` times, ConstantOfShape
outputs in subgraphs, and ONNX Runtime's own footprint. Work: node executions per run, a Loop's or Scan's
body counted once per iteration, an If as its larger branch; a Loop trip count must be a constant of the
file (a computed or absent one, a while loop, cannot be bounded before it runs: refused); and FLOPs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
import onnx
from onnx import numpy_helper

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.graph import DTYPE_BYTES
from mapper.core.limits import limit_text
from mapper.core.settings import setting, setting_text
from mapper.model.sandbox import is_external, model_graphs, model_tensors

# Copies of the weights alive at once: the parent's serialized model handed over, the child's read of it,
# ORT's parsed model and its initializers as tensors (the optimized-model save writes them out, not again).
WEIGHT_COPIES = 4
# Python, numpy and ONNX Runtime's libraries, arenas and thread stacks: ~210 MiB of address space measured
# (VmPeak of a child running a one-node model), doubled.
RUNTIME_BYTES = 512 << 20
# Node executions are counted exactly up to here (far over MEASURE_NODE_RUNS), so nested trip counts stay small ints.
NODE_RUNS_CAP = 1 << 80
# Integer constants read inline to bound Loop trip counts and shapes: scalars and shape vectors, a few elements each
# (the same bound as values.CONST_OF_SHAPE_FOLD_MAX); larger ones are data, never read.
SMALL_INT_ELEMENTS = 64


@dataclass(frozen=True, slots=True)
class RunEstimate:
    memory_bytes: int
    node_runs: int  # node executions of one run
    flops: float  # of one run (the work model's; bodies of control flow not included)


def _dtype_bytes(data_type: int) -> float:
    try:
        return DTYPE_BYTES.get(onnx.TensorProto.DataType.Name(data_type).lower(), 8)
    except ValueError:
        return 8


def _stored_bytes(t: onnx.TensorProto) -> int:
    return math.ceil(math.prod(max(int(d), 0) for d in t.dims) * _dtype_bytes(t.data_type))


def _small_ints(t: onnx.TensorProto) -> np.ndarray | None:
    if (
        is_external(t)
        or math.prod(t.dims) > SMALL_INT_ELEMENTS
        or t.data_type not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    ):
        return None
    try:
        return numpy_helper.to_array(t)
    except (ValueError, TypeError):
        return None


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small integer constants anywhere in the model (initializers, Constant outputs) by name, read inline only."""
    out = {}
    for _where, nodes, graph in model_graphs(model):
        pairs = [(t.name, t) for t in graph.initializer] if graph is not None else []
        pairs += [
            (n.output[0], n.attribute[0].t)
            for n in nodes
            if n.op_type == "Constant" and n.output and n.attribute and n.attribute[0].HasField("t")
        ]
        for name, t in pairs:
            if (value := _small_ints(t)) is not None:
                out[name] = value
    return out


class _Counter:
    """Node executions of a graph's nodes, control-flow bodies times their iterations, model-local functions
    as their nodes (recursively)."""

    def __init__(self, model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], label: str):
        self.constants, self.shapes, self.label = _constants(model), shapes, label
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.entered: set = set()

    def count(self, nodes) -> int:
        return min(sum(self._node(n) for n in nodes), NODE_RUNS_CAP)

    def _node(self, n) -> int:
        bodies = {a.name: a.g for a in n.attribute if a.HasField("g")}
        if (n.domain, n.op_type) in self.functions:
            return self._function(n)
        if not bodies and not any(a.graphs for a in n.attribute):
            return 1
        if n.op_type == "If" and not any(a.graphs for a in n.attribute):
            return 1 + max(self.count(b.node) for b in bodies.values())
        if n.op_type == "Loop" and "body" in bodies:
            return 1 + self._loop_trips(n) * self.count(bodies["body"].node)
        if n.op_type == "Scan" and "body" in bodies:
            return 1 + self._scan_length(n) * self.count(bodies["body"].node)
        self._refuse(n, "its body runs a number of times known only at run time")

    def _function(self, n) -> int:
        key = (n.domain, n.op_type)
        if key in self.entered:
            self._refuse(n, "the function calls itself")
        self.entered.add(key)
        try:
            return self.count(self.functions[key].node)
        finally:
            self.entered.discard(key)

    def _loop_trips(self, n) -> int:
        trips = self.constants.get(n.input[0]) if n.input and n.input[0] else None
        if trips is None or trips.size != 1:
            self._refuse(n, "its trip count is not a constant of the file (computed, or a while loop)")
        return max(int(trips.reshape(-1)[0]), 0)

    def _scan_length(self, n) -> int:
        scans = next((a.i for a in n.attribute if a.name == "num_scan_inputs"), 0)
        axes = next((list(a.ints) for a in n.attribute if a.name == "scan_input_axes"), [0]) or [0]
        first = n.input[len(n.input) - scans] if 0 < scans <= len(n.input) else ""
        shape = self.shapes.get(first)
        if shape is None or not -len(shape) <= axes[0] < len(shape):
            self._refuse(n, "the length of its scan input is not known at the bound shapes")
        return int(shape[axes[0]])

    def _refuse(self, n, why: str) -> NoReturn:
        raise MapperError(
            f"measure {self.label}: {n.op_type} node {(n.name or '?')[:80]!r}: {why}, so the work of a "
            f"run cannot be bounded by {limit_text('MEASURE_NODE_RUNS')} before it starts"
        )


def _constant_of_shape_bytes(model: onnx.ModelProto, constants: dict[str, np.ndarray], known: dict) -> int:
    """ConstantOfShape outputs of a constant shape that the graph's tensors do not hold (those in subgraphs)."""
    total = 0
    for _where, nodes, _graph in model_graphs(model):
        for n in nodes:
            if n.op_type != "ConstantOfShape" or not n.input or n.input[0] not in constants or n.output[0] in known:
                continue
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            itemsize = _dtype_bytes(value.data_type) if value is not None else 4
            total += math.ceil(math.prod(max(int(d), 0) for d in constants[n.input[0]].reshape(-1)) * itemsize)
    return total


def estimate_run(workload, model: onnx.ModelProto) -> RunEstimate:
    """The peak memory and the work of one run of `model` (its workload at the bound shapes), before it runs."""
    graph = workload.graph
    stored = sum(_stored_bytes(found.tensor) for found in model_tensors(model))
    weights = max(stored, math.ceil(workload.weight_bytes))
    activations = math.ceil(sum(s.bytes for name, s in graph.tensors.items() if name not in graph.weights))
    counter = _Counter(model, {name: s.shape for name, s in graph.tensors.items()}, graph.name[:80])
    memory = (
        WEIGHT_COPIES * weights
        + activations
        + RUNTIME_BYTES
        + _constant_of_shape_bytes(model, counter.constants, graph.tensors)
    )
    return RunEstimate(memory, counter.count(model.graph.node), workload.flops)


def check_run(estimate: RunEstimate, runs: int, label: str) -> None:
    """Refuse a measurement of `runs` runs (warm-up and profiled ones included) that would exceed a limit."""
    if estimate.memory_bytes > setting("MEASURE_MEMORY_BYTES"):
        raise MapperError(
            f"measure {label}: a run would need about {estimate.memory_bytes / 2**30:.1f} GiB (tensors "
            f"at the bound shapes, weights x{WEIGHT_COPIES}), over {setting_text('MEASURE_MEMORY_BYTES')}; "
            f"bind smaller dims"
        )
    if estimate.node_runs * runs > limits.MEASURE_NODE_RUNS:
        raise MapperError(
            f"measure {label}: {runs} runs x {estimate.node_runs:.3g} node executions a run (Loop and Scan "
            f"bodies x their trip counts), over {limit_text('MEASURE_NODE_RUNS')}; ask for fewer runs"
        )
    if estimate.flops * runs > limits.MEASURE_FLOPS:
        raise MapperError(
            f"measure {label}: {runs} runs x {estimate.flops:.3g} FLOPs a run, over "
            f"{limit_text('MEASURE_FLOPS')}; bind smaller dims or ask for fewer runs"
        )
