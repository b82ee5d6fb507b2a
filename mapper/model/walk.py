"""Import, step two: the walk over a model's nodes at one binding, inferring every tensor's shape.

`Walk` visits the nodes in execution order (`import_graph` drives it): our shape rules (`shapes/`) first,
then the model's own value_info, onnx's inference, and (com.microsoft ops) ONNX Runtime's in a capped
child process (`ort_shapes`). Small constants (shape arithmetic) are folded with numpy on the way.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from mapper.core import limits
from mapper.core.caches import ModelCaches
from mapper.core.dtypes import dtype_name, tensor_dtype
from mapper.core.errors import MapperError
from mapper.core.graph import SUBGRAPH_OPS, Node, TensorSpec, TensorTable
from mapper.model.bindings import eval_dim, graph_inputs
from mapper.model.ort_shapes import ort_inferred_value_info, ort_node_value_info
from mapper.model.repeats import Repeats, Stretch
from mapper.model.shapes import Ctx, NoRule, infer_node
from mapper.model.values import constant_node_value, evaluate, small_value


# --- symbolic dims ------------------------------------------------------------------------------
def value_info_shape(vi: onnx.ValueInfoProto, bound: dict[str, int]) -> TensorSpec | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif d.dim_param:
            v = eval_dim(d.dim_param, bound)
            if v is None:
                return None
            shape.append(v)
        else:
            return None
    return TensorSpec(vi.name, tuple(shape), dtype_name(tt.elem_type))


# --- the graph walk --------------------------------------------------------------------------------


class Walk:
    """Mutable state of one import (kept out of the frozen result)."""

    def __init__(self, model: onnx.ModelProto, bound: dict[str, int], sha256: str, caches: ModelCaches):
        self.model = model
        self.caches = caches
        self.bound = bound
        self.sha256 = sha256
        self.specs = TensorTable()
        self.values: dict[str, np.ndarray] = {}
        self.const: set[str] = set()
        self.folded: set[str] = set()
        self.unresolved: dict[str, str] = {}
        self._declared: dict[str, TensorSpec] | None = None
        self._onnx_inferred: dict[str, TensorSpec] | None = None
        self._ort_inferred: dict[str, TensorSpec] | None = None
        self.memo: dict[tuple, tuple] = {}  # (signature, each input's id) -> (outputs, folded)
        self.ids: dict[tuple, int] = {}  # (shape, dtype, constant value) -> its id (`intern`)
        self.kid: dict[str, int] = {}  # tensor -> the id of its (shape, dtype, constant value)
        # node -> its class: nodes of one class have one signature and inputs of the same shapes, types and
        # constants, and so the same output specs (the work model reuses one estimate per class)
        self.classes: dict[str, int] = {}
        self.ort_node_queries = 0

    def declared(self) -> dict[str, TensorSpec]:
        """Shapes the model itself declares (value_info, outputs), at the bindings."""
        if self._declared is None:
            self._declared = {}
            for vi in list(self.model.graph.value_info) + list(self.model.graph.output):
                spec = value_info_shape(vi, self.bound)
                if spec is not None:
                    self._declared[vi.name] = spec
        return self._declared

    def bound_copy(self) -> onnx.ModelProto:
        """A copy of the model with the bound dims written into its inputs (for onnx's and ORT's inference)."""
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        for vi in graph_inputs(m):
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param:
                    v = eval_dim(d.dim_param, self.bound)
                    if v is not None and 0 <= v < 2**63:  # a dim_param may be any literal: int64 only
                        d.dim_value = v
        return m

    def _specs(self, value_info) -> dict[str, TensorSpec]:
        found = {}
        for vi in value_info:
            spec = value_info_shape(vi, self.bound)
            if spec is not None:
                found[vi.name] = spec
        return found

    def onnx_inferred(self) -> dict[str, TensorSpec]:
        """onnx's own shape inference at the bound input shapes (run once, only if our rules fail)."""
        if self._onnx_inferred is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.bound_copy(), data_prop=False).graph.value_info
            except Exception:  # noqa: BLE001 - onnx's inference is a fallback; its failure leaves ours standing
                inferred = []
            self._onnx_inferred = self._specs(inferred)
        return self._onnx_inferred

    def ort_inferred(self) -> dict[str, TensorSpec]:
        """ONNX Runtime's symbolic shape inference (run once, in a child process under limits, only for a
        com.microsoft node that neither our rules nor onnx's inference resolve)."""
        if self._ort_inferred is None:  # a child process costs ~0.4 s: kept per model and binding
            self._ort_inferred = self.caches.ort_inferred(
                self.sha256,
                tuple(sorted(self.bound.items())),
                lambda: self._specs(ort_inferred_value_info(self.bound_copy())),
            )
        return self._ort_inferred

    def fallback(self, node: Node, specs: tuple, values: tuple) -> list[TensorSpec] | None:
        sources = [self.declared, self.onnx_inferred]
        if node.domain == "com.microsoft":  # then ORT on the whole model; where it gave up there (another
            sources += [self.ort_inferred, lambda: self.ort_node_inferred(node, specs, values)]  # node), alone
        for source in sources:
            table = source()
            if all(o in table for o in node.outputs if o):
                return [table[o] for o in node.outputs if o]
        return None

    def ort_node_inferred(self, node: Node, specs: tuple, values: tuple) -> dict[str, TensorSpec]:
        """ONNX Runtime's inference for this node alone at its known input shapes, kept per (signature,
        input shapes, constant inputs) like the walk's memo: a repeated layer asks once, and one import
        starts at most ORT_NODE_QUERIES child processes (a hostile file could hold thousands of such nodes)."""
        key = (
            None
            if node.signature is None
            else (
                self.sha256,
                node.signature,
                tuple(
                    None if s is None else (s.shape, s.dtype, None if v is None else v.tobytes())
                    for s, v in zip(specs, values)
                ),
            )
        )
        if key is None or self.ort_node_queries >= limits.ORT_NODE_QUERIES:
            return {}

        def query() -> dict[str, TensorSpec]:
            self.ort_node_queries += 1
            return self._specs(ort_node_value_info(node, specs, values, self.model.opset_import))

        found = self.caches.ort_node_inferred(key, query)
        return found or {}

    def visit_all(self, nodes: list[Node], repeats: Repeats) -> bool:
        """Visit `nodes` in execution order; a copy in a stretch of `repeats` whose boundary tensors agree at
        this binding takes the outputs its twin's visit found (the memo entry the copy's own visit would
        hit: the same signature at inputs of the same facts), without computing its memo key again: the whole
        stretch at once where every twin in the period before it was found (`copy_stretch`), else node by
        node. Whether every copy of every stretch was taken (then each has its twin's class and folding,
        `Graph.twins`)."""
        if not repeats.copies:  # none found (yet: a model's first binding looks for none)
            for node in nodes:
                self.visit(node)
            return True
        twin, stretch_of, stretches = repeats.twin, repeats.stretch_of, repeats.stretches
        found: list[tuple | None] = [None] * len(nodes)
        holds: dict[int, bool] = {}
        taken, pos = 0, 0
        while pos < len(nodes):
            t = twin[pos]
            if t >= 0 and (copied := found[t]) is not None:
                s = stretch_of[pos]
                if s not in holds:
                    holds[s] = self.agree(stretches[s].checks)
                if holds[s]:
                    stretch = stretches[s]
                    if pos == stretch.first and self.copy_stretch(stretch, found):
                        taken, pos = taken + stretch.end - stretch.first, stretch.end
                        continue
                    self.put(nodes[pos], *copied)
                    found[pos] = copied
                    taken += 1
                    pos += 1
                    continue
            found[pos] = self.visit(nodes[pos])
            pos += 1
        return taken == repeats.copies

    def copy_stretch(self, stretch: Stretch, found: list[tuple | None]) -> bool:
        """Write a stretch's copies at once from their roots (`Stretch.roots`, visited or copied before it), as
        `put` of each copy in turn with its twin's entries, which are its root's, and give each copy its root's
        entry in `found`; whether it could (every root was found: else nothing is written)."""
        length = stretch.end - stretch.first
        window = found[stretch.first - stretch.period : stretch.first]  # each root's entry, in the period before
        if None in window[:length]:
            return False
        specs, kid, values, classes, folded = self.specs, self.kid, self.values, self.classes, self.folded
        roots, outputs, root_outputs = stretch.roots, stretch.outputs, stretch.root_outputs
        classes.update(zip(stretch.nodes, map(classes.__getitem__, roots)))
        kid.update(zip(outputs, map(kid.__getitem__, root_outputs)))
        specs.put_like(outputs, root_outputs)
        values.update({o: values[x] for o, x in zip(outputs, root_outputs) if x in values})
        if not folded.isdisjoint(roots):
            folded.update([n for n, x in zip(stretch.nodes, roots) if x in folded])
            self.const.update([o for o, x in zip(outputs, root_outputs) if x in self.const])
        found[stretch.first : stretch.end] = (window * -(-length // stretch.period))[:length]
        return True

    def agree(self, pairs: tuple[tuple[str, str], ...]) -> bool:
        """Whether each pair of tensors has one shape, type and constant value, and both are constants or not."""
        kid, const = self.kid, self.const
        return all(x in kid and kid.get(y) == kid[x] and (x in const) == (y in const) for x, y in pairs)

    def visit(self, node: Node) -> tuple | None:
        """Infer the node's outputs; (entries, class, folded) where a copy of it may take them (`put`)."""
        if node.op_type == "Constant":
            if node.outputs and node.outputs[0]:  # a Constant without an output (a damaged file) makes nothing
                value, shape, dtype = constant_node_value(node)
                self.set(node.outputs[0], TensorSpec(node.outputs[0], shape, dtype), value)
                self.const.add(node.outputs[0])
            self.folded.add(node.name)
            return None
        kid, inputs = self.kid, node.inputs
        ids = [kid.get(i, -1) if i else -1 for i in inputs]  # -1: no input there (or its shape unknown)
        if -1 in ids:
            missing = next((i for i in inputs if i and i not in kid), None)
            if missing is not None:
                self.unresolved[node.name] = f"input {missing!r} has no known shape"
                return None
        # A node of a signature seen before, at the same input shapes and constants (`ids`), has the
        # outputs found then: the layers of a transformer repeat, shape subgraphs and all.
        key = found = None
        if node.signature is not None:
            key = (node.signature, *ids)
            found = self.memo.get(key)
        if found is None:
            found = self.outputs(node, key)
            if found is None:
                return None
        entries, folded, cls = found
        folded = folded or (
            node.op_type not in SUBGRAPH_OPS and any(inputs) and self.const.issuperset(filter(None, inputs))
        )
        self.put(node, entries, cls, folded)
        return (entries, cls, folded) if cls >= 0 else None

    def put(self, node: Node, entries: tuple, cls: int, folded: bool) -> None:
        """Write the node's outputs (each (shape, dtype, folded value, interned id)), class and folding."""
        if cls >= 0:
            self.classes[node.name] = cls
        specs, values, kid, outputs = self.specs, self.values, self.kid, node.outputs
        if len(outputs) == 1 and len(entries) == 1:  # most nodes: one output, no list of the present ones
            o = outputs[0]
            shape, dtype, value, kid[o] = entries[0]
            specs.put(o, shape, dtype)
            if value is not None:
                values[o] = value
        else:
            for o, (shape, dtype, value, sid) in zip([o for o in outputs if o], entries):
                specs.put(o, shape, dtype)
                kid[o] = sid
                if value is not None:
                    values[o] = value
        if folded:
            self.folded.add(node.name)
            self.const.update(o for o in outputs if o and o in specs)

    def outputs(self, node: Node, key: tuple | None) -> tuple[tuple, bool, int] | None:
        """Each output's (shape, dtype, folded value, interned id), whether the node folded and its class (the
        memo entry's index, -1 when not kept); kept in the memo under `key` when the shape rules gave them
        (declared shapes belong to these output names only)."""
        specs = tuple([self.specs[i] if i else None for i in node.inputs])
        values = tuple([self.values.get(i) if i else None for i in node.inputs])
        out, from_rule = self.infer(node, specs, values)
        if out is None:
            return None
        shapes = [s.shape for s in specs if s is not None]
        known = [v for v in values if v is not None]
        folded_values = None
        if shapes and (len(known) == len(shapes) or node.op_type in ("Shape", "Size")):
            folded_values = evaluate(node, known, shapes, [spec.shape for spec in out])
        entries = []
        for k, spec in enumerate(out):
            value = folded_values[k] if folded_values is not None and k < len(folded_values) else None
            entries.append((spec.shape, spec.dtype, value, self.intern(spec.shape, spec.dtype, value)))
        memo_key = key if from_rule else None
        found = (tuple(entries), folded_values is not None, len(self.memo) if memo_key is not None else -1)
        if memo_key is not None:
            self.memo[memo_key] = found
        return found

    def infer(self, node: Node, specs: tuple, values: tuple) -> tuple[list[TensorSpec] | None, bool]:
        """Output specs, and whether the shape rules gave them (not the model's declared shapes)."""
        try:
            shapes = infer_node(Ctx(node, specs, values))
            out = [TensorSpec(o, tuple([int(d) for d in shp]), dt) for o, (shp, dt) in zip(node.outputs, shapes) if o]
            from_rule = True
        except NoRule as exc:
            found = self.fallback(node, specs, values)
            if found is None:
                self.unresolved[node.name] = str(exc)
                return None, False
            out, from_rule = found, False
        except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as exc:
            self.unresolved[node.name] = (
                f"attributes or inputs are inconsistent ({type(exc).__name__}: {str(exc)[:60]})"
            )
            return None, False
        for spec in out:
            if spec.shape and min(spec.shape) < 0:
                self.unresolved[node.name] = f"output {spec.name!r} has a negative dim {spec.shape}"
                return None, False
            if math.prod(spec.shape) > limits.MAX_TENSOR_ELEMENTS:
                raise MapperError(
                    f"tensor {spec.name!r} of node {node.name!r} would hold {math.prod(spec.shape)}"
                    f" elements, over {limits.limit_text('MAX_TENSOR_ELEMENTS')}; bind smaller dims"
                )
        return out, from_rule

    def intern(self, shape: tuple, dtype: str, value: np.ndarray | None) -> int:
        """A small id per distinct (shape, dtype, constant value): what a node's outputs depend on of each
        input, hashed once per tensor rather than at every use."""
        facts = (shape, dtype, None if value is None else (value.shape, value.dtype.str, value.tobytes()))
        return self.ids.setdefault(facts, len(self.ids))

    def seed(self, start: Walk) -> None:
        """Start from another walk's tensors (the initializers' `initializer_walk`, kept per model)."""
        self.specs, self.values, self.const = start.specs.copy(), dict(start.values), set(start.const)
        self.ids, self.kid = dict(start.ids), dict(start.kid)

    def set(self, name: str, spec: TensorSpec, value: np.ndarray | None) -> None:
        self.specs.put(name, spec.shape, spec.dtype)
        self.kid[name] = self.intern(spec.shape, spec.dtype, value)
        if value is not None:
            self.values[name] = value


def initializer_walk(model: onnx.ModelProto) -> Walk:
    """A walk holding only the model's initializers (spec, small value, interned id, constant): what every
    binding starts from, built once per model (`ModelCaches.initializers`). An initializer over
    MAX_TENSOR_ELEMENTS raises, every time (a failed build is not kept)."""
    walk = Walk(model, {}, "", ModelCaches(0))
    for t in model.graph.initializer:
        if math.prod(t.dims) > limits.MAX_TENSOR_ELEMENTS:
            raise MapperError(
                f"initializer {t.name!r} has {math.prod(t.dims)} elements, over"
                f" {limits.limit_text('MAX_TENSOR_ELEMENTS')}"
            )
        walk.set(t.name, TensorSpec(t.name, tuple(t.dims), tensor_dtype(t)), small_value(t))
        walk.const.add(t.name)
    return walk
