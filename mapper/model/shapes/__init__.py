"""Shape rules: op type -> output shapes and dtypes, one registry (`base.RULES`).

Importing the package registers every rule (rules.py, movement.py); `infer_node` is the entry point.
"""

from mapper.model.shapes import movement, rules
from mapper.model.shapes.base import Ctx, NoRule, infer_node

__all__ = ["Ctx", "NoRule", "infer_node", "movement", "rules"]
