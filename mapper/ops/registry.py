"""The operator registry's record and table: one `OpDef` per ONNX op type, every stage's knowledge of the op.

An entry carries the op's shape rule (import), its work class and formula (work), the layer it rolls up into
(work's layer placer), its fusion role (plan's fusion rules), its backward (the train stage's gradient kernels,
formulas in ops/backward.py) and, for a QOperator op, its quantized form. The
stages read `mapper.ops.OPS` instead of tables of their own; `Registry.register` raises on a second entry for
one op type, so which rule applies never depends on import order. Patterns that span several ops (a fusion
rule's policies and sizes, attention and norm blocks) stay with their stage and read the per-op roles here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from mapper.core.graph import LayerType, Node, OpClass, TensorSpec
from mapper.core.result import MatrixShape
from mapper.ops.shape import Ctx, Out

ShapeRule = Callable[[Ctx], Out]  # input specs (and small constant values) -> output shapes and dtypes
# (flops, matrix flops, SFU ops, GEMM view): FLOPs count multiply and add apart (2 x MACs)
Work = tuple[float, float, float, MatrixShape | None]
WorkFormula = Callable[[Node, Sequence[TensorSpec | None], Sequence[TensorSpec]], Work]


def no_work(node: Node, ins: Sequence[TensorSpec | None], outs: Sequence[TensorSpec]) -> Work:
    """Moves or names data, or runs on the host: no arithmetic (its bytes are counted apart)."""
    return 0.0, 0.0, 0.0, None


class FusionRole(StrEnum):
    """What an op can be in a fused kernel (plan/fusion_rules.py's rules read it)."""

    NONE = "none"  # absorbed by no rule (an elementwise op of this role still starts a chain)
    MATRIX = "matrix"  # starts a GEMM whose epilogue absorbs EPILOGUE ops
    EPILOGUE = "epilogue"  # joins a GEMM's epilogue or an elementwise chain
    QDQ = "qdq"  # QuantizeLinear, DequantizeLinear: join as EPILOGUE ops do without counting toward a kernel's size
    CHAIN = "chain"  # joins an elementwise chain, never a GEMM's epilogue
    ROW = "row"  # elementwise by class but a row reduction (Softmax): starts no chain, joins none


class Reads(StrEnum):
    """What an op reads of its inputs (its compulsory traffic on its own; views and shape ops move nothing)."""

    ALL = "all"  # every input once
    KEPT = "kept"  # of input 0 only the elements it keeps (at most the output), plus small index inputs


class Backward(StrEnum):
    """How an op's gradient runs in a training step's backward pass (the formulas: ops/backward.py)."""

    GEMM = "gemm"  # dX = dY W^T and dW = X^T dY where it reads a trained weight; dA and dB where both are activations
    ATTENTION = "flash-attention-2"  # FlashAttention-2's backward: 2.5x the matrix FLOPs, 2x the traffic
    CONJUGATE = "conjugate"  # a collective's conjugate (the plan inserts them: no ONNX op has it)
    MOVEMENT = "movement"  # the same movement of the gradient (a transpose, slice, concat)
    VECTOR = "vector"  # reads its inputs and dY, writes dX: 2x; a weight's gradient accumulated where it holds one
    NONE = "none"  # no gradient flows through it: a view or shape op, a comparison, an index, a host op


@dataclass(frozen=True, slots=True)
class QuantizedForm:
    """A QOperator op (onnxruntime.quantization's QuantFormat.QOperator): its float twin's rules over its data
    operands, which sit between the scales and zero points."""

    twin: str  # the float op whose shape and work rules apply
    operands: tuple[int, ...] | slice  # input positions of the data operands, in the twin's order
    float_output: bool = False  # ...ToFloat / DynamicQuantize*: the result is float32
    output_scale: int | None = None  # QGemm: the result is quantized only when this input (y_scale) is given
    channels_last_refused: bool = False  # channels_last=1 (NHWC data) has no shape rule here

    def positions(self, input_count: int) -> list[int]:
        """Input positions of the data operands, the twin's inputs in order."""
        if isinstance(self.operands, slice):
            return list(range(input_count))[self.operands]
        return list(self.operands)

    def twin_node(self, node: Node) -> tuple[Node, list[int]]:
        """The node as its float twin, over its data operands (absent trailing ones dropped), and their
        positions in the node's inputs."""
        positions = [p for p in self.positions(len(node.inputs)) if p < len(node.inputs)]
        inputs = tuple(node.inputs[p] for p in positions)
        return Node(node.name, self.twin, "", inputs, node.outputs, node.attrs), positions


@dataclass(frozen=True, slots=True)
class OpDef:
    """Everything the engine knows of one ONNX op type (the table's row; see docs/architecture.md)."""

    op_type: str
    shape: ShapeRule | None = None  # None: no rule here (value_info, onnx's and ORT's inference, else unresolved)
    op_class: OpClass = OpClass.UNMODELED  # the work model's family; UNMODELED: no work rule (reported, never 0)
    work: WorkFormula = no_work  # FLOPs, matrix FLOPs, SFU ops and GEMM view of one node
    reads: Reads = Reads.ALL
    layer: LayerType | None = None  # where the op alone decides its roll-up; None: its work class decides
    fusion: FusionRole = FusionRole.NONE
    quantized: QuantizedForm | None = None
    min_ranks: tuple[int, ...] = ()  # least rank of each required input the rules index (checked before them)
    optional_min_ranks: tuple[tuple[int, int], ...] = ()  # (input index, least rank) where that input is present
    host_reason: str = ""  # why a control or host op's time is not modeled (CONTROL only)
    backward: Backward = field(kw_only=True)  # every entry states its gradient (NONE included): no default

    @property
    def twin(self) -> str:
        """The float op whose rules apply: the op itself unless it is a QOperator one."""
        return self.quantized.twin if self.quantized is not None else self.op_type


class Registry:
    """Op type -> its one `OpDef`. Tables, not per-node objects: the stages look an op up by its type."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Sequence[OpDef] = ()) -> None:
        self._entries: dict[str, OpDef] = {}
        self.register(*entries)

    def register(self, *entries: OpDef) -> None:
        """Add entries; a second entry for one op type raises (the winner would depend on import order)."""
        for entry in entries:
            if entry.op_type in self._entries:
                raise ValueError(f"a second registration of {entry.op_type}: an op type has one entry")
            self._entries[entry.op_type] = entry

    def get(self, op_type: str) -> OpDef | None:
        return self._entries.get(op_type)

    def __getitem__(self, op_type: str) -> OpDef:
        return self._entries[op_type]

    def __contains__(self, op_type: object) -> bool:
        return op_type in self._entries

    def __iter__(self) -> Iterator[OpDef]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def with_class(self, *classes: OpClass) -> frozenset[str]:
        return frozenset(e.op_type for e in self if e.op_class in classes)

    def with_role(self, *roles: FusionRole) -> frozenset[str]:
        return frozenset(e.op_type for e in self if e.fusion in roles)

    def with_reads(self, *reads: Reads) -> frozenset[str]:
        return frozenset(e.op_type for e in self if e.reads in reads)

    def twin_of(self, op_type: str) -> str:
        """The float op whose rules apply (the op itself when it is not a quantized one)."""
        entry = self._entries.get(op_type)
        return entry.twin if entry is not None else op_type

    def backward(self, op_type: str) -> Backward | None:
        """How the op's gradient runs; None for an op the registry does not hold."""
        entry = self._entries.get(op_type)
        return entry.backward if entry is not None else None

    def op_class(self, op_type: str) -> OpClass:
        entry = self._entries.get(op_type)
        return entry.op_class if entry is not None else OpClass.UNMODELED
