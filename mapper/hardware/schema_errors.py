"""A profile's schema violations in people's words: each pydantic error as one line naming the field, what it must be,
what it got and what to do (`describe_error`), and the error a bad profile raises (`ProfileError`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mapper.core.errors import MapperError

README_HINT = "see data/hardware/README.md"


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the dotted field name a profile file uses (a curve's point by its index)."""
    parts = [str(part) for part in loc if part != "[key]"]
    if "value" in parts:
        cut = parts.index("value")
        tail = parts[cut + 1 :]
        parts = parts[:cut] + ([f"point {tail[0]}"] if tail else [])
    return ".".join(parts) if parts else "(top level)"


SHOWN_VALUE_CHARS = 60  # a bad value quoted in a per-field error: enough to recognize it, one line with the field


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 3] + "..."


def describe_error(error: Mapping[str, Any]) -> str:
    """One pydantic error as one line: the field, what it must be, what it got and what to do."""
    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    field = field_path(tuple(error["loc"]))
    if kind == "missing":
        if field.endswith(".source"):
            return f"field {field} is missing; every number needs a source ({README_HINT})"
        return f"field {field} is missing; add it ({README_HINT})"
    if kind == "extra_forbidden":
        return f"field {field} is not a known field; remove it or fix its spelling ({README_HINT})"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return (
            f'field {field} must be a table such as {{ value = ..., source = "..." }} '
            f"(got {type(got).__name__} {_shown(got)}); fix the value ({README_HINT})"
        )
    bounds = {
        "greater_than": "> {gt:g}",
        "greater_than_equal": ">= {ge:g}",
        "less_than": "< {lt:g}",
        "less_than_equal": "<= {le:g}",
    }
    if kind in bounds:
        return f"field {field} must be {bounds[kind].format(**ctx)} (got {_shown(got)}); fix the value"
    if kind == "finite_number":
        return f"field {field} must be a finite number (got {_shown(got)}); fix the value"
    if kind in ("float_type", "int_type", "string_type", "int_from_float", "bool_type", "list_type", "tuple_type"):
        wanted = {
            "float_type": "a number",
            "int_type": "a whole number",
            "int_from_float": "a whole number",
            "string_type": "a string",
            "list_type": "a list",
            "tuple_type": "an [x, efficiency] pair",
        }.get(kind, kind)
        return f"field {field} must be {wanted} (got {type(got).__name__} {_shown(got)}); fix the value"
    if kind == "literal_error":
        return f"field {field} must be one of {ctx.get('expected')} (got {_shown(got)}); fix the value"
    if kind == "string_too_long":
        return f"field {field} has {len(str(got))} characters, at most {ctx.get('max_length')} allowed; shorten it"
    if kind == "string_too_short":
        return f"field {field} is empty; say something or leave the field out"
    if kind == "too_long":
        return (
            f"field {field} has {ctx.get('actual_length')} entries, at most {ctx.get('max_length')} allowed; "
            f"thin the table"
        )
    if kind == "too_short":
        return (
            f"field {field} needs at least {ctx.get('min_length')} entries "
            f"(got {ctx.get('actual_length')}); add entries"
        )
    if kind == "string_pattern_mismatch":
        return f"field {field} must be lower-case letters, digits, '.', '_' or '-' (got {_shown(got)}); rename it"
    if kind == "value_error":
        text = str(ctx.get("error", error["msg"]))
        return f"field {field}: {text}" + ("" if "; " in text else "; fix the value")
    return f"field {field}: {error['msg']} (got {_shown(got)}); fix the value"


class ProfileError(MapperError):
    """A profile that fails validation: the one-line message, and `fields`, each bad field's dotted name ->
    its own line (a form shows one per field without taking the message apart)."""

    def __init__(self, message: str, fields: dict[str, str]):
        super().__init__(message)
        self.fields = dict(fields)
