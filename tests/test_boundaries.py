"""Architecture boundaries: the engine imports no UI, modules stay small, the API is explicit."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mapper

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 500


def test_engine_never_imports_streamlit():
    code = "import sys, mapper, mapper.cli.main, mapper.pipeline; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    for path in (ROOT / "mapper").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not any(name.split(".")[0] == "streamlit" for name in names), path


def test_modules_stay_under_500_lines():
    big = [(p.name, n) for p in (ROOT / "mapper").rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert big == []


def test_public_api_is_explicit():
    assert mapper.__all__ and all(hasattr(mapper, name) for name in mapper.__all__)
