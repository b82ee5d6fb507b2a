"""Step 5 of a review: the chosen fix against the baseline over the slices around the frozen one.

A client of `mapper compare` (explore.compare.compare_plans): batch and sequence length around the
frozen slice (or a grid the user sets); for a decoder the sequence axis is the context length (its
KV-cache length), one comparison per length. The rollback boundary is the slices that keep the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mapper.explore.compare import CompareSettings, compare_plans
from mapper.explore.compare_inputs import PlanSpec
from mapper.explore.compare_verdict import overall_verdict

if TYPE_CHECKING:
    import pandas as pd

MATRIX_REQUESTS = 5_000  # per slice and plan: p99 of 5k requests moves under the 2 % threshold (compare's note)


@dataclass(frozen=True, slots=True)
class Grid:
    """The slices of the matrix: batches x lengths; `axis` names what the lengths bind (seq, past, or none)."""

    batches: tuple[int, ...]
    lengths: tuple[int | None, ...]
    axis: str  # "seq" | "past" | "" (a model without a sequence dim)


@dataclass(frozen=True, slots=True)
class Validation:
    grid: Grid
    matrix: pd.DataFrame  # slice x metric: baseline, candidate, change, threshold, verdict
    verdicts: pd.DataFrame  # per slice
    boundary: pd.DataFrame  # per slice: the plan kept and why
    overall: str
    summary: str

    def rollback_slices(self) -> list[dict]:
        """The slices that keep the baseline (the rollback boundary)."""
        kept = self.boundary[self.boundary["plan_kept"] == "baseline"]
        return [_slice(row, self.grid.axis) for row in kept.to_dict("records")]

    def rollback_text(self) -> str:
        """The rollback boundary in people's words: "batch 64, past 4096; batch 128, past 2048" ("none")."""
        return "; ".join(", ".join(f"{k} {v}" for k, v in s.items()) for s in self.rollback_slices()) or "none"

    def regressed_slices(self) -> list[dict]:
        rows = self.verdicts[self.verdicts["verdict"].isin(("regressed", "error"))]
        return [_slice(row, self.grid.axis) for row in rows.to_dict("records")]


def _slice(row: dict, axis: str) -> dict:
    out = {"batch": int(row["batch"])}
    if axis:
        out[axis] = int(row[axis])
    return out


def around(value: int) -> tuple[int, ...]:
    """Half, the value and double (at least 1)."""
    return tuple(sorted({max(1, value // 2), value, value * 2}))


def default_grid(dims: dict[str, int], roles: dict[str, str]) -> Grid:
    by_role = {role: dims[name] for name, role in roles.items() if name in dims}
    batch = by_role.get("batch", 1)
    if "past" in by_role and by_role.get("seq", 1) == 1:  # a decode step: its length is the context
        return Grid(around(batch), around(max(by_role["past"], 1)), "past")
    if "seq" in by_role:
        return Grid(around(batch), around(by_role["seq"]), "seq")
    return Grid(around(batch) if "batch" in by_role else (1,), (None,), "")  # static shapes: the one batch


def validate_fix(
    baseline: PlanSpec, candidate: PlanSpec, grid: Grid, frozen: dict[str, int], roles: dict[str, str]
) -> Validation:
    """compare_plans over the grid (one run per context length for a decoder), tables joined."""
    import pandas as pd  # lazy: `import mapper` and the CLI's --help start without pandas

    settings = CompareSettings(requests=MATRIX_REQUESTS)
    past_name = next((n for n, r in roles.items() if r == "past"), None)
    seq_value = next((frozen[n] for n, r in roles.items() if r == "seq" and n in frozen), 1)
    other = tuple((n, v) for n, v in sorted(frozen.items()) if roles.get(n) not in ("batch", "seq", "past"))
    parts = []
    if grid.axis == "past":
        for past in grid.lengths:
            # a "past" grid comes from roles that name a past dim, its lengths that dim's values
            assert past_name is not None and past is not None
            c = compare_plans(
                baseline, candidate, grid.batches, (seq_value,), settings, dims=((past_name, past), *other)
            )
            parts.append(tuple(_with(df, "past", past) for df in (c.matrix, c.verdicts, c.boundary)))
    else:
        lengths = tuple(v for v in grid.lengths if v is not None) or (seq_value,)
        past_dims = ((past_name, frozen[past_name]),) if past_name is not None and past_name in frozen else ()
        c = compare_plans(baseline, candidate, grid.batches, lengths, settings, dims=(*past_dims, *other))
        parts.append((c.matrix, c.verdicts, c.boundary))
    matrix, verdicts, boundary = (pd.concat([p[i] for p in parts], ignore_index=True) for i in range(3))
    if grid.axis != "seq":
        matrix, verdicts, boundary = (df.drop(columns=["seq"], errors="ignore") for df in (matrix, verdicts, boundary))
    overall, summary = overall_verdict(
        verdicts.to_dict("records"), [dict(r, seq=r.get(grid.axis)) for r in boundary.to_dict("records")]
    )
    if grid.axis == "past":  # compare names its slices "batch B seq S"; a decode step's axis is its context
        summary = summary.replace(" seq ", " past ")
    return Validation(grid, matrix, verdicts, boundary, overall, summary)


def _with(df: pd.DataFrame, column: str, value: int) -> pd.DataFrame:
    out = df.drop(columns=["seq"], errors="ignore")
    out.insert(1, column, value)
    return out
