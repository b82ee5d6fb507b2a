"""Acceptance table: whole-model latency predicted (probed profile) against measured on ONNX Runtime CPU, 1 thread,
before and after calibration, every model scored by a profile calibrated on the OTHER models (leave-one-out).

    .venv/bin/python bench/validate_cpu.py [--runs 7] [--cache bench/out/measurements.json] [--reuse] [--statistic p50]

Writes bench/out/validation.json and prints the markdown table that docs/validation.md carries.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mapper.evidence.calibrate import calibrate, holdout_report, measured_latency, model_errors
from mapper.evidence.measure import Measurement, measure_model
from mapper.evidence.probe import probe_machine


def light_models() -> list[tuple[str, dict | None]]:
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return [(p, None) for p in sorted(glob.glob(str(folder / "*.onnx")))]


ZOO = [("resnet50", {"batch": 1}), ("mobilenetv2", {"batch": 1}), ("bert-base", {"batch": 1, "seq": 32})]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--reuse", action="store_true", help="reuse the cached probe and measurements")
    ap.add_argument("--statistic", default="p50", choices=("p50", "min"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    profile_path, cache = out / "probed-cpu.toml", out / "measurements.json"
    t0 = time.perf_counter()
    if not (args.reuse and profile_path.exists()):
        probe_machine(profile_path)
    print(f"probe: {time.perf_counter() - t0:.1f} s -> {profile_path}", file=sys.stderr)
    if args.reuse and cache.exists():
        measurements = [Measurement.from_dict(d) for d in json.loads(cache.read_text())]
    else:
        measurements = []
        for source, dims in light_models() + ZOO:
            t1 = time.perf_counter()
            measurements.append(measure_model(source, dims, threads=1, runs=args.runs))
            print(
                f"measured {measurements[-1].model_name}: p50 {measurements[-1].p50_s * 1e3:.1f} ms "
                f"({time.perf_counter() - t1:.1f} s)",
                file=sys.stderr,
            )
        cache.write_text(json.dumps([m.to_dict() for m in measurements]))
    from mapper.evidence.calibrate import _workloads
    from mapper.hardware.load import load_hardware

    probed = load_hardware(profile_path)
    workloads = _workloads(measurements)
    before = model_errors(probed, workloads, measurements, args.statistic)
    rows = []
    for i, m in enumerate(measurements):  # leave-one-out: calibrate on the other 11, score this one
        train = measurements[:i] + measurements[i + 1 :]
        calibrated = calibrate(profile_path, train, statistic=args.statistic)
        held = holdout_report(profile_path, calibrated, [m], args.statistic)[0]
        label = Path(m.source).stem if m.source.endswith(".onnx") else m.source
        rows.append(
            {
                "model": label,
                "dims": dict(m.dims),
                "measured_s": measured_latency(m, args.statistic),
                "p95_s": m.percentile_s(95),
                "predicted_probed_s": held["measured_s"] * (1 + before[i]),
                "error_probed": before[i],
                "predicted_calibrated_s": held["measured_s"] * (1 + held["error_after"]),
                "error_calibrated": held["error_after"],
                "train_error_after": calibrated["calibration"]["median_abs_error_after"],
            }
        )
        print(f"{label}: probed {before[i]:+.1%}  calibrated(LOO) {held['error_after']:+.1%}", file=sys.stderr)
    med_before = float(np.median([abs(r["error_probed"]) for r in rows]))
    med_after = float(np.median([abs(r["error_calibrated"]) for r in rows]))
    summary = {
        "statistic": args.statistic,
        "runs": args.runs,
        "median_abs_error_probed": med_before,
        "median_abs_error_calibrated_loo": med_after,
        "rows": rows,
        "seconds": time.perf_counter() - t0,
        "machine": probed.display_name,
    }
    (out / "validation.json").write_text(json.dumps(summary, indent=1))
    print(
        f"| model | dims | measured {args.statistic} (ms) | p95 (ms) | predicted, probed (ms) | error | "
        f"predicted, calibrated LOO (ms) | error |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        dims = ",".join(f"{k}={v}" for k, v in r["dims"].items()) or "as file"
        print(
            f"| {r['model']} | {dims} | {r['measured_s'] * 1e3:.1f} | {r['p95_s'] * 1e3:.1f} | "
            f"{r['predicted_probed_s'] * 1e3:.1f} | {r['error_probed']:+.0%} | "
            f"{r['predicted_calibrated_s'] * 1e3:.1f} | {r['error_calibrated']:+.0%} |"
        )
    print(f"| **median abs error** | | | | | **{med_before:.0%}** | | **{med_after:.0%}** |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
