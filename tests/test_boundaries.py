"""Architecture boundaries: the engine imports no UI, modules stay small, the API is explicit."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mapper

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400  # split before this (STYLE.md; issue 16)
MAX_FUNCTION_LINES = 60


def test_engine_never_imports_streamlit():
    code = "import sys, mapper, mapper.cli.main, mapper.pipeline; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    for path in (ROOT / "mapper").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not any(name.split(".")[0] == "streamlit" for name in names), path


def test_map_json_loads_no_frame_plot_store_or_cluster_library():
    """`mapper map --json` (the assessment included) needs onnx and numpy: no pandas, plotting, SQLAlchemy,
    Streamlit or Dask; a command that writes a sheet, plots or records loads its library where it does."""
    code = (
        "import sys, io, contextlib; from mapper.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['map', 'resnet50', '--json'])\n"
        "heavy = ('pandas', 'plotly', 'sqlalchemy', 'streamlit', 'dask', 'openpyxl')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_modules_stay_under_400_lines():
    big = [
        (p.name, n)
        for p in (ROOT / "mapper").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert big == []


def test_functions_stay_under_60_lines():
    """A function past 60 lines is several jobs; each gets a name (engine and dashboard alike)."""
    import ast

    long = []
    for p in [*(ROOT / "mapper").rglob("*.py"), *(ROOT / "app_pages").glob("*.py")]:
        for node in ast.walk(ast.parse(p.read_text())):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                long.append((str(p.relative_to(ROOT)), node.name, n))
    assert long == []


def test_public_api_is_explicit():
    assert mapper.__all__ and all(hasattr(mapper, name) for name in mapper.__all__)


def dashboard_sources() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "app_pages").glob("*.py"))]


def mapper_uses(tree: ast.AST) -> list[str]:
    """What a dashboard module takes from the engine, as 'import mapper.x', 'from mapper.x import y'
    or 'mapper.<attr>' (the attributes of the name `mapper`)."""
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            uses += [f"import {a.name}" for a in node.names if a.name.startswith("mapper.")]
            uses += [f"import mapper as {a.asname}" for a in node.names if a.name == "mapper" and a.asname]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mapper":
            uses.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "mapper":
            uses.append(f"mapper.{node.attr}")
    return uses


def test_the_dashboard_uses_only_the_public_api():
    """app.py and app_pages/ import nothing but `mapper` and use only the names mapper/__init__.py exports,
    so the engine's modules can move without the dashboard noticing."""
    assert len(dashboard_sources()) > 10
    public = set(mapper.__all__)
    found = {}
    for path in dashboard_sources():
        bad = [
            use
            for use in mapper_uses(ast.parse(path.read_text()))
            if not use.startswith("mapper.") or use.removeprefix("mapper.") not in public
        ]
        if bad:
            found[str(path.relative_to(ROOT))] = sorted(set(bad))
    assert found == {}


def test_the_dashboard_boundary_check_catches_private_imports():
    """The check above, on code that reaches past the API (so it cannot pass by finding nothing)."""
    code = "import mapper\nimport mapper.sheet\nfrom mapper.units import format_bytes\nmapper.charts.LAYOUT\n"
    assert mapper_uses(ast.parse(code)) == [
        "import mapper.sheet",
        "from mapper.units import format_bytes",
        "mapper.charts",
    ]


# The pipeline's stages, bottom up: a module may import its own package and anything below it, never above.
# (docs/architecture.md draws the same order.)
STAGES = (
    ("core",),
    ("ops",),
    ("hardware", "zoo"),
    ("model",),
    ("work",),
    ("handle", "plan"),
    ("cost",),
    ("schedule",),
    ("pipeline",),
    ("report", "serve", "evidence", "train"),
    ("explore", "store"),
    ("review",),
    ("__init__",),
    ("cli", "__main__"),
)
LEVEL = {name: level for level, names in enumerate(STAGES) for name in names}


def module_imports() -> dict[str, set[str]]:
    """Each mapper module (dotted) -> the mapper modules it imports at module level (function-local imports are
    the lazy third-party ones and the store's; they cannot form an import-time circle)."""
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "mapper").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mapper"):
                named = {f"{node.module}.{a.name}" for a in node.names}
                modules = {n for n in named if is_module(n)}  # `from mapper import pipeline`: the submodule
                found |= modules | ({node.module} if modules != named else set())  # else names from the module
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("mapper"))
        graph[name] = found
    return {m: {i for i in deps if i in graph and i != m} for m, deps in graph.items()}


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circles_and_no_import_points_up_the_stages():
    graph = module_imports()
    upward = [
        (m, d) for m, deps in graph.items() for d in deps if stage(m) != stage(d) and LEVEL[stage(d)] > LEVEL[stage(m)]
    ]
    assert upward == []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return [*path, m, d]
            if d not in state and (circle := visit(d, [*path, m])):
                return circle
        state[m] = 2
        return None

    circles = [c for m in sorted(graph) if m not in state and (c := visit(m, []))]
    assert circles == []
