"""Probe this machine: micro-benchmarks -> a hardware profile TOML in the data/hardware format.

Evidence stage one (PRIMER s9). GEMM rate per dtype and size (ONNX Runtime MatMul / MatMulInteger, the
kernels the measured runs use), stream bandwidth (numpy copy/add of arrays far larger than the LLC),
cache sizes from the OS, ONNX Runtime's per-node dispatch cost (a chain of N tiny Adds against one).
Every measured value's source says how it was measured; what cannot be measured keeps cpu-x86's figure.
"""

from __future__ import annotations

import json
import os
import time
from datetime import date
from pathlib import Path

import numpy as np

from mapper.core.errors import MapperError
from mapper.hardware.profile import load_hardware

# Sizes the probe sweeps (full mode / quick mode). The GEMM sweep gives efficiency against FLOPs.
GEMM_SIZES = (32, 64, 128, 256, 512, 1024, 2048)
GEMM_SIZES_QUICK = (32, 128, 512)
STREAM_BYTES = 256 << 20  # 256 MiB per array: 8x a 32 MiB LLC, so every pass goes to DRAM
STREAM_BYTES_QUICK = 64 << 20
DISPATCH_CHAIN = 200  # tiny Add nodes in the dispatch-cost chain
DVFS_WARMUP_S = 0.2
SECTION_ORDER = ("meta", "compute", "memory", "overhead", "power", "interconnect", "efficiency", "layout", "serving")


def _best_of(fn, repeats: int, min_time_s: float = 0.0) -> float:
    """Best wall time of fn() over `repeats` calls (noise from other processes only ever adds time)."""
    fn()
    best = float("inf")
    start = time.perf_counter()
    count = 0
    while count < repeats or time.perf_counter() - start < min_time_s:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        count += 1
        if count >= 50 * repeats:
            break
    return best


def _ort_session(model, threads: int = 1, optimize: bool = True):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _matmul_model(n: int, integer: bool):
    """One n^3 GEMM. The integer one multiplies uint8 activations by a constant int8 weight, as a
    quantized model does: ONNX Runtime prepacks constant weights (u8 x s8, VNNI where the CPU has it),
    2.6x the rate of two uint8 activations on the machine this was written on."""
    from onnx import TensorProto, helper, numpy_helper

    if integer:
        weight = numpy_helper.from_array(np.random.default_rng(n).integers(-127, 128, (n, n), dtype=np.int8), "b")
        node = helper.make_node("MatMulInteger", ["a", "b"], ["c"], name="gemm")
        graph = helper.make_graph(
            [node],
            "probe_gemm",
            [helper.make_tensor_value_info("a", TensorProto.UINT8, [n, n])],
            [helper.make_tensor_value_info("c", TensorProto.INT32, [n, n])],
            [weight],
        )
    else:
        node = helper.make_node("MatMul", ["a", "b"], ["c"], name="gemm")
        graph = helper.make_graph(
            [node],
            "probe_gemm",
            [
                helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n]),
            ],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
        )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _add_chain_model(count: int, elements: int):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Add", [f"t{i}", "x"], [f"t{i + 1}"], name=f"add{i}") for i in range(count)]
    graph = helper.make_graph(
        nodes,
        "probe_dispatch",
        [
            helper.make_tensor_value_info("t0", TensorProto.FLOAT, [elements]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [elements]),
        ],
        [helper.make_tensor_value_info(f"t{count}", TensorProto.FLOAT, [elements])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def measure_gemm(n: int, integer: bool = False, repeats: int = 5) -> float:
    """Achieved OPS/s of one n^3 ORT MatMul (fp32) or MatMulInteger (uint8 x constant int8), 1 thread,
    best of `repeats`."""
    sess = _ort_session(_matmul_model(n, integer))
    rng = np.random.default_rng(n)
    if integer:
        feeds = {"a": rng.integers(0, 255, (n, n), dtype=np.uint8)}
    else:
        feeds = {"a": rng.standard_normal((n, n), dtype=np.float32), "b": rng.standard_normal((n, n), dtype=np.float32)}
    best = _best_of(lambda: sess.run(None, feeds), repeats, min_time_s=0.05 if n <= 256 else 0.0)
    return 2.0 * n**3 / best


def measure_dispatch_s(chain: int = DISPATCH_CHAIN) -> float:
    """ORT per-node cost: (chain of `chain` 16-element Adds - one Add) / (chain - 1), graph optimizations off."""
    feeds = {"t0": np.ones(16, np.float32), "x": np.ones(16, np.float32)}
    times = []
    for count in (1, chain):
        sess = _ort_session(_add_chain_model(count, 16), optimize=False)
        times.append(_best_of(lambda sess=sess: sess.run(None, feeds), 20, min_time_s=0.1))
    return max((times[1] - times[0]) / (chain - 1), 1e-8)


def measure_stream(nbytes: int, repeats: int = 3) -> float:
    """Best single-thread DRAM bandwidth in B/s of numpy copy (2 x bytes) and add (3 x bytes)."""
    n = nbytes // 4
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
    copy = _best_of(lambda: np.copyto(c, a), repeats)
    add = _best_of(lambda: np.add(a, b, out=c), repeats)
    return max(2 * nbytes / copy, 3 * nbytes / add)


def measure_vector(elements: int = 16384, repeats: int = 200) -> tuple[float, float]:
    """(FLOP/s of an L1/L2-resident fp32 multiply-add, exp results/s) in numpy, 1 thread."""
    a, b, c = (np.full(elements, 0.5, np.float32) for _ in range(3))
    fma = _best_of(lambda: (np.multiply(a, b, out=c), np.add(c, a, out=c)), repeats)
    exp = _best_of(lambda: np.exp(a, out=c), repeats)
    return 2 * elements / fma, elements / exp


def cache_sizes() -> dict[int, int]:
    """Cache level -> bytes of cpu0's data/unified caches, from /sys (Linux); {} where unavailable."""
    sizes = {}
    for folder in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            kind = (folder / "type").read_text().strip()
            level = int((folder / "level").read_text())
            text = (folder / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes[level] = int(text.rstrip("KMG")) * scale
    return sizes


def _cpu_facts() -> dict:
    facts = {"model": "unknown CPU", "mhz": 0.0, "avx512": False, "mem_bytes": 0}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and facts["model"] == "unknown CPU":
                facts["model"] = value.strip()
            elif key == "cpu MHz" and not facts["mhz"]:
                facts["mhz"] = float(value)
            elif key == "flags":
                facts["avx512"] = "avx512f" in value.split()
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                facts["mem_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return facts


def _curve(points: list[tuple[float, float]]) -> list[list[float]]:
    """Measured (size, rate/peak) points -> a valid curve: ascending, efficiency in (0, 1]."""
    return [[float(x), float(min(max(e, 1e-3), 1.0))] for x, e in sorted(points)]


def probe_machine(out_path: str | os.PathLike | None = None, quick: bool = False, name: str = "probed-cpu") -> dict:
    """Measure this machine (1 thread) and return (and write, if `out_path`) a profile dict in the TOML shape."""
    started = time.perf_counter()
    today = date.today().isoformat()
    tag = f"mapper probe{' (quick)' if quick else ''}, 1 thread, {today}"
    facts = _cpu_facts()
    base = load_hardware("cpu-x86").to_dict()
    sizes = GEMM_SIZES_QUICK if quick else GEMM_SIZES
    t_end = time.perf_counter() + DVFS_WARMUP_S
    while time.perf_counter() < t_end:  # let the clock settle before timing
        np.dot(np.ones((256, 256), np.float32), np.ones((256, 256), np.float32))
    rates = {n: measure_gemm(n, repeats=3 if quick else 5) for n in sizes}
    peak = max(rates.values())
    int8 = measure_gemm(512 if quick else 1024, integer=True, repeats=3)
    dispatch = measure_dispatch_s(40 if quick else DISPATCH_CHAIN)
    dram = measure_stream(STREAM_BYTES_QUICK if quick else STREAM_BYTES)
    l2_bw = measure_stream(256 << 10, repeats=50)  # 256 KiB arrays: resident in the 1 MiB-class L2
    vector, exp_rate = measure_vector()
    caches = cache_sizes()
    # Efficiency of small copies/adds relative to the stream figure: bytes moved per ORT-free numpy call.
    dram_points = []
    for nbytes in (4 << 10, 64 << 10, 1 << 20, 16 << 20) if not quick else (64 << 10, 1 << 20):
        a, c = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
        best = _best_of(lambda c=c, a=a: np.copyto(c, a), 20, min_time_s=0.02)
        dram_points.append((2 * nbytes, 2 * nbytes / (best + dispatch) / dram))
    dram_points.append((2.0 * (STREAM_BYTES_QUICK if quick else STREAM_BYTES), 1.0))
    profile = base
    meta = profile["meta"]
    meta.update(
        name=name,
        display_name=f"{facts['model']} (one thread, probed {today})",
        kind="cpu",
        vendor=facts["model"].split()[0] if facts["model"] != "unknown CPU" else "unknown",
    )
    comp, mem, over = profile["compute"], profile["memory"], profile["overhead"]
    lanes = 16 if facts["avx512"] else 8
    comp["compute_units"] = {"value": 1, "source": "one thread (the probe and measure_model run ORT with 1 thread)"}
    if facts["mhz"]:
        comp["clock_hz"] = {"value": facts["mhz"] * 1e6, "source": f"/proc/cpuinfo cpu MHz at probe time, {today}"}
    comp["matrix_instruction_m"] = {
        "value": lanes,
        "source": f"one {'512' if lanes == 16 else '256'}-bit FMA = {lanes} fp32 lanes (/proc/cpuinfo flags)",
    }
    comp["matrix_peak_flops_per_s"] = {
        "fp32": {
            "value": peak,
            "source": f"measured: {tag}, ORT MatMul fp32 best rate over n^3 sweep {list(sizes)} (best of 5); achieved, not the FMA datasheet peak",
        },
        "int8": {
            "value": max(int8, peak),
            "source": f"measured: {tag}, ORT MatMulInteger uint8 x constant int8 {512 if quick else 1024}^3 best of 3 ({int8:.3g} OP/s; floored at the fp32 rate)",
        },
    }
    # The SIMD FMA units that run the GEMM are the vector units: numpy's elementwise rate ({vector:.3g}) is bound by
    # its per-call overhead and by L1/L2, not by the FMAs, so the GEMM rate is the better figure for the peak.
    comp["vector_peak_flops_per_s"] = {
        "fp32": {
            "value": max(peak, vector),
            "source": f"measured: {tag}, the ORT MatMul fp32 rate (the same SIMD FMA units; numpy fp32 multiply+add of L2-resident arrays reached only {vector:.3g})",
        }
    }
    comp["sfu_peak_ops_per_s"] = {
        "value": exp_rate,
        "source": f"measured: {tag}, numpy fp32 exp of 16384 elements, best of 200",
    }
    if 2 in caches:
        mem["sram_per_unit_bytes"] = {
            "value": caches[2],
            "source": f"/sys/devices/system/cpu/cpu0/cache L2 size (private per core), {today}",
        }
    llc = caches.get(max(caches)) if caches else None
    if llc:
        mem["l2_bytes"] = {
            "value": llc,
            "source": f"/sys/devices/system/cpu/cpu0/cache L{max(caches)} size (last level, all of it available to one thread), {today}",
        }
    mem["l2_bandwidth_bytes_per_s"] = {
        "value": l2_bw,
        "source": f"measured: {tag}, numpy copy/add of 256 KiB arrays (cache-resident), best of 50",
    }
    mem["dram_bandwidth_bytes_per_s"] = {
        "value": dram,
        "source": f"measured: {tag}, numpy copy (2x bytes) and add (3x bytes) of {(STREAM_BYTES_QUICK if quick else STREAM_BYTES) >> 20} MiB arrays, best",
    }
    if facts["mem_bytes"]:
        mem["dram_bytes"] = {"value": facts["mem_bytes"], "source": f"/proc/meminfo MemTotal, {today}"}
    over["kernel_launch_s"] = {
        "value": dispatch,
        "source": f"measured: {tag}, ORT CPU per-node dispatch = (chain of {40 if quick else DISPATCH_CHAIN} 16-element Adds - 1 Add)/(N-1), optimizations off, best of 20",
    }
    over["host_op_s"] = {
        "value": dispatch,
        "source": "the CPU is the host: a fallback op costs one dispatch (kernel_launch_s, measured)",
    }
    eff = profile["efficiency"]
    eff["matrix_by_flops"] = {
        "value": _curve([(2.0 * n**3, r / peak) for n, r in rates.items()]),
        "source": f"measured: {tag}, ORT MatMul fp32 rate at n^3 for n in {list(sizes)} / best rate",
    }
    eff["dram_by_bytes"] = {
        "value": _curve(dram_points),
        "source": f"measured: {tag}, numpy copy rate incl. one ORT dispatch at 4 KiB-16 MiB / stream rate (cache-resident sizes clamp at 1)",
    }
    eff["vector_by_bytes"]["source"] = "cpu-x86 assumption kept (not probed): " + eff["vector_by_bytes"]["source"]
    power = profile["power"]
    e_flop = (power["tdp_w"]["value"] - power["idle_w"]["value"] - 1.0) / (0.85 * peak)
    power["energy_per_flop_j"] = {
        "fp32": {
            "value": e_flop,
            "source": f"derived from cpu-x86's assumed power with the measured peak: (TDP-idle-1 W)/(0.85*{peak:.3g})",
        },
        "int8": {"value": e_flop * peak / max(int8, peak), "source": "derived: same power at the measured int8 rate"},
    }
    for key in ("tdp_w", "idle_w"):
        power[key]["source"] = "not measured by the probe, cpu-x86 value kept: " + power[key]["source"]
    load_hardware(profile)  # validates; a bad measurement is an error here, not in someone's mapping later
    elapsed = time.perf_counter() - started
    if out_path is not None:
        header = (
            f"# {meta['display_name']}: measured by `mapper probe` in {elapsed:.1f} s on {today}.\n"
            f"# Format: data/hardware/README.md. Unmeasured values keep cpu-x86's figures (their sources say so).\n\n"
        )
        try:
            Path(out_path).write_text(header + write_toml(profile))
        except OSError as exc:
            raise MapperError(f"probe: cannot write {out_path} ({exc.strerror}); check the folder exists") from None
    return profile


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not np.isfinite(value):
            raise MapperError(f"probe: non-finite value {value!r} cannot be written to a profile")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise MapperError(f"probe: cannot write a {type(value).__name__} to TOML")


def write_toml(tree: dict, prefix: str = "") -> str:
    """A profile dict -> TOML text: sections per table, `{ value, source }` entries inline."""
    lines, subtables = [], []
    if not prefix:  # the section order of data/hardware/*.toml
        tree = {k: tree[k] for k in SECTION_ORDER if k in tree} | {
            k: v for k, v in tree.items() if k not in SECTION_ORDER
        }
    for key, value in tree.items():
        if isinstance(value, dict) and "value" not in value:
            subtables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    text = (f"[{prefix}]\n" if prefix and lines else "") + "".join(line + "\n" for line in lines)
    for key, value in subtables:
        text += ("\n" if text else "") + write_toml(value, f"{prefix}.{key}" if prefix else key)
    return text
