"""Write a hardware profile dict as TOML in the data/hardware format.

Sections in the order of data/hardware/*.toml, one table per section, `{ value, source }` entries inline;
`mapper probe` and `mapper calibrate` write their profiles with it.
"""

from __future__ import annotations

import json

import numpy as np

from mapper.core.errors import MapperError

SECTION_ORDER = ("meta", "compute", "memory", "overhead", "power", "interconnect", "efficiency", "layout", "serving")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not np.isfinite(value):
            raise MapperError(f"probe: non-finite value {value!r} cannot be written to a profile")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise MapperError(f"probe: cannot write a {type(value).__name__} to TOML")


def write_toml(tree: dict, prefix: str = "") -> str:
    """A profile dict -> TOML text: sections per table, `{ value, source }` entries inline."""
    lines, subtables = [], []
    if not prefix:  # the section order of data/hardware/*.toml
        tree = {k: tree[k] for k in SECTION_ORDER if k in tree} | {
            k: v for k, v in tree.items() if k not in SECTION_ORDER
        }
    for key, value in tree.items():
        if isinstance(value, dict) and "value" not in value:
            subtables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    text = (f"[{prefix}]\n" if prefix and lines else "") + "".join(line + "\n" for line in lines)
    for key, value in subtables:
        text += ("\n" if text else "") + write_toml(value, f"{prefix}.{key}" if prefix else key)
    return text
