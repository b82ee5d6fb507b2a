"""The operator registry: one entry (`OpDef`) per ONNX op type, the one place the engine's stages learn an op.

Each family module holds its ops' shape rules and work formulas beside their rows (elementwise, reduction,
matrix, contrib, movement); quantized derives the QOperator ops from their float twins; backward holds the
formulas an entry's `Backward` names. `OPS` is the table the stages read: the import's shape inference
(`model/shapes.py`), the work model (`work/ops.py`), the layer placer (`work/layers.py`), the fusion rules
(`plan/fusion_rules.py`) and the training step's backward (`train/backward.py`). Adding an op is one row in its
family's table.
"""

from mapper.ops.contrib import CONTRIB_OPS
from mapper.ops.elementwise import ELEMENTWISE_OPS, TRANSCENDENTAL_OPS
from mapper.ops.matrix import MATRIX_OPS
from mapper.ops.movement import HOST_OPS, MOVEMENT_OPS, VIEW_OPS
from mapper.ops.quantized import quantized_ops
from mapper.ops.reduction import NORMALIZATION_OPS, POOLING_OPS, REDUCTION_OPS
from mapper.ops.registry import Backward, FusionRole, OpDef, QuantizedForm, Reads, Registry
from mapper.ops.shape import Ctx, NoRule

FLOAT_OPS: tuple[OpDef, ...] = (
    *ELEMENTWISE_OPS,
    *TRANSCENDENTAL_OPS,
    *NORMALIZATION_OPS,
    *REDUCTION_OPS,
    *POOLING_OPS,
    *MATRIX_OPS,
    *CONTRIB_OPS,
    *MOVEMENT_OPS,
    *VIEW_OPS,
    *HOST_OPS,
)


def default_registry() -> Registry:
    """Every op the engine models: the float ops, then the quantized ones built from their twins."""
    registry = Registry(FLOAT_OPS)
    registry.register(*quantized_ops(registry))
    return registry


OPS = default_registry()

__all__ = [
    "OPS",
    "Backward",
    "Ctx",
    "FusionRole",
    "NoRule",
    "OpDef",
    "QuantizedForm",
    "Reads",
    "Registry",
    "default_registry",
]
