#!/usr/bin/env bash
# The project's virtual environment, .venv, with the engine and the extras named in $1 (pyproject.toml), e.g.
# "test" or "dashboard,store,measure": what scripts/test.sh and scripts/dashboard.sh set up first.
# Installed with uv (from PyPI), which resolves the same versions as pip several times faster (the test extras
# into an empty environment with no cache on this project's machine: 9.4 s against 64 s); with pip where uv
# cannot be installed or cannot reach the index (uv does not read pip's configuration, e.g. a private index).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:?name the extras to install, e.g. test}"
python3 -m venv .venv
if .venv/bin/python -m pip install -q uv && .venv/bin/uv pip install -q --python .venv/bin/python -e ".[$extras]"; then
    exit 0
fi
echo "note: uv could not install the environment; installing with pip" >&2
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[$extras]"
