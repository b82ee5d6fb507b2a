"""Import, default bindings: a value for every symbolic dim of an exported model, read off its role (bindings.py's
dim_roles_of) and name, so a folder of exports maps without naming each exporter's dims (scripts/ci_recipe.sh).

The caller's values come first, by dim name or by role ("seq=512" binds sequence_length, seq or s1, whatever the
exporter called it); then the name table, then the role table; a length derived from others (a cache-plus-new
total, the branch that reads the cache) follows the values it derives from. A dim none of them covers is an error
naming it: no silent guess for a dim whose meaning the engine cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mapper.core.errors import MapperError

# One slice of one request, as the built-ins start (handle.BUILTIN_DEFAULT_DIMS): batch 1; 128 tokens (BERT's
# fine-tuning max_seq_length in its paper's GLUE runs, and the built-ins' seq); an empty KV cache (a prefill).
ROLE_DEFAULTS = {"batch": 1, "seq": 128, "past": 0}

# Dims a role does not say, by the name exporters give them (Optimum's vision exports: pixel_values
# [batch_size, num_channels, height, width]): an RGB image at ImageNet's 224 x 224, as the zoo's CNNs and ViT.
NAME_DEFAULTS = {"num_channels": 3, "channels": 3, "height": 224, "width": 224}


def _by_role(bound: Mapping[str, int], roles: Mapping[str, str], role: str) -> list[int]:
    return [bound[n] for n, r in roles.items() if r == role and n in bound]


# Roles whose value follows others: a cache-plus-new length is the longest new length plus the longest cache; the
# If of a merged decoder (Optimum's use_cache_branch) reads the cache (1) where one is bound, else not (0).
DERIVED: dict[str, Callable[[Mapping[str, int], Mapping[str, str]], int]] = {
    "total": lambda b, r: max(_by_role(b, r, "seq"), default=0) + max(_by_role(b, r, "past"), default=0),
    "branch": lambda b, r: int(max(_by_role(b, r, "past"), default=0) > 0),
}


def default_bindings(roles: Mapping[str, str], given: Mapping[str, int] | None = None) -> dict[str, int]:
    """Every dim of `roles` (a model's dim -> role) bound: `given` by dim name, then by role, then NAME_DEFAULTS,
    then ROLE_DEFAULTS, then DERIVED. Keys of `given` that are neither a dim nor a role of this model are left
    out (one list of values serves a folder of models)."""
    given = dict(given or {})
    bound: dict[str, int] = {}
    for name, role in roles.items():
        for table, key in ((given, name), (given, role), (NAME_DEFAULTS, name.lower()), (ROLE_DEFAULTS, role)):
            if key in table:
                bound[name] = int(table[key])
                break
    for name, role in roles.items():
        if name not in bound and role in DERIVED:
            bound[name] = DERIVED[role](bound, roles)
    missing = [f"{n} ({roles[n]})" for n in roles if n not in bound]
    if missing:
        raise MapperError(
            f"no default for dim {', '.join(missing)}: give NAME=VALUE for it (the defaults: roles"
            f" {_text(ROLE_DEFAULTS)}, names {_text(NAME_DEFAULTS)})"
        )
    return {n: bound[n] for n in roles}


def parse_bindings(words: list[str] | tuple[str, ...]) -> dict[str, int]:
    """["batch=8", "seq=512"] -> {"batch": 8, "seq": 512}; a word that is not NAME=INTEGER (>= 0) is an error."""
    out = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not (sep and name and value.isascii() and value.isdigit()):
            raise MapperError(f"binding {word!r} must look like NAME=INTEGER, e.g. seq=512")
        out[name] = int(value)
    return out


def _text(table: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in table.items())
