"""Finding and reading hardware profiles: built-in names, the user's files, uploaded bytes, form edits.

Every path ends in one validated build (`profile.build_profile` after `schema.validate_profile_dict`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.hardware.parse import MAX_PROFILE_BYTES, parse_profile
from mapper.hardware.profile import HardwareProfile, build_profile, profile_tree, tree_get
from mapper.hardware.schema import validate_profile_dict

_SUFFIXES = (".toml", ".json", ".yaml", ".yml")


def hardware_dir() -> Path:
    """data/hardware beside the mapper package (repository layout; an editable install keeps it)."""
    return Path(__file__).resolve().parents[2] / "data" / "hardware"


def list_hardware() -> list[str]:
    """Built-in profile names (the command-line names), sorted."""
    return list(_builtin_names())


@cache  # the shipped folder is read-only data, as each file in it is (_load_builtin): listed once a process
def _builtin_names() -> tuple[str, ...]:
    folder = hardware_dir()
    return tuple(sorted(path.stem for path in folder.glob("*.toml"))) if folder.is_dir() else ()


def _read_file(path: Path) -> HardwareProfile:
    return _build_checked(_read_tree(path), f"profile {path.name}")


def _read_tree(path: Path) -> Any:
    """A profile file's parsed content (not yet validated)."""
    label = f"profile {path.name}"
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        raise MapperError(f"{label}: unknown file type {suffix or '(none)'}; use a .toml, .json or .yaml profile")
    try:
        size = path.stat().st_size
        if size > MAX_PROFILE_BYTES:
            raise MapperError(
                f"{label}: {size} bytes is over {limits.limit_text('MAX_PROFILE_BYTES')} (1 MiB) "
                f"for a hardware profile; point at the profile itself"
            )
        with path.open("rb") as handle:
            raw = handle.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise MapperError(f"{label}: cannot read {path} ({exc.strerror}); check the path") from None
    return parse_profile(raw, {".json": "json", ".toml": "toml"}.get(suffix, "yaml"), label)


def _build_checked(data: Any, label: str) -> HardwareProfile:
    return _as_builtin(build_profile(validate_profile_dict(data, label).model_dump()))


def _as_builtin(profile: HardwareProfile) -> HardwareProfile:
    """A profile whose content is a built-in's (its name and hash: the file `mapper review` writes beside its
    packet, an export) is that built-in: a reproduce command names it, not a file. Decided when the profile
    is read, so writing a document later opens nothing."""
    if profile.name in _builtin_names() and _load_builtin(profile.name).sha256 == profile.sha256:
        return replace(profile, builtin=True)
    return profile


@cache  # the shipped files are read-only data: one parse per name and process (a built-in is immutable)
def _load_builtin(name: str) -> HardwareProfile:
    path = hardware_dir() / f"{name}.toml"
    tree = validate_profile_dict(_read_tree(path), f"profile {path.name}").model_dump()
    return replace(build_profile(tree), builtin=True)


def load_hardware(spec: str | os.PathLike | bytes | dict) -> HardwareProfile:
    """A built-in name ("h100-sxm"), a path to a .toml/.json/.yaml file, uploaded bytes (TOML or JSON),
    or a parsed dict."""
    if isinstance(spec, dict):
        return _build_checked(spec, "profile (form)")
    if isinstance(spec, (bytes, bytearray)):
        raw = bytes(spec)
        fmt = "json" if raw.lstrip()[:1] == b"{" else "toml"
        return _build_checked(parse_profile(raw, fmt, "uploaded profile"), "uploaded profile")
    if isinstance(spec, str) and spec.strip() in _builtin_names():
        return _load_builtin(spec.strip())
    if not isinstance(spec, (str, os.PathLike)):
        raise MapperError(f"hardware: expected a profile name, path, bytes or dict, got {type(spec).__name__}")
    path = Path(spec).expanduser()
    if not path.is_file():
        raise MapperError(
            f"hardware {str(spec)!r}: not a built-in profile ({', '.join(list_hardware())}) "
            f"and no such file; give one of those names or a path to a .toml profile"
        )
    return _read_file(path)


EDITED_SUFFIX = "-edited"  # an edited profile's own name: it is no longer the built-in it started from
EDITED_SOURCE = "edited by the user"


def edit_profile(
    profile: HardwareProfile, values: dict[str, float], display_name: str | None = None
) -> HardwareProfile:
    """`profile` with some numbers changed (dotted field -> value, the names `flatten_profile` gives),
    validated as a file is: a bad value raises ProfileError naming its field. Whole numbers stay whole.
    A changed value's source says it was edited by the user (and what it was); the profile takes its own
    name (`<name>-edited`), so a sheet or a command never presents it as the built-in."""
    tree = profile_tree(profile)
    changed = 0
    for dotted, value in values.items():
        try:
            entry = tree_get(tree, dotted)
        except (KeyError, TypeError):
            raise MapperError(
                f"profile field {dotted!r} is not a number this profile has; edit a listed field"
            ) from None
        if not (isinstance(entry, dict) and "value" in entry):
            raise MapperError(f"profile field {dotted!r} is not a number this profile has; edit a listed field")
        keep_int = isinstance(entry["value"], int) and float(value).is_integer()
        if entry["value"] != value:
            was = f"{entry['value']:g}" if isinstance(entry["value"], int | float) else "another value"
            entry["source"] = f"{EDITED_SOURCE} (was {was} in {profile.name})"
            changed += 1
        entry["value"] = int(value) if keep_int else value
    if changed:
        tree["meta"]["name"] = profile.name.removesuffix(EDITED_SUFFIX)[: 64 - len(EDITED_SUFFIX)] + EDITED_SUFFIX
        tree["meta"]["evidence"] = {  # the built-in's note no longer describes the edited figures
            "obtained": f"{profile.name} with {changed} value(s) {EDITED_SOURCE} (their sources say so)",
            "checked": "the edited values are not checked",
        }
    if display_name is not None:
        tree["meta"]["display_name"] = display_name
    return _build_checked(tree, "edited profile")
