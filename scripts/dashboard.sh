#!/usr/bin/env bash
# Sets everything up and starts the dashboard on the built-in ResNet-50 and the H100 profile.
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv with the pages' extras: the dashboard (Streamlit, pandas, plotly), Trends' run store, Validation's ONNX
# Runtime (pyproject.toml); the engine alone is `pip install -e .`.
bash scripts/venv.sh dashboard,store,measure
exec .venv/bin/streamlit run app.py "$@"
