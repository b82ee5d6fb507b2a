"""Calibrate a hardware profile's size-dependent efficiencies to measurements of real runs.

Evidence stage four. Fits, per engine, [efficiency] matrix_by_flops, vector_by_bytes, dram_by_bytes and
overhead.kernel_launch_s, and per op type [efficiency] op_time_scale for ops the runtime runs far off the
roofline (ONNX Runtime's LRN), to measured per-kernel times (least squares on relative time, i.e. first-order
log time, with a ridge toward the current curve where data is thin), re-mapping the training models after
each pass. Every changed value's source says which models, when, and the error before and after.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.vocab import Engine
from mapper.evidence.compare import kernel_groups
from mapper.evidence.measure import ORT_PLAN
from mapper.hardware.load import load_hardware
from mapper.pipeline import load_workload, map_workload

WEIGHT_POWER = 0.5  # sample weight = (share of its model's measured time) ** this: big kernels count more, not all
PASSES = 4  # fit -> re-map rounds (the dominant term can switch after a fit)
RIDGE = 0.05  # pull of each curve knot toward its current value (share of the data's weight)
HUBER_LOG = float(np.log(2.0))  # residuals beyond 2x (in log time) get Huber weights
HUBER_PASSES = 4
SMOOTH = 0.2  # second-difference penalty on log efficiency between decade knots
MIN_EFFICIENCY = 1e-3  # curve floor: a profile's efficiencies must stay in (0, 1]
MIN_LAUNCH_S = 1e-7
CURVE_KEYS = {"matrix": "matrix_by_flops", "vector": "vector_by_bytes", "dram": "dram_by_bytes"}
OP_SCALE_TRIGGER = 3.0  # an op whose single-op kernels run 3x off the prediction (median) gets its own scale
OP_SCALE_MIN_SAMPLES = 2


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured kernel group: which curve its dominant term reads, where, and the efficiency it needed."""

    curve: str
    log_x: float
    needed: float
    weight: float


def measured_latency(measurement, statistic: str = "p50") -> float:
    return min(measurement.latencies_s) if statistic == "min" and measurement.latencies_s else measurement.p50_s


def _curve_of(e) -> tuple[str, float, float]:
    """(curve name, size, current efficiency) read by the dominant term of a kernel's predicted time."""
    if e.memory_time_s > e.compute_time_s:
        return "dram", e.dram_bytes, 0.0
    if e.kernel.engine == Engine.MATRIX:
        return "matrix", e.kernel.flops, 0.0
    return "vector", e.kernel.dram_bytes, 0.0


def held_back(group_index: int, every: int) -> bool:
    """The declared split: with `every` = k > 0, each k-th measured kernel group of a model (in the mapping's order,
    the k-th, 2k-th, ...) is held back from the fit and scored after it; 0 holds nothing back."""
    return every > 0 and group_index % every == every - 1


def _samples(result, measurement, hw, every: int = 0) -> list[Sample]:
    groups, _, _ = kernel_groups(result, measurement)
    by_name = {e.kernel.name: e for e in result.kernels}
    curves = {"matrix": hw.matrix_efficiency, "vector": hw.vector_efficiency, "dram": hw.dram_efficiency}
    total = sum(g["measured_s"] for g in groups) or 1.0
    out = []
    for i, g in enumerate(groups):
        if g["measured_s"] <= 0 or held_back(i, every):
            continue
        members = [by_name[name] for name in g["kernels"]]
        work_s = sum(e.time_s - e.overhead_s - e.sync_s for e in members)
        if work_s <= 0:
            continue
        lead = max(members, key=lambda e: e.time_s)
        curve, size, _ = _curve_of(lead)
        scale = g["measured_s"] / work_s  # >1: the machine was slower than predicted -> lower efficiency needed
        current = curves[curve].at(max(size, 1.0))
        out.append(
            Sample(curve, float(np.log10(max(size, 1.0))), current / scale, (g["measured_s"] / total) ** WEIGHT_POWER)
        )
    return out


def fit_curve(points: list[list[float]], samples: list[Sample], ridge: float = RIDGE) -> list[list[float]]:
    """Weighted least squares on log efficiency with knots at whole decades (hat basis in log10 x), a
    smoothness penalty (second difference) and a ridge toward the current curve where data is thin."""
    lo = min([np.log10(points[0][0])] + [np.floor(s.log_x) for s in samples])
    hi = max([np.log10(points[-1][0])] + [np.ceil(s.log_x) for s in samples])
    xs = np.arange(np.floor(lo), np.ceil(hi) + 1.0)
    current = np.log(np.interp(xs, np.log10([p[0] for p in points]), [p[1] for p in points]))
    if not samples:
        return [[float(10**x), float(np.exp(u))] for x, u in zip(xs, current)]
    eye = np.eye(len(xs))
    rows = [np.sqrt(s.weight) * np.array([np.interp(s.log_x, xs, col) for col in eye]) for s in samples]
    rhs = [np.sqrt(s.weight) * np.log(max(s.needed, MIN_EFFICIENCY)) for s in samples]
    total = sum(s.weight for s in samples)
    for j in range(len(xs)):  # ridge: each knot leans on the current curve with RIDGE of the data's weight
        rows.append(np.sqrt(ridge * total / len(xs)) * eye[j])
        rhs.append(np.sqrt(ridge * total / len(xs)) * current[j])
    for j in range(1, len(xs) - 1):  # smoothness: efficiency curves bend gently from decade to decade
        rows.append(np.sqrt(SMOOTH * total) * (eye[j - 1] - 2 * eye[j] + eye[j + 1]))
        rhs.append(0.0)
    lhs, target = np.asarray(rows), np.asarray(rhs)
    n = len(samples)
    for _ in range(HUBER_PASSES):  # robust: an op the runtime implements badly (ORT's LRN) must not bend the curve
        solution, *_ = np.linalg.lstsq(lhs, target, rcond=None)
        residual = np.abs(lhs[:n] @ solution - target[:n]) / np.sqrt([max(s.weight, 1e-30) for s in samples])
        factor = np.sqrt(np.minimum(1.0, HUBER_LOG / np.maximum(residual, 1e-12)))
        lhs[:n] *= factor[:, None]
        target[:n] *= factor
    solution = np.clip(np.exp(solution), MIN_EFFICIENCY, 1.0)
    return [[float(10**x), float(e)] for x, e in zip(xs, solution)]


def _held_nodes(result, measurement, every: int) -> set[str]:
    """The ONNX nodes of the held-back kernel groups (their measured nodes stay out of every fit)."""
    groups, _, _ = kernel_groups(result, measurement)
    nodes_of = {e.kernel.name: e.kernel.nodes for e in result.kernels}
    return {n for i, g in enumerate(groups) if held_back(i, every) for k in g["kernels"] for n in nodes_of[k]}


def fit_op_scales(results, measurements, hw, every: int = 0) -> dict[str, tuple[float, int]]:
    """Op types the runtime runs consistently far from their engine's other kernels: op -> (new scale, samples).

    Only clean samples count: a measured node that ran exactly one ONNX node, of the same op type, which the
    engine also planned as a kernel of its own (a runtime fusion would otherwise charge one op for another's
    time). An op qualifies when its median measured/predicted ratio is OP_SCALE_TRIGGER times off its engine's
    median (either way) over at least OP_SCALE_MIN_SAMPLES kernels; what all of an engine's kernels share (a
    wrong peak, a wrong curve) is left to the curve fit."""
    ratios: dict[str, list[float]] = {}
    engine_of: dict[str, str] = {}
    for result, m in zip(results, measurements):
        held = _held_nodes(result, m, every) if every else set()
        alone = {
            e.kernel.nodes[0]: e for e in result.kernels if len(e.kernel.nodes) == 1 and e.kernel.nodes[0] not in held
        }
        for n in m.nodes:
            e = alone.get(n.onnx_nodes[0]) if len(n.onnx_nodes) == 1 else None
            work_s = e.time_s - e.overhead_s - e.sync_s if e is not None else 0.0
            if e is None or n.op_type != e.kernel.op_types[0] or work_s <= 0 or n.time_s <= 0:
                continue
            op = n.op_type
            engine_of[op] = "vector" if e.kernel.engine == Engine.SFU else e.kernel.engine  # one curve for both
            ratios.setdefault(op, []).append(n.time_s / work_s)  # node times exclude dispatch
    engine_ratio = {
        eng: float(np.median([r for op, values in ratios.items() if engine_of[op] == eng for r in values]))
        for eng in set(engine_of.values())
    }
    out = {}
    for op, values in ratios.items():
        ratio = float(np.median(values)) / max(engine_ratio[engine_of[op]], 1e-12)
        if len(values) >= OP_SCALE_MIN_SAMPLES and ratio > 0 and abs(np.log(ratio)) > np.log(OP_SCALE_TRIGGER):
            scale = float(np.clip(hw.op_time_scale.get(op, 1.0) * ratio, 0.01, 1000.0))
            out[op] = (scale, len(values))
    return out


def fit_launch(results, measurements, statistic: str) -> float:
    """Per-kernel fixed cost: median over models of (measured wall - measured node time) / engine kernels.

    The median, not a pooled ratio: one long model run slowed by another process would otherwise set it."""
    per_model = []
    for result, m in zip(results, measurements):
        groups, _unmatched_s, _ = kernel_groups(result, m)
        gap = measured_latency(m, statistic) - sum(g["measured_s"] for g in groups)
        per_model.append(gap / max(len(result.kernels), 1))
    return max(float(np.median(per_model)), MIN_LAUNCH_S)


def model_errors(hw, workloads, measurements, statistic: str = "p50") -> list[float]:
    return [
        map_workload(w, hw, ORT_PLAN).totals.latency_s / measured_latency(m, statistic) - 1.0
        for w, m in zip(workloads, measurements)
    ]


def _workloads(measurements):
    out = []
    for m in measurements:
        if not m.source:
            raise MapperError(
                f"calibrate: measurement of {m.model_name} has no source to re-map (measured from bytes?)"
            )
        out.append(load_workload(m.source, dict(m.dims) or None))
    return out


def _cite(tree: dict, note: str, launch: bool) -> None:
    """Each fitted value's source: the calibration, then what it was."""
    for key in CURVE_KEYS.values():
        tree["efficiency"][key]["source"] = f"{note}; was: {tree['efficiency'][key]['source']}"[:1990]
    if launch:
        tree["overhead"]["kernel_launch_s"]["source"] = (
            f"{note}; per-kernel share of measured wall time outside matched "
            f"ORT nodes; was: {tree['overhead']['kernel_launch_s']['source']}"
        )[:1990]


def calibrate(profile, measurements, statistic: str = "p50", name: str | None = None, holdout_every: int = 0) -> dict:
    """Fit the profile's efficiency curves and kernel_launch_s to `measurements`; returns the calibrated profile dict.
    `holdout_every` = k > 0 fits on all but each k-th measured kernel group (`held_back`): `held_out_kernels` scores
    the fit on those (a trace's kernels it did not fit). Then kernel_launch_s is kept: its fit (wall time less kernel
    time) would read the held-back kernels' time.

    The dict's ["calibration"] is NOT part of the profile: pop it before writing (cmd_calibrate does)."""
    if not measurements:
        raise MapperError("calibrate: give at least one measurement to fit")
    hw = load_hardware(profile)
    workloads = _workloads(measurements)
    before = model_errors(hw, workloads, measurements, statistic)
    tree = hw.to_dict()
    for _ in range(PASSES):
        results = [map_workload(w, hw, ORT_PLAN) for w in workloads]
        scales = fit_op_scales(results, measurements, hw, holdout_every)
        if scales:  # ops the runtime runs far off the roofline get their own multiplier, not a bent curve
            table = tree["efficiency"].setdefault("op_time_scale", {})
            for op, (scale, count) in scales.items():
                table[op] = {
                    "value": scale,
                    "source": f"calibrated: median measured/predicted time of {count}"
                    f" single-op {op} kernels, mapper calibrate {date.today().isoformat()}",
                }
            hw = load_hardware(tree)
            results = [map_workload(w, hw, ORT_PLAN) for w in workloads]
        samples = [s for r, m in zip(results, measurements) for s in _samples(r, m, hw, holdout_every)]
        for curve, key in CURVE_KEYS.items():
            mine = [s for s in samples if s.curve == curve]
            if mine:
                tree["efficiency"][key]["value"] = fit_curve(tree["efficiency"][key]["value"], mine)
        if not holdout_every:  # the gap between wall time and kernel time counts every kernel, held-back ones too
            tree["overhead"]["kernel_launch_s"]["value"] = fit_launch(results, measurements, statistic)
        hw = load_hardware(tree)
    after = model_errors(hw, workloads, measurements, statistic)
    models = ", ".join(sorted({m.model_name for m in measurements}))
    med = lambda errs: float(np.median(np.abs(errs)))
    note = (
        f"calibrated: mapper calibrate {date.today().isoformat()} on {len(measurements)} measured models ({models}), "
        f"{statistic} latency, median |error| {med(before):.1%} before -> {med(after):.1%} after"
    )
    _cite(tree, note, launch=not holdout_every)
    if name:
        tree["meta"]["name"] = name
    load_hardware(tree)
    tree["calibration"] = {
        "models": [m.model_name for m in measurements],
        "date": date.today().isoformat(),
        "statistic": statistic,
        "errors_before": before,
        "errors_after": after,
        "median_abs_error_before": med(before),
        "median_abs_error_after": med(after),
        "holdout_every": holdout_every,
    }
    return tree


def held_out_kernels(original, calibrated: dict, measurements, holdout_every: int) -> dict:
    """The fit scored on what it did not see: each model's held-back kernel groups (`held_back`, the same split the
    fit used) with the original and the calibrated profile. Per group and in all: error = (predicted - measured) /
    measured; the median |error| over groups and the error of their summed time (JSON-ready)."""
    if holdout_every < 2:  # noqa: PLR2004 - every group held back (1) would leave nothing to fit
        raise MapperError(f"calibrate: --holdout-every {holdout_every}: hold back every k-th kernel group, k >= 2")
    profiles = (load_hardware(original), load_hardware({k: v for k, v in calibrated.items() if k != "calibration"}))
    rows = []
    for workload, m in zip(_workloads(measurements), measurements):
        before, after = (kernel_groups(map_workload(workload, hw, ORT_PLAN), m)[0] for hw in profiles)
        predicted_after = {g["kernels"][0]: g["predicted_s"] for g in after}
        for i, g in enumerate(before):
            if held_back(i, holdout_every) and g["measured_s"] > 0:
                rows.append(
                    {
                        "model": m.model_name,
                        "kernel": g["kernels"][0],
                        "layer_type": g["layer_type"],
                        "measured_s": g["measured_s"],
                        "predicted_before_s": g["predicted_s"],
                        "predicted_after_s": predicted_after.get(g["kernels"][0], g["predicted_s"]),
                    }
                )
    for r in rows:
        r["error_before"] = r["predicted_before_s"] / r["measured_s"] - 1.0
        r["error_after"] = r["predicted_after_s"] / r["measured_s"] - 1.0
    measured = sum(r["measured_s"] for r in rows)
    total = lambda key: sum(r[key] for r in rows) / measured - 1.0 if measured > 0 else None
    median = lambda key: float(np.median([abs(r[key]) for r in rows])) if rows else None
    return {
        "split": f"every {holdout_every}th measured kernel group of each model, in the mapping's order, held back",
        "kernel_groups": len(rows),
        "measured_s": measured,
        "median_abs_error_before": median("error_before"),
        "median_abs_error_after": median("error_after"),
        "total_error_before": total("predicted_before_s"),
        "total_error_after": total("predicted_after_s"),
        "groups": rows,
    }


def holdout_report(original, calibrated: dict, measurements, statistic: str = "p50") -> list[dict]:
    """Error on held-out models with the original and the calibrated profile."""
    profile = {k: v for k, v in calibrated.items() if k != "calibration"}
    workloads = _workloads(measurements)
    before = model_errors(load_hardware(original), workloads, measurements, statistic)
    after = model_errors(load_hardware(profile), workloads, measurements, statistic)
    return [
        {"model": m.model_name, "measured_s": measured_latency(m, statistic), "error_before": b, "error_after": a}
        for m, b, a in zip(measurements, before, after)
    ]
