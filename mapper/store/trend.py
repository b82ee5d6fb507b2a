"""Trends: a slice's KPIs across revisions, read from the run store, and the regression flag on them.

A slice is one (command, model, profile, dims, options); its points are its runs in the order recorded. Its title
names all five (options: those away from PlanOptions' defaults), so two slices never read alike.
A reader sees the runs of its scope (mapper/store/owners.py): a session its own, the team's when the operator
shares them, the CLI every run. A row whose stored fields do not read back (dims that are not JSON, a KPI that
is not a number: a store written by hand or damaged) is skipped and counted, never the end of every trend.
A regression compares the latest revision's last run with the previous revision's last run (two runs
of one revision are a re-run, not a change), each KPI in its own direction (p99 up is worse, MFU down).
"""

from __future__ import annotations

import dataclasses
import json

import sqlalchemy as sa

from mapper.core.errors import MapperError
from mapper.report.reproduce import DEFAULT_OPTIONS, PLAN_FIELDS, format_option
from mapper.store.kpis import KPIS, PRIMARY_ORDER
from mapper.store.owners import EVERY_RUN, RunScope
from mapper.store.schema import KPI_COLUMNS, read_scoped, runs


@dataclasses.dataclass(frozen=True, slots=True)
class TrendPoint:
    run_id: int  # the row's number (the CLI's; it counts up, so links never carry it)
    public_id: str | None  # what a link to the run carries (`?run=`): 128 random bits
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

    def title(self) -> str:
        """What the slice is, all its key holds: "map resnet50 on h100-sxm, batch=8, dtype=bf16 tp=2"."""
        dims = " ".join(f"{k}={v}" for k, v in self.dims.items()) or "no dims"
        return f"{self.command} {self.model_name} on {self.hardware_name}, {dims}, {options_text(self.options)}"

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


def options_text(options: dict) -> str:
    """A slice's options as `mapper map` reads them, those away from the defaults ("dtype=bf16 tp=2", else "default
    options"), a key no plan option has as KEY=JSON; a comparison's two plans by their descriptions."""
    if isinstance(options.get("baseline"), dict) and isinstance(options.get("candidate"), dict):
        return " vs ".join(f"{side} ({options[side].get('describe', '?')})" for side in ("baseline", "candidate"))
    known = {f.name: f for f in PLAN_FIELDS}
    words = [
        f"{f.name}={_option_text(f, options[f.name])}"
        for f in PLAN_FIELDS
        if f.name in options and options[f.name] != getattr(DEFAULT_OPTIONS, f.name)
    ]
    words += [f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(options.items()) if k not in known]
    return " ".join(words) or "default options"


def _option_text(f, value) -> str:
    """The option as a link writes it; a stored value no option takes (a store written by hand) as JSON."""
    try:
        return format_option(f, value)
    except (StopIteration, TypeError, ValueError):
        return json.dumps(value)


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


@dataclasses.dataclass(frozen=True, slots=True)
class Trends:
    """The slices a reader asked for, and how many of their rows were skipped as unreadable."""

    slices: tuple[SliceTrend, ...]
    skipped_runs: int


def load_trends(
    store: str | sa.Engine,
    model: str | None = None,
    hw: str | None = None,
    dims: dict | None = None,
    scope: RunScope = EVERY_RUN,
) -> list[SliceTrend]:
    """Every slice in `scope` matching the filters (dims: each given dim at its value), its runs in order;
    unreadable rows left out (read_trends counts them)."""
    return list(read_trends(store, model, hw, dims, scope).slices)


def read_trends(
    store: str | sa.Engine,
    model: str | None = None,
    hw: str | None = None,
    dims: dict | None = None,
    scope: RunScope = EVERY_RUN,
) -> Trends:
    """The slices as load_trends, and the number of rows skipped because a stored field does not read back."""
    query = sa.select(*(c for c in runs.c if c.name not in ("document", "sheet")), runs.c.sheet.is_not(None))
    query = query.order_by(runs.c.id)
    if model:
        query = query.where(runs.c.model_name == model)
    if hw:
        query = query.where(runs.c.hardware_name == hw)
    rows = read_scoped(store, query, scope)
    slices: dict[str, list] = {}
    skipped = 0
    for row in rows:
        read = _read_row(row)
        if read is None:
            skipped += 1
        elif all(read[1].get(k) == v for k, v in (dims or {}).items()):
            slices.setdefault(row.slice_key, []).append(read)
    return Trends(tuple(_slice(key, group) for key, group in slices.items()), skipped)


def _read_row(row) -> tuple | None:
    """(row, dims, options, kpis) with the JSON fields parsed and every KPI a number or None; None when a field
    does not read back."""
    try:
        dims, options = json.loads(row.dims), json.loads(row.options)
    except (TypeError, ValueError):
        return None
    kpis = {c: getattr(row, c) for c in KPI_COLUMNS}
    numbers = all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in kpis.values())
    if not (isinstance(dims, dict) and isinstance(options, dict) and numbers):
        return None
    return row, dims, options, kpis


def _slice(key: str, group: list[tuple]) -> SliceTrend:
    first, dims, options, _ = group[0]
    points = tuple(
        TrendPoint(
            r.id,
            r.public_id,
            str(r.revision),  # SQLite keeps any type: each text column read back as text
            str(r.recorded_utc),
            str(r.model_sha256),
            str(r.hardware_sha256),
            str(r.engine_version),
            kpis,
            None if r.first_failure is None else str(r.first_failure),
            bool(r[-1]),
        )
        for r, _, _, kpis in group
    )
    names = (str(first.command), str(first.model_name), str(first.hardware_name))  # SQLite keeps any type
    return SliceTrend(key, *names, dims, options, points)


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


def trend_document(trends: list[SliceTrend], thresholds: dict[str, float], skipped_runs: int = 0) -> dict:
    """What `mapper trend --json` prints: each slice, its points, its regressions; `regressed` overall; how many
    unreadable runs were skipped."""
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
                    "title": t.title(),
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
        "skipped_runs": skipped_runs,
    }
