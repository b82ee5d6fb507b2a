#!/usr/bin/env bash
# The project's virtual environment, .venv, with the engine and the extras named in $1 (pyproject.toml), e.g.
# "test" or "dashboard,store,measure": what scripts/test.sh and scripts/dashboard.sh set up first.
# Installed with uv (from PyPI), which resolves the same versions as pip, faster (the test extras into an empty
# environment with no cache on this project's machine: 38 s against pip's 64 s); with pip where uv cannot be
# installed or cannot reach the index (uv does not read pip's configuration, e.g. a private index).
# --compile-bytecode: pip byte-compiles what it installs, uv only when asked; where PYTHONDONTWRITEBYTECODE is set
# (as on this project's machine) nothing is compiled later either, and every process would compile every module
# it imports again (without it: 9 s to install, then the engine, pandas, plotly, openpyxl, SQLAlchemy and
# Streamlit take 7-9 s to import in a process, against 3 s).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:?name the extras to install, e.g. test}"
python3 -m venv .venv
if .venv/bin/python -m pip install -q uv && .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -e ".[$extras]"; then
    exit 0
fi
echo "note: uv could not install the environment; installing with pip" >&2
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[$extras]"
