"""Step 3's proving artifact as tables a page draws: every kernel on the device roofline with the failing
class's marked, the kernel time split by class with the bytes or FLOPs behind each, the failing kernels in
people's words (repeated layers one row) and the measured evidence where the document has some.
Read off the baseline's mapping document only; the dashboard's review step draws it (app_pages/proof.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.classes import Bottleneck
from mapper.core.units import format_bytes, format_duration, format_flops, format_number
from mapper.report.charts import assumption_value, dram_bandwidth
from mapper.report.groups import repeated_groups
from mapper.review.measured import measured_verdict, rate_text, verdict_sentence

KERNEL_ROWS = 40  # groups of failing kernels the table lists, longest first (a 32-layer model has ~10)
MEASURED_ROWS = 8  # measured kernel groups of the failing class, longest measured first
ROOF_MARGIN = 3.0  # the roof runs this factor past the outermost point (or the ridge) on either side
SMALLEST_SHARE = 0.001  # under a tenth of a percent a share reads "<0.1%", not "0.0%"
NONE = "—"  # an empty cell: a kernel with no tile, a group the run gave no time

KERNEL_COLUMNS = (
    "kernel", "layer type", "time", "share", "DRAM bytes", "FLOPs", "FLOP/B", "fusion rule", "tile", "class",
    "owner", "evidence",
)  # fmt: skip
MEASURED_COLUMNS = (
    "kernels", "layer type", "predicted", "measured", "error", "achieved FLOP/s", "achieved DRAM B/s",
    "predicted class", "measured class",
)  # fmt: skip

POINT_COLUMNS = ("name", "intensity_flop_per_byte", "achieved_flops_per_s", "time_s", "failing")
CLASS_COLUMNS = ("class", "time_s", "share", "dram_bytes", "flops", "kernels", "behind")

# What stands behind a class's time, in the unit a person checks it by: bytes at the DRAM bandwidth,
# FLOPs at the peak, or kernels each paying a fixed cost. A class not listed is read by its bytes.
# keyed by Bottleneck, a str: a kernel row's class label (a document's) looks its figure up as it is
BEHIND: dict[str, Callable[[dict], str]] = {
    Bottleneck.COMPUTE_MATRIX: lambda r: format_flops(r["flops"]),
    Bottleneck.COMPUTE_VECTOR: lambda r: format_flops(r["flops"]),
    Bottleneck.OCCUPANCY: lambda r: format_flops(r["flops"]),
    Bottleneck.ALIGNMENT: lambda r: format_flops(r["flops"]),
    Bottleneck.LAUNCH: lambda r: f"{r['kernels']:,} launches",
    Bottleneck.SYNCHRONIZATION: lambda r: f"{r['kernels']:,} kernels",
    Bottleneck.HOST: lambda r: f"{r['kernels']:,} host ops",
}


@dataclass(frozen=True, slots=True)
class Table:
    """Rows of one width under named columns (a page makes a DataFrame of it; a test reads a column)."""

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]

    def column(self, name: str) -> tuple:
        i = self.columns.index(name)
        return tuple(row[i] for row in self.rows)


@dataclass(frozen=True, slots=True)
class Roof:
    """The device's roofline at the plan's precision, and where each figure was read."""

    peak_flops_per_s: float
    dram_bandwidth_bytes_per_s: float
    ridge_flop_per_byte: float
    dtype: str
    line: tuple[tuple[float, float], ...]  # (FLOP/B, FLOP/s) corners: DRAM slope up to the ridge, then flat
    source: str  # "given", "the mapping document", or which figure came from the kernels' own times


@dataclass(frozen=True, slots=True)
class ProvingArtifact:
    """Step 3: what proves the failing class (`bottleneck`)."""

    bottleneck: str
    headline: str  # "96 compute-bound (matrix) kernels take 12.6 ms, 88.2% of the kernel time: 565 GFLOP"
    roof: Roof
    points: Table  # POINT_COLUMNS: every kernel with FLOPs and DRAM traffic (log axes), failing marked
    off_axes: int  # kernels with no FLOPs or no DRAM traffic: no place on log axes
    off_axes_failing: int
    classes: Table  # CLASS_COLUMNS, longest first; shares of the summed kernel time (they sum to 1)
    kernels: Table  # KERNEL_COLUMNS, all text: the failing kernels, repeated layers one row, longest first
    kernels_of_class: int
    measured: Table | None  # MEASURED_COLUMNS, all text; None where the document has no measurement
    measured_points: Table  # POINT_COLUMNS at the measured time (the failing class's measured groups)
    measured_summary: str  # the model's measured p50 against the prediction, or why there is none


def _best(kernels: list[dict], amount: str, time: str) -> float:
    """The highest rate any kernel reached on one resource (its amount over its time on it): no more than the
    device's, and no point lies above it."""
    return max((k[amount] / k[time] for k in kernels if k[time] > 0), default=1.0) or 1.0


def _roof(doc: dict, points: list[dict], peak: float | None, bandwidth: float | None) -> Roof:
    """The roofs as given, else the document's (the plan dtype's peak in totals or the assumptions, the
    profile's DRAM bandwidth in the assumptions), else the best any kernel reached (`_best`)."""
    kernels, dtype = doc["kernels"], doc["totals"].get("dtype", "")
    peaks = (
        (peak, "given"),
        (doc["totals"].get("peak_flops_per_s"), "the mapping document"),
        (assumption_value(doc, f"compute.matrix_peak_flops_per_s.{dtype}"), "the mapping document"),
    )
    bandwidths = ((bandwidth, "given"), (dram_bandwidth(doc), "the mapping document"))
    peak, peak_from = next(((v, src) for v, src in peaks if v), (_best(kernels, "flops", "compute_time_s"), ""))
    bandwidth, bandwidth_from = next(
        ((v, src) for v, src in bandwidths if v), (_best(kernels, "dram_bytes", "memory_time_s"), "")
    )
    derived = [name for name, src in (("peak", peak_from), ("DRAM bandwidth", bandwidth_from)) if not src]
    sources = sorted({src for src in (peak_from, bandwidth_from) if src})
    source = "; ".join(sources + ([f"{' and '.join(derived)} from the kernels' own times"] if derived else []))
    ridge = peak / bandwidth
    xs = [k["intensity_flop_per_byte"] for k in points] + [ridge]
    lo, hi = min(xs) / ROOF_MARGIN, max(xs) * ROOF_MARGIN
    return Roof(peak, bandwidth, ridge, dtype, ((lo, lo * bandwidth), (ridge, peak), (hi, peak)), source)


def _on_axes(k: dict) -> bool:
    return (k.get("intensity_flop_per_byte") or 0) > 0 and (k.get("achieved_flops_per_s") or 0) > 0


def _points(on_axes: list[dict], cls: str) -> Table:
    rows = tuple(
        (k["name"], k["intensity_flop_per_byte"], k["achieved_flops_per_s"], k["time_s"], k["bottleneck"] == cls)
        for k in on_axes
    )
    return Table(POINT_COLUMNS, rows)


def _classes(kernels: list[dict], total_s: float) -> Table:
    """Kernel time by class with the bytes and FLOPs behind it, longest first."""
    by: dict[str, dict] = {}
    for k in kernels:
        row = by.setdefault(k["bottleneck"], {"time_s": 0.0, "dram_bytes": 0.0, "flops": 0.0, "kernels": 0})
        row["time_s"] += k["time_s"]
        row["dram_bytes"] += k["dram_bytes"]
        row["flops"] += k["flops"]
        row["kernels"] += 1
    rows = []
    for cls, r in sorted(by.items(), key=lambda kv: (-kv[1]["time_s"], kv[0])):
        behind = BEHIND.get(cls, lambda r: format_bytes(r["dram_bytes"]))(r)
        share = r["time_s"] / total_s if total_s else 0.0
        rows.append((cls, r["time_s"], share, r["dram_bytes"], r["flops"], r["kernels"], behind))
    return Table(CLASS_COLUMNS, tuple(rows))


def _share(fraction: float) -> str:
    return "<0.1%" if 0 < fraction < SMALLEST_SHARE else f"{fraction:.1%}"


def _tile(tile: str) -> str:
    return tile.replace("x", "×") if tile else NONE  # "128x128x64" -> "128×128×64" (M×N×K)


def _kernel_rows(failing: list[dict], total_s: float) -> Table:
    """The failing kernels in people's words, a repeated layer's copies one row (their sums), longest first;
    fusion rule, tile, evidence and owner are the group's slowest member's."""
    groups = sorted(repeated_groups(failing), key=lambda g: (-sum(k["time_s"] for k in g[1]), g[0]))
    rows = []
    for label, members in groups[:KERNEL_ROWS]:
        slowest = max(members, key=lambda k: k["time_s"])
        time_s = sum(k["time_s"] for k in members)
        dram = sum(k["dram_bytes"] for k in members)
        flops = sum(k["flops"] for k in members)
        rows.append(
            (
                label,
                slowest["layer_type"],
                format_duration(time_s),
                _share(time_s / total_s if total_s else 0.0),
                format_bytes(dram),
                format_flops(flops),
                format_number(flops / dram, "FLOP/B") if dram else NONE,
                slowest["rule"],
                _tile(slowest["tile"]),
                slowest["bottleneck"],
                slowest["owner"],
                slowest["evidence"] or NONE,
            )
        )
    return Table(KERNEL_COLUMNS, tuple(rows))


def _error(error: float | None) -> str:
    return NONE if error is None or not math.isfinite(error) else f"{error:+.0%}"


def _measured_row(label: str, members: list[dict], peak: float, bandwidth: float) -> tuple[tuple, tuple | None]:
    """One row of measured evidence (a repeated layer's groups summed) and its point at the measured time."""
    predicted, measured = sum(g["predicted_s"] for g in members), sum(g["measured_s"] for g in members)
    flops, dram = sum(g["flops"] for g in members), sum(g["dram_bytes"] for g in members)
    by_class: dict[str, float] = {}
    for g in members:
        by_class[g["measured_class"]] = by_class.get(g["measured_class"], 0.0) + g["measured_s"]
    joined = len(members[0]["kernels"]) - 1  # kernels the run timed together with this one
    label += f" (+{joined} joined)" if joined else ""
    row = (
        label,
        members[0]["layer_type"],
        format_duration(predicted),
        format_duration(measured) if measured > 0 else NONE,
        _error((predicted - measured) / measured if measured > 0 else None),
        rate_text(flops, measured, peak, "FLOP/s"),
        rate_text(dram, measured, bandwidth, "B/s"),
        members[0]["predicted_class"],
        max(sorted(by_class), key=by_class.__getitem__),
    )
    point = (label, flops / dram, flops / measured, measured, True) if measured > 0 and flops > 0 and dram > 0 else None
    return row, point


def _measured(doc: dict, cls: str) -> tuple[Table | None, Table, str]:
    """The failing class's measured kernel groups (text; a repeated layer's one row, longest measured first),
    their roofline points at the measured time, and the model's measured p50 against the prediction."""
    section = doc.get("measured")
    if not section:
        return None, Table(POINT_COLUMNS, ()), verdict_sentence({})
    roofs = section.get("model", {})  # the roofs the comparison scored against (the document's, older ones aside)
    peak = roofs.get("peak_flops_per_s") or doc["totals"].get("peak_flops_per_s") or 0.0
    bandwidth = roofs.get("dram_bandwidth_bytes_per_s") or dram_bandwidth(doc) or 0.0
    groups = [{**g, "name": g["kernels"][0]} for g in section.get("kernels", ()) if g["predicted_class"] == cls]
    repeated = sorted(repeated_groups(groups), key=lambda lg: (-sum(g["measured_s"] for g in lg[1]), lg[0]))
    made = [_measured_row(label, members, peak, bandwidth) for label, members in repeated[:MEASURED_ROWS]]
    m = section.get("model", {})
    agree = sum(1 for g in groups if g["measured_class"] == cls)
    summary = (
        f"Measured p50 {format_duration(m.get('measured_p50_s'))} against {format_duration(m.get('predicted_s'))}"
        f" predicted (error {_error(m.get('error'))}); the measured class agrees in {agree} of {len(groups)}"
        f" {cls} kernel groups. {verdict_sentence(measured_verdict(doc, cls))}"
    )
    points = tuple(point for _, point in made if point)
    return Table(MEASURED_COLUMNS, tuple(row for row, _ in made)), Table(POINT_COLUMNS, points), summary


def proving_artifact(
    doc: dict, cls: str, *, peak_flops_per_s: float | None = None, dram_bandwidth_bytes_per_s: float | None = None
) -> ProvingArtifact:
    """Step 3 for the failing class `cls` of a mapping document (`mapping_document`); the roofs are the
    document's unless given (a profile's own figures)."""
    kernels = doc["kernels"]
    total_s = sum(k["time_s"] for k in kernels)
    failing = [k for k in kernels if k["bottleneck"] == cls]
    on_axes = [k for k in kernels if _on_axes(k)]
    classes = _classes(kernels, total_s)
    mine = next((r for r in classes.rows if r[0] == cls), None)
    headline = (
        f"{len(failing)} {cls} kernels take {format_duration(mine[1])}, {_share(mine[2])} of the kernel time:"
        f" {mine[-1]}"
        if mine
        else f"No {cls} kernels in this mapping."
    )
    measured, measured_points, summary = _measured(doc, cls)
    return ProvingArtifact(
        bottleneck=cls,
        headline=headline,
        roof=_roof(doc, on_axes, peak_flops_per_s, dram_bandwidth_bytes_per_s),
        points=_points(on_axes, cls),
        off_axes=len(kernels) - len(on_axes),
        off_axes_failing=sum(1 for k in failing if not _on_axes(k)),
        classes=classes,
        kernels=_kernel_rows(failing, total_s),
        kernels_of_class=len(failing),
        measured=measured,
        measured_points=measured_points,
        measured_summary=summary,
    )
