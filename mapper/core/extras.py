"""The optional packages: which extra installs each, and the one line a feature gives when its extra is missing.

`pip install mapper` brings the engine (onnx, numpy, pydantic for the hardware profiles): `import mapper`,
`map_workload`, `mapper map`/`serve`/`zoo`/`hw` need nothing more. The rest is in extras (pyproject.toml):
`report` writes sheets, charts, sweeps, comparisons and review packets; `dashboard` adds Streamlit; `store`
records runs (SQLAlchemy); `dask` runs sweeps on a cluster; `measure` runs models in ONNX Runtime; `validate`
reads AIConfigurator's measured tables. A feature whose package is absent raises MapperError naming the extra (the
CLI: `error: ...`, exit 2), never a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mapper.core.errors import MapperError

# Top-level module -> (the extra that installs it, the distribution's name as pip spells it).
EXTRAS = {
    "pandas": ("report", "pandas"),
    "openpyxl": ("report", "openpyxl"),
    "plotly": ("report", "plotly"),
    "pyarrow": ("report", "pyarrow"),
    "rich": ("report", "rich"),
    "streamlit": ("dashboard", "streamlit"),
    "sqlalchemy": ("store", "SQLAlchemy"),
    "psycopg": ("store", "psycopg"),
    "platformdirs": ("store", "platformdirs"),
    "dask": ("dask", "dask[distributed]"),
    "distributed": ("dask", "dask[distributed]"),
    "onnxruntime": ("measure", "onnxruntime"),
    "sympy": ("measure", "sympy"),
    "aiconfigurator_core": ("validate", "aiconfigurator-core"),
}


# What each extra is for, said in the error line.
PURPOSES = {
    "report": "sheets, charts, sweeps, comparisons and review packets",
    "dashboard": "the dashboard",
    "store": "the run store",
    "dask": "the dask executor",
    "measure": "running models on ONNX Runtime",
    "validate": "AIConfigurator's measured tables",
}


def install_hint(extra: str) -> str:
    return f"pip install 'mapper[{extra}]' (in a checkout: pip install -e '.[{extra}]')"


def missing_extra(exc: ImportError, feature: str) -> MapperError | None:
    """The one-line error for an ImportError of a package an extra installs; None for any other ImportError
    (a broken install of a core package stays a traceback: it is a bug, not a choice of extras)."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if name not in EXTRAS:
        return None
    extra, dist = EXTRAS[name]
    return MapperError(f"{feature} needs {dist} ({PURPOSES[extra]}), which is not installed: {install_hint(extra)}")


def require(module: str, feature: str) -> ModuleType:
    """`module` imported, or MapperError naming the extra that installs it (`feature` says what needed it)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        error = missing_extra(exc, feature)
        if error is None:
            raise
        raise error from exc
