"""Trends: a slice's KPIs across revisions, read from the run store, and the regression flag on them.

A slice is one (command, model, profile, dims, options); its points are its runs in the order recorded.
A regression compares the latest revision's last run with the previous revision's last run (two runs
of one revision are a re-run, not a change), each KPI in its own direction (p99 up is worse, MFU down).
"""

from __future__ import annotations

import dataclasses
import json

import sqlalchemy as sa

from mapper.core.errors import MapperError
from mapper.store.kpis import KPIS, PRIMARY_ORDER
from mapper.store.schema import KPI_COLUMNS, open_engine, runs


@dataclasses.dataclass(frozen=True, slots=True)
class TrendPoint:
    run_id: int
    revision: str
    recorded_utc: str
    model_sha256: str
    hardware_sha256: str
    engine_version: str
    kpis: dict  # column -> value or None (KPI_COLUMNS)
    first_failure: str | None
    has_sheet: bool


@dataclasses.dataclass(frozen=True, slots=True)
class SliceTrend:
    key: str
    command: str
    model_name: str
    hardware_name: str
    dims: dict
    options: dict
    points: tuple[TrendPoint, ...]

    def primary_metric(self) -> str | None:
        return next((m for m in PRIMARY_ORDER if any(p.kpis[KPIS[m][0]] is not None for p in self.points)), None)

    def by_revision(self) -> tuple[TrendPoint, ...]:
        """The last run of each revision, in the order their last runs were recorded."""
        last = {p.revision: p for p in self.points}
        return tuple(sorted(last.values(), key=lambda p: p.run_id))


@dataclasses.dataclass(frozen=True, slots=True)
class Regression:
    kpi: str
    previous_revision: str
    latest_revision: str
    previous: float
    latest: float
    change: float  # signed relative change, worse is positive
    threshold: float


def parse_thresholds(items: list[str] | tuple[str, ...]) -> dict[str, float]:
    """['p99=0.05', 'mfu=0.02'] -> {'p99': 0.05, 'mfu': 0.02}; a bad item is a MapperError."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if name not in KPIS or not sep:
            raise MapperError(f"--fail-on-regression {item!r}: give KPI=FRACTION with a KPI of {', '.join(KPIS)}")
        try:
            out[name] = float(value)
        except ValueError:
            raise MapperError(f"--fail-on-regression {item!r}: {value!r} is not a number") from None
        if not out[name] >= 0:  # NaN too
            raise MapperError(f"--fail-on-regression {item!r}: the fraction must be at least 0")
    return out


def load_trends(
    store: str | sa.Engine, model: str | None = None, hw: str | None = None, dims: dict | None = None
) -> list[SliceTrend]:
    """Every slice in the store matching the filters (dims: each given dim at its value), its runs in order."""
    engine = open_engine(store) if isinstance(store, str) else store
    query = sa.select(*(c for c in runs.c if c.name not in ("document", "sheet")), runs.c.sheet.is_not(None))
    query = query.order_by(runs.c.id)
    if model:
        query = query.where(runs.c.model_name == model)
    if hw:
        query = query.where(runs.c.hardware_name == hw)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    slices: dict[str, list] = {}
    for row in rows:
        row_dims = json.loads(row.dims)
        if all(row_dims.get(k) == v for k, v in (dims or {}).items()):
            slices.setdefault(row.slice_key, []).append(row)
    return [_slice(key, group) for key, group in slices.items()]


def _slice(key: str, group: list) -> SliceTrend:
    first = group[0]
    points = tuple(
        TrendPoint(
            r.id,
            r.revision,
            r.recorded_utc,
            r.model_sha256,
            r.hardware_sha256,
            r.engine_version,
            {c: getattr(r, c) for c in KPI_COLUMNS},
            r.first_failure,
            bool(r[-1]),
        )
        for r in group
    )
    dims, options = json.loads(first.dims), json.loads(first.options)
    return SliceTrend(key, first.command, first.model_name, first.hardware_name, dims, options, points)


def regressions(trend: SliceTrend, thresholds: dict[str, float]) -> list[Regression]:
    """The KPIs whose latest revision is worse than the previous one by more than its threshold."""
    revisions = trend.by_revision()
    if len(revisions) <= 1:  # a change needs two revisions
        return []
    before, after = revisions[-2], revisions[-1]
    found = []
    for kpi, threshold in thresholds.items():
        column, higher_is_better = KPIS[kpi]
        old, new = before.kpis[column], after.kpis[column]
        if old is None or new is None or old == 0:
            continue
        change = (old - new) / abs(old) if higher_is_better else (new - old) / abs(old)
        if change > threshold:
            found.append(Regression(kpi, before.revision, after.revision, old, new, change, threshold))
    return found


def trend_document(trends: list[SliceTrend], thresholds: dict[str, float]) -> dict:
    """What `mapper trend --json` prints: each slice, its points, its regressions; `regressed` overall."""
    slices = []
    for t in trends:
        flagged = regressions(t, thresholds)
        slices.append(
            {
                "slice": {
                    "key": t.key,
                    "command": t.command,
                    "model": t.model_name,
                    "hardware": t.hardware_name,
                    "dims": t.dims,
                    "options": t.options,
                },
                "primary_metric": t.primary_metric(),
                "points": [dataclasses.asdict(p) for p in t.points],
                "regressions": [dataclasses.asdict(r) for r in flagged],
            }
        )
    return {
        "thresholds": thresholds,
        "slices": slices,
        "regressed": any(s["regressions"] for s in slices),
    }
