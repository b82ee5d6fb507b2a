#!/usr/bin/env bash
# Sets everything up and starts the dashboard on the built-in ResNet-50 and the H100 profile.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The pages' extras: the dashboard (Streamlit, pandas, plotly), Trends' run store, Validation's ONNX Runtime
# (pyproject.toml); the engine alone is `pip install -e .`.
.venv/bin/python -m pip install -q -e ".[dashboard,store,measure]"
exec .venv/bin/streamlit run app.py "$@"
