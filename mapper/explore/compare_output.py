"""Write a plan comparison: the --json document and the .xlsx sheet (verdicts coloured).

Reads only the Comparison record that mapper.explore.compare builds.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from mapper.core.errors import MapperError
from mapper.core.version import __version__
from mapper.explore.compare import Comparison
from mapper.report.tables import write_bytes, xlsx_bytes

if TYPE_CHECKING:
    import pandas as pd


def comparison_document(c: Comparison) -> dict:
    """What --json prints: every table as records, NaN as null."""

    def records(df: pd.DataFrame) -> list[dict]:
        return json.loads(df.to_json(orient="records"))

    return {
        "overall": c.overall,
        "summary": c.summary,
        "quality_caveats": list(c.caveats),
        "fallback": c.fallback,
        "baseline": c.baseline.describe(),
        "candidate": c.candidate.describe(),
        "matrix": records(c.matrix),
        "verdicts": records(c.verdicts),
        "rollback_boundary": records(c.boundary),
        "kernel_class_changes": records(c.kernel_changes),
        "provenance": c.provenance,
    }


FILL = {
    "improved": "C6EFCE",
    "neutral": "EDEDED",
    "regressed": "FFC7CE",
    "error": "FFEB9C",
    "candidate": "C6EFCE",
    "baseline": "FFC7CE",
}


def write_comparison(c: Comparison, path: str) -> str:
    """.xlsx (Matrix, Verdicts, Rollback boundary, Kernel class changes, Provenance) or .json."""
    import pandas as pd  # lazy: `import mapper` and the CLI's --help start without pandas

    if path.endswith(".json"):
        with open(path, "w") as f:
            json.dump(comparison_document(c), f, indent=1)
        return path
    if not path.endswith(".xlsx"):
        raise MapperError(f"--out {path!r}: give a .xlsx or .json file name")
    provenance = pd.DataFrame(provenance_rows(c), columns=["field", "baseline", "candidate"])
    sheets = {
        "Matrix": c.matrix,
        "Verdicts": c.verdicts,
        "Rollback boundary": c.boundary,
        "Kernel class changes": c.kernel_changes,
        "Provenance": provenance,
    }
    write_bytes(path, xlsx_bytes(sheets, _color_verdicts), "the comparison")  # no formula from a name
    return path


def provenance_rows(c: Comparison) -> list[tuple]:
    b, k = c.provenance["baseline"], c.provenance["candidate"]
    rows = [(key, str(b[key]), str(k[key])) for key in ("model", "model_sha256", "hardware", "hardware_sha256")]
    rows += [(f"option.{key}", str(b["options"][key]), str(k["options"][key])) for key in b["options"]]
    rows += [("engine_version", __version__, __version__), ("overall", c.overall, c.summary)]
    rows += [("quality_caveat", "", line) for line in c.caveats]
    rows += [("fallback", "", c.fallback)] if c.fallback else []
    rows += [(f"threshold.{m}", str(t), str(t)) for m, t in c.provenance["thresholds"].items()]
    rows += [(key, str(c.provenance[key]), str(c.provenance[key])) for key in ("load_fraction", "seed", "requests")]
    rows += [("assumption", line, line) for line in c.provenance["assumptions"]]
    return rows


def _color_verdicts(sheet, df: pd.DataFrame) -> None:
    from openpyxl.styles import PatternFill

    for col_name in ("verdict", "plan_kept"):
        if col_name not in df:
            continue
        col = df.columns.get_loc(col_name) + 1
        for row, value in enumerate(df[col_name], start=2):
            if value in FILL:
                sheet.cell(row=row, column=col).fill = PatternFill("solid", fgColor=FILL[value])
