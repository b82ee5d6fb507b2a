#!/usr/bin/env bash
# Sets everything up and starts the dashboard on the built-in ResNet-50 and the H100 profile.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
exec .venv/bin/streamlit run app.py "$@"
