"""Probe this machine: micro-benchmarks -> a hardware profile TOML in the data/hardware format.

Evidence stage one (docs/manual.md, "Evidence"). GEMM rate per dtype and size (ONNX Runtime MatMul / MatMulInteger, the
kernels the measured runs use), stream bandwidth (numpy copy/add of arrays far larger than the LLC),
cache sizes from the OS, ONNX Runtime's per-node dispatch cost (a chain of N tiny Adds against one).
Every measured value's source says how it was measured; what cannot be measured keeps cpu-x86's figure.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.extras import require
from mapper.evidence.profile_toml import write_toml
from mapper.hardware.load import load_hardware

# Sizes the probe sweeps (full mode / quick mode). The GEMM sweep gives efficiency against FLOPs.
GEMM_SIZES = (32, 64, 128, 256, 512, 1024, 2048)
GEMM_SIZES_QUICK = (32, 128, 512)
STREAM_BYTES = 256 << 20  # 256 MiB per array: 8x a 32 MiB LLC, so every pass goes to DRAM
STREAM_BYTES_QUICK = 64 << 20
DISPATCH_CHAIN = 200  # tiny Add nodes in the dispatch-cost chain
DVFS_WARMUP_S = 0.2
SMALL_GEMM_N = 256  # n^3 MatMuls up to this size take well under 1 ms (2*256^3 FLOPs at tens of GFLOP/s):
# each is repeated for at least 50 ms so the best time is not one noisy call
AVX512_FP32_LANES = 16  # fp32 lanes of one 512-bit AVX-512 FMA (Intel SDM vol. 1, ch. 15)
AVX2_FP32_LANES = 8  # and of one 256-bit AVX2 FMA
PRIVATE_CACHE_LEVEL = 2  # the cache level (/sys/.../cache/indexN/level) private to one x86 core: its L2


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
    ort = require("onnxruntime", "probe_machine")  # the `measure` extra

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
    feeds: dict[str, np.ndarray]
    if integer:
        feeds = {"a": rng.integers(0, 255, (n, n), dtype=np.uint8)}
    else:
        feeds = {"a": rng.standard_normal((n, n), dtype=np.float32), "b": rng.standard_normal((n, n), dtype=np.float32)}
    best = _best_of(lambda: sess.run(None, feeds), repeats, min_time_s=0.05 if n <= SMALL_GEMM_N else 0.0)
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


@dataclass(frozen=True, slots=True)
class _Probed:
    """What one probe measured; the profile's sections are filled from it."""

    tag: str  # how the run was made, cited in every measured source
    today: str
    quick: bool
    facts: dict
    sizes: tuple[int, ...]
    rates: dict[int, float]  # ORT MatMul fp32 OP/s by n
    peak: float
    int8: float
    dispatch: float
    dram: float
    l2_bw: float
    vector: float
    exp_rate: float
    caches: dict[int, int]
    dram_points: list[tuple[float, float]]

    @property
    def int8_n(self) -> int:
        return 512 if self.quick else 1024

    @property
    def chain(self) -> int:
        return 40 if self.quick else DISPATCH_CHAIN

    @property
    def stream_bytes(self) -> int:
        return STREAM_BYTES_QUICK if self.quick else STREAM_BYTES


def _measure(quick: bool) -> _Probed:
    """Run every micro-benchmark, in this order (the clock settles first)."""
    today = date.today().isoformat()
    tag = f"mapper probe{' (quick)' if quick else ''}, 1 thread, {today}"
    facts = _cpu_facts()
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
    dram_points: list[tuple[float, float]] = []
    for nbytes in (4 << 10, 64 << 10, 1 << 20, 16 << 20) if not quick else (64 << 10, 1 << 20):
        a, c = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
        best = _best_of(lambda c=c, a=a: np.copyto(c, a), 20, min_time_s=0.02)
        dram_points.append((2 * nbytes, 2 * nbytes / (best + dispatch) / dram))
    dram_points.append((2.0 * (STREAM_BYTES_QUICK if quick else STREAM_BYTES), 1.0))
    return _Probed(
        tag, today, quick, facts, sizes, rates, peak, int8, dispatch, dram, l2_bw, vector, exp_rate, caches, dram_points
    )


def _fill_compute(comp: dict, m: _Probed) -> None:
    lanes = AVX512_FP32_LANES if m.facts["avx512"] else AVX2_FP32_LANES
    comp["compute_units"] = {"value": 1, "source": "one thread (the probe and measure_model run ORT with 1 thread)"}
    if m.facts["mhz"]:
        comp["clock_hz"] = {"value": m.facts["mhz"] * 1e6, "source": f"/proc/cpuinfo cpu MHz at probe time, {m.today}"}
    comp["matrix_instruction_m"] = {
        "value": lanes,
        "source": f"one {'512' if lanes == AVX512_FP32_LANES else '256'}-bit FMA = {lanes} fp32 lanes "
        "(/proc/cpuinfo flags)",
    }
    comp["matrix_peak_flops_per_s"] = {
        "fp32": {
            "value": m.peak,
            "source": f"measured: {m.tag}, ORT MatMul fp32 best rate over n^3 sweep {list(m.sizes)} (best of 5); "
            "achieved, not the FMA datasheet peak",
        },
        "int8": {
            "value": max(m.int8, m.peak),
            "source": f"measured: {m.tag}, ORT MatMulInteger uint8 x constant int8 {m.int8_n}^3 best of 3 "
            f"({m.int8:.3g} OP/s; floored at the fp32 rate)",
        },
    }
    # The SIMD FMA units that run the GEMM are the vector units: numpy's elementwise rate ({vector:.3g}) is bound by
    # its per-call overhead and by L1/L2, not by the FMAs, so the GEMM rate is the better figure for the peak.
    comp["vector_peak_flops_per_s"] = {
        "fp32": {
            "value": max(m.peak, m.vector),
            "source": f"measured: {m.tag}, the ORT MatMul fp32 rate (the same SIMD FMA units; numpy fp32 "
            f"multiply+add of L2-resident arrays reached only {m.vector:.3g})",
        }
    }
    comp["sfu_peak_ops_per_s"] = {
        "value": m.exp_rate,
        "source": f"measured: {m.tag}, numpy fp32 exp of 16384 elements, best of 200",
    }
    kept = comp["sram_bytes_per_clock_per_unit"]
    kept["source"] = "cpu-x86 value kept (not probed): " + kept["source"]


def _fill_memory(mem: dict, m: _Probed) -> None:
    caches = m.caches
    if PRIVATE_CACHE_LEVEL in caches:
        mem["sram_per_unit_bytes"] = {
            "value": caches[PRIVATE_CACHE_LEVEL],
            "source": f"/sys/devices/system/cpu/cpu0/cache L2 size (private per core), {m.today}",
        }
    llc = caches.get(max(caches)) if caches else None
    if llc:
        mem["l2_bytes"] = {
            "value": llc,
            "source": f"/sys/devices/system/cpu/cpu0/cache L{max(caches)} size (last level, all of it available "
            f"to one thread), {m.today}",
        }
    mem["l2_bandwidth_bytes_per_s"] = {
        "value": m.l2_bw,
        "source": f"measured: {m.tag}, numpy copy/add of 256 KiB arrays (cache-resident), best of 50",
    }
    mem["dram_bandwidth_bytes_per_s"] = {
        "value": m.dram,
        "source": f"measured: {m.tag}, numpy copy (2x bytes) and add (3x bytes) of {m.stream_bytes >> 20} MiB "
        "arrays, best",
    }
    if m.facts["mem_bytes"]:
        mem["dram_bytes"] = {"value": m.facts["mem_bytes"], "source": f"/proc/meminfo MemTotal, {m.today}"}


def _fill_overhead_and_efficiency(over: dict, eff: dict, m: _Probed) -> None:
    over["kernel_launch_s"] = {
        "value": m.dispatch,
        "source": f"measured: {m.tag}, ORT CPU per-node dispatch = (chain of {m.chain} 16-element Adds - 1 Add)"
        "/(N-1), optimizations off, best of 20",
    }
    over["host_op_s"] = {
        "value": m.dispatch,
        "source": "the CPU is the host: a fallback op costs one dispatch (kernel_launch_s, measured)",
    }
    eff["matrix_by_flops"] = {
        "value": _curve([(2.0 * n**3, r / m.peak) for n, r in m.rates.items()]),
        "source": f"measured: {m.tag}, ORT MatMul fp32 rate at n^3 for n in {list(m.sizes)} / best rate",
    }
    eff["dram_by_bytes"] = {
        "value": _curve(m.dram_points),
        "source": f"measured: {m.tag}, numpy copy rate incl. one ORT dispatch at 4 KiB-16 MiB / stream rate "
        "(cache-resident sizes clamp at 1)",
    }
    eff["vector_by_bytes"]["source"] = "cpu-x86 assumption kept (not probed): " + eff["vector_by_bytes"]["source"]
    eff["overlap_exponent"]["source"] = "cpu-x86 value kept (not probed): " + eff["overlap_exponent"]["source"]


def _fill_power(power: dict, m: _Probed) -> None:
    peak, int8 = m.peak, m.int8
    e_flop = (power["tdp_w"]["value"] - power["idle_w"]["value"] - 1.0) / (0.85 * peak)
    power["energy_per_flop_j"] = {
        "fp32": {
            "value": e_flop,
            "source": f"derived from cpu-x86's assumed power with the measured peak: (TDP-idle-1 W)/(0.85*{peak:.3g})",
        },
        "int8": {"value": e_flop * peak / max(int8, peak), "source": "derived: same power at the measured int8 rate"},
    }


def probe_machine(out_path: str | os.PathLike | None = None, quick: bool = False, name: str = "probed-cpu") -> dict:
    """Measure this machine (1 thread) and return (and write, if `out_path`) a profile dict in the TOML shape."""
    started = time.perf_counter()
    m = _measure(quick)
    today, facts = m.today, m.facts
    profile = load_hardware("cpu-x86").to_dict()
    meta = profile["meta"]
    meta.update(
        name=name,
        display_name=f"{facts['model']} (one thread, probed {today})",
        kind="cpu",
        vendor=facts["model"].split()[0] if facts["model"] != "unknown CPU" else "unknown",
    )
    _fill_compute(profile["compute"], m)
    _fill_memory(profile["memory"], m)
    _fill_overhead_and_efficiency(profile["overhead"], profile["efficiency"], m)
    power = profile["power"]
    _fill_power(power, m)
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
