"""Every cache of one model, keyed in one place.

A `ModelCaches` belongs to one model handle (`model_handle.open_model`): nothing outlives the handle
and nothing is shared between models. Each method names one cached value and builds its key from
what that value depends on: a reviewer checks the keys here, beside one another.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

import onnx

# Entries each table keeps (oldest out first): a sweep of a few hundred bindings reuses the
# structure-only tables (one entry per policy) and cycles the per-binding ones.
CACHE_ENTRIES = 256
# Workloads kept per handle (`ModelCaches.workload`): one is a graph at its shapes and its node work, ~5 MB
# for an 80-layer decoder; a serving run rebinds a few bindings (the KV-cache probe, the mapped batch) often.
WORKLOAD_ENTRIES = 16
# Assessments are per distinct kernel (a BERT-base slice has ~15): a 200-shape sweep on one profile keeps
# a few thousand, and one is a few hundred bytes.
ASSESSMENT_ENTRIES = 8192
# Plans kept per (structure, work, policy) with the tiny nodes they asked about (`fusion_plan`): a sweep's bindings
# fall into a few answers (batch 1's hidden vectors are tiny, a batch of 64's are not)
FUSION_ANSWERS = 16
_MISSING = object()  # a table's answer for a key it does not hold (a kept value may be None)
_T = TypeVar("_T")


class ModelCaches:
    """Every cache of one model, thread-safe (Streamlit serves sessions from threads).

    Each method names one cached value and builds its key from what that value depends on; `make`
    computes the value on a miss. The model's own bytes are fixed for the handle, so keys hold only
    what varies: the branch taken, which nodes folded, bindings, plan choices, device figures.
    Pickles empty (a pickled Workload carries its model, not the model's caches).
    """

    def __init__(self, entries: int = CACHE_ENTRIES):
        self._entries = entries
        self._lock = threading.RLock()
        self._tables: dict[str, OrderedDict[Hashable, Any]] = {}

    def __getstate__(self) -> dict:
        return {"entries": self._entries}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["entries"])

    def _get(self, table: str, key: Hashable, make: Callable[[], Any], entries_max: int | None = None) -> Any:
        with self._lock:  # held while computing: two sessions mapping one model share the first's work
            entries = self._tables.setdefault(table, OrderedDict())
            value = entries.get(key, _MISSING)  # one hash of the key (a plan's groups are 200 of them)
            if value is not _MISSING:
                return value
            value = make()
            if len(entries) >= (entries_max or self._entries):
                entries.popitem(last=False)
            entries[key] = value
            return value

    def size(self) -> int:
        with self._lock:
            return sum(len(t) for t in self._tables.values())

    def entries(self, table: str) -> int:
        """Entries one table keeps now (a memory estimate counts the workloads)."""
        with self._lock:
            return len(self._tables.get(table, ()))

    # ---- import: depend on the model and the branch taken (the inlined graph) ----------------
    def branch_model(self, branches: tuple[tuple[str, int], ...], make: Callable[[], onnx.ModelProto]):
        """The model with bound If branches inlined: the model and the branch values."""
        return self._get("branch_model", branches, make)

    def free_dims(self, sha256: str, make: Callable[[], Mapping[str, tuple[str, int]]]):
        """Each free dim and branch input -> (graph input, axis) (`bindings.symbolic_dims`): the graph inputs
        and Ifs of the model as opened, named by its hash; read only (a sweep rebinds without re-reading them)."""
        return self._get("free_dims", sha256, make)

    def graph_inputs(self, sha256: str, make: Callable[[], list]):
        """The graph's inputs that are not initializers (`bindings.graph_inputs`): the (inlined) model alone,
        named by its hash; read only (every binding reads their shapes)."""
        return self._get("graph_inputs", sha256, make)

    def initializers(self, sha256: str, make: Callable[[], _T]) -> _T:
        """Each initializer's spec and small folded value: the (inlined) model alone, named by its hash
        (a file's initializers do not depend on the bindings)."""
        return self._get("initializers", sha256, make)

    def ordered_nodes(self, sha256: str, available: frozenset[str], make):
        """Nodes in execution order: the (inlined) model, named by its salted hash, and the tensors
        available before any node runs (initializers and inputs)."""
        return self._get("ordered_nodes", (sha256, available), make)

    def repeats(self, sha256: str, available: frozenset[str], make, none):
        """Which nodes copy the node one period earlier (`repeats.find_repeats`): the nodes in execution order
        (the same key as `ordered_nodes`) and the initializers' facts (the model's own). Looked for from the
        model's second binding on (`none` before): a single mapping (the CLI's, a cold decode step) would pay
        the search (14 ms on Llama-2-70B) for nothing, a sweep's rebinding pays it once. A walk copies the
        outputs a visit would find, so a binding maps the same with or without them."""
        key = (sha256, available)
        with self._lock:
            asked = self._tables.setdefault("repeats_asked", OrderedDict())
            if key not in asked:
                asked[key] = True
                return none
        return self._get("repeats", key, make)

    def live_structure(self, sha256: str, folded: frozenset[str], make):
        """Live nodes, weights, producers, consumers, QDQ storage types, live positions: the graph and which nodes
        folded (the constants follow from those; storage types from the initializers' types)."""
        return self._get("live_structure", (sha256, folded), make)

    def twins(self, sha256: str, folded: frozenset[str], make):
        """Each live node's twin (`onnx_import.live_twins`): the live structure (the graph and which nodes
        folded) and the model's repeats (asked only once they are found: fixed for the graph from then on)."""
        return self._get("twins", (sha256, folded), make)

    def ort_inferred(self, sha256: str, bound: tuple[tuple[str, int], ...], make):
        """ONNX Runtime's inference over the whole model: the graph and every binding."""
        return self._get("ort_inferred", (sha256, bound), make)

    def ort_node_inferred(self, key: Hashable, make):
        """ONNX Runtime's inference for one node: `key` is (graph hash, node signature, each input's shape,
        dtype and constant bytes), built by the importer beside the walk's own memo key."""
        return self._get("ort_node_inferred", key, make)

    def workload(self, dims: tuple, batch: int | None, seq: int | None, make):
        """The workload at these bindings (`ModelHandle.bind`): the handle's model and the bindings as given
        (named dims with the built-in defaults filled in, and the batch/seq shortcuts); a Workload is frozen,
        read only, so every caller of one binding shares it."""
        return self._get("workload", (dims, batch, seq), make, WORKLOAD_ENTRIES)

    # ---- work and plan ------------------------------------------------------------------------
    def blocks(self, structure: tuple[str, frozenset[str]], make):
        """Recognized attention and norm blocks: op types and dataflow of the live graph (its structure)."""
        return self._get("blocks", structure, make)

    def router_sites(self, structure: tuple[str, frozenset[str]], make):
        """Where the MoE layers sit (`moe.router_sites`: each router, its expert GEMMs and their weights, the walk's
        other nodes): the live graph's structure (nodes, weights and dataflow; E, k and the stacking are read from
        each binding's shapes)."""
        return self._get("router_sites", structure, make)

    def work_roles(self, structure: tuple[str, frozenset[str]], make):
        """Each live node's inputs' weight roles and stored types (`ops.work_roles`): the live graph's
        structure (weights and QDQ storage types follow from which nodes folded)."""
        return self._get("work_roles", structure, make)

    def copy_runs(self, structure: tuple[str, frozenset[str]], make):
        """The stretches of nodes whose work is their twins' (`kinds.copy_runs`): the live graph's structure (its
        twins, its nodes' weight roles and recognized blocks), asked only where every copy of the import was taken."""
        return self._get("copy_runs", structure, make)

    def fusion_plan(
        self,
        structure: tuple[str, frozenset[str]],
        work_key: int,
        tiny: frozenset[str],
        policy: str,
        attention_fusion: bool,
        make,
    ):
        """Fusion groups: the live graph's structure, each node's op class, layer type and block
        (`Workload.plan_key`), the policy, the attention-fusion choice and which nodes are tiny enough to ride in an
        epilogue (the one place where the planner reads sizes). `make()` gives the plan and the nodes whose
        tininess it asked about: a plan is kept with them and is the answer for any tiny set that agrees with the
        one it was made at on those nodes (the planner's every choice follows from its answers). A plan equal to
        one made before is that plan, its groups the same objects: the tables keyed by a plan's groups then compare
        them by identity, not field by field."""

        def made_or_planned() -> tuple:
            base = (structure, work_key, policy, attention_fusion)
            with self._lock:
                asked_before = self._get("fusion_plans_asked", base, list)
                for asked, answers, plan in asked_before:
                    if asked & tiny == answers:
                        return plan
                made, asked = make()  # a `fusion.FusionPlan` (a tuple of groups that keeps its hash) kept as it is
                made = made if isinstance(made, tuple) else tuple(made)
                plan = self._get("fusion_plans_made", (structure, made), lambda: made)
                if len(asked_before) >= FUSION_ANSWERS:
                    asked_before.pop(0)
                asked_before.append((asked, asked & tiny, plan))
                return plan

        return self._get("fusion_plan", (structure, work_key, tiny, policy, attention_fusion), made_or_planned)

    def group_boundaries(self, structure: tuple[str, frozenset[str]], groups: tuple, make):
        """Each group's boundary (the tensors crossing it), its kernel's name (its first member's, scoped by
        module path), its shape and its members' positions (`boundary.GroupPlaces`): the live graph's structure and
        the groups."""
        return self._get("group_boundaries", (structure, groups), make)

    def plan_table(self, structure: tuple[str, frozenset[str]], groups: tuple, make):
        """The plan's groups as columns (`kernel_keys.PlanTable`: shapes, members, reads): the live graph's structure
        and the groups, as `group_boundaries`."""
        return self._get("plan_table", (structure, groups), make)

    def kernels(
        self,
        sha256: str,
        dims: tuple,
        groups: tuple,
        element_bytes: tuple[float, ...],
        sram_bytes: float | None,
        work_key: int,
        make,
    ):
        """Kernels with their traffic: the graph at its bindings (hash and dims), the groups, the element
        sizes (activation, weight, KV cache: `Sizer.key`), the SRAM size when a fused attention must fit it,
        and each node's work (`Workload.cost_key`)."""
        return self._get("kernels", (sha256, dims, groups, element_bytes, sram_bytes, work_key), make)

    def tensor_roles(self, structure: tuple[str, frozenset[str]], kernels: tuple, whole: frozenset[str], make):
        """Each kernel's tensor-parallel role, the tensors it writes for outside and the partial sums summed after a
        later kernel (`sharding.assign_roles`, `sharding.SplitPlan`): the
        live graph's structure, what the assignment reads of each kernel (`sharding.role_key`: its nodes, rule,
        layer type, whether it is a weight GEMM) and the nodes that run whole. The same at every binding and TP
        degree of one fusion plan: a sweep over batch, length and plan assigns them once."""
        return self._get("tensor_roles", (structure, kernels, whole), make)

    def node_positions(self, nodes: Hashable, wanted: frozenset[str], make):
        """The kernel positions holding some of `wanted` nodes, with those nodes (`timeline.positions_holding`: the
        experts' GEMMs, the KV-cache updates): every position's nodes and the nodes asked for. The same at every
        binding of one fusion plan (a stage reads the binding's figures of those nodes after)."""
        return self._get("node_positions", (nodes, wanted), make)

    def expert_sites(self, nodes: Hashable, sha256: str, dims: tuple, make):
        """The kernel positions holding an expert GEMM and each one's routing (`experts.ExpertSites`): every
        position's nodes (what the fusion plan fixes) and the graph at its bindings (its hash and dims: the routing
        figures follow from the shapes)."""
        return self._get("expert_sites", (nodes, sha256, dims), make)

    def kv_copies(self, nodes: Hashable, sha256: str, dims: tuple, element_bytes: tuple, make):
        """The bytes each KV-cache update kernel's copy moves (`runtime.apply_kv_cache`): every position's nodes,
        the graph at its bindings (hash and dims) and the element sizes (`Sizer.key`)."""
        return self._get("kv_copies", (nodes, sha256, dims, element_bytes), make)

    def tensor_edges(self, structure: tuple[str, frozenset[str]], nodes: Hashable, make):
        """Each read of a tensor another kernel makes (`placement.TensorEdges`, what a pipeline's sends carry): the
        live graph's structure and every kernel position's nodes. The same at every binding of one fusion plan."""
        return self._get("tensor_edges", (structure, nodes), make)

    def weight_tally(self, structure: tuple[str, frozenset[str]], make):
        """The tally of the weights whose specs are the model's (`precision.weight_tally`: all but those a folded
        node derives): the graph's structure (its weights, their storage types and consumers)."""
        return self._get("weight_tally", structure, make)

    def assessments(self, target: tuple, kernels: list[tuple], make: Callable[[list[int]], list]):
        """Kernels' tiling, cost and class (`assess.assess_kernels`), each keyed by its target (`Target.key`: the
        profile's content hash, the plan's dtype, element sizes, power cap, 2:4 sparsity and launch cost) and
        every kernel field the assessment reads (`assess.assessment_key`): repeated layers and slices of equal
        extents share one. `make(positions)` assesses the kernels not kept, given their positions in `kernels`, in
        one call (a slice's new tile searches run as one numpy evaluation); the answer is in `kernels`' order."""
        keys = [(target, kernel) for kernel in kernels]
        with self._lock:  # held while computing, as `_get`
            entries = self._tables.setdefault("assessment", OrderedDict())
            values = [entries.get(key, _MISSING) for key in keys]
            missing = [i for i, value in enumerate(values) if value is _MISSING]
            for i, value in zip(missing, make(missing) if missing else ()):
                values[i] = value
                if len(entries) >= ASSESSMENT_ENTRIES:
                    entries.popitem(last=False)
                entries[keys[i]] = value
            return values

    def assumptions(self, hardware_sha256: str, dtype: str, layout: str, make):
        """The sheet's assumption rows: the profile's content (its hash), the dtype and the layout."""
        return self._get("assumptions", (hardware_sha256, dtype, layout), make)
