"""The bindings scripts/ci_recipe.sh gives one model: every symbolic dim at its default (mapper/model/dim_defaults.py:
by role, batch 1, seq 128, past 0 ...) under the caller's NAME=VALUE words, by dim name or by role.

    python scripts/ci_dims.py MODEL [NAME=VALUE ...]   # one --dim=NAME=VALUE line per dim; bad input: exit 2
"""

from __future__ import annotations

import sys

import mapper
from mapper.model.dim_defaults import default_bindings, parse_bindings


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: ci_dims.py MODEL [NAME=VALUE ...]", file=sys.stderr)
        return 2
    try:
        bound = default_bindings(mapper.open_model(argv[0]).roles, parse_bindings(argv[1:]))
    except mapper.MapperError as exc:
        print(f"error: {argv[0]}: {mapper.error_line(exc)}", file=sys.stderr)
        return 2
    for name, value in bound.items():
        print(f"--dim={name}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
