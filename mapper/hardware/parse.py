"""Read a hardware profile's text: the size cap, the nesting scan, then TOML, JSON or YAML.

Untrusted bytes in, a parsed tree out (schema.py validates it, profile.py builds the profile); every
failure is one MapperError line naming the file.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

import numpy as np

from mapper.core import limits
from mapper.core.errors import MapperError

MAX_PROFILE_BYTES = limits.MAX_PROFILE_BYTES  # the one value lives in mapper/core/limits.py


def check_nesting(text: str, label: str) -> None:
    """Refuse arrays and tables nested past MAX_PROFILE_NESTING before a parser recurses into them
    (json and tomllib both recurse: 10^5 brackets is a RecursionError). A profile nests three deep.
    Brackets are counted in strings too (linear, no tokenizer): no profile's text holds 32 '[' in a row,
    and brackets a string closes only hide depth from this scan, not from the RecursionError guard."""
    marks = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    steps = np.isin(marks, (91, 123)).astype(np.int64) - np.isin(marks, (93, 125))  # [ { open, ] } close
    if steps.size and int(np.cumsum(steps).max()) > limits.MAX_PROFILE_NESTING:
        raise MapperError(
            f"{label}: nested deeper than {limits.limit_text('MAX_PROFILE_NESTING')}; a hardware"
            " profile is a table of sections of values"
        )


def parse_profile(raw: bytes, fmt: str, label: str) -> Any:
    """A profile's bytes as `fmt` ("toml", "json" or "yaml") -> the parsed tree; every failure one MapperError line."""
    if len(raw) > MAX_PROFILE_BYTES:
        raise MapperError(
            f"{label}: {len(raw)} bytes is over {limits.limit_text('MAX_PROFILE_BYTES')} (1 MiB) "
            f"for a hardware profile; upload the profile itself"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MapperError(f"{label}: not UTF-8 text (byte {exc.start}); save the profile as UTF-8") from None
    check_nesting(text, label)
    try:
        if fmt == "json":
            return json.loads(text)
        if fmt == "yaml":
            try:
                import yaml  # optional; TOML and JSON need nothing extra
            except ImportError:
                raise MapperError(
                    f"{label}: YAML needs the PyYAML package, which is not installed; "
                    f"write the profile as TOML or JSON instead"
                ) from None
            return yaml.safe_load(text)
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise MapperError(f"{label}: not valid {fmt.upper()} ({exc}); fix the syntax") from None
    except RecursionError:  # the scan above counts brackets; this catches what it cannot see
        raise MapperError(f"{label}: nested too deep to be a hardware profile; fix the file") from None
    except Exception as exc:  # yaml.YAMLError and friends: still one actionable line
        if type(exc).__module__.startswith("yaml"):
            raise MapperError(f"{label}: not valid YAML ({exc}); fix the syntax") from None
        raise
