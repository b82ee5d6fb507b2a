"""A Hugging Face config's fields, each read and checked with the one error a person can act on.

The readers of every family (zoo/hf_config.py, zoo/hf_moe.py) take their numbers through `Fields`: a missing
field, a string where a count belongs, a non-finite scale are each one line naming the field.
"""

from __future__ import annotations

import math

from mapper.core import limits
from mapper.core.errors import MapperError


class Fields:
    """The config's fields, read with the one error a person can act on. `owner` names what has them."""

    def __init__(self, config: dict, where: str, owner: str | None = None):
        self.config, self.where = config, where
        self.owner = owner or f"a {str(config.get('model_type'))[:40]} config"

    def get(self, key: str, kind: type = int, default=None):
        value = self.config.get(key, default)
        if value is None and default is None:
            raise MapperError(f"{self.where}: field {key!r} is missing; {self.owner} has it")
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok or (kind is int and not 0 < value <= limits.MAX_DIM):
            raise MapperError(f"{self.where}: field {key!r} is {str(value)[:40]!r}, not a valid {kind.__name__}")
        if kind is float and not (math.isfinite(value) and value > 0):  # every float a config gives is a scale
            raise MapperError(f"{self.where}: field {key!r} is {value!r}; it must be a finite number above 0")
        return value

    def optional(self, key: str, kind: type = int, default=None):
        return default if self.config.get(key) is None else self.get(key, kind)

    def count(self, key: str) -> int:
        """A count that may be 0 or left out (first_k_dense_replace, n_shared_experts, q_lora_rank): 0 then, else a
        valid int."""
        return 0 if not self.config.get(key) else self.get(key)
