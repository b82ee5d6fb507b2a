"""Time GEMMs, attention and normalization kernels on a real GPU with PyTorch (CUDA events) -> CSV.

Ready for the minutes a GPU machine is lent (see DEVELOPERS.md): one command measures every shape,
then `bench/compare_gpu.py` sets the CSV against the engine's predictions for the matching profile.

    python3 bench/gpu_kernels.py --out $OUT/gpu_kernels.csv --power $OUT/power.csv   # ~2-4 minutes on an H200
    python3 bench/gpu_kernels.py --quick --out /tmp/k.csv               # a handful of shapes
    python3 bench/gpu_kernels.py --device cpu --quick --out /tmp/k.csv  # check the script itself, no GPU

How each row is timed:
- inputs are rotated over enough copies that each call reads operands no earlier call left in L2 (the
  copies together hold >= 2x the L2, as a model's layers hold distinct weights): DRAM-cold, as the engine
  counts a kernel's compulsory DRAM traffic;
- `median_s`, `best_s`: CUDA events around each eagerly launched call (launch latency included), the
  median and best over `--repeats` after warm-up;
- `graph_s`: the calls captured in one CUDA graph, replayed, events around the whole replay, divided by
  the calls (the GPU's time a kernel with back-to-back launches), median of 5 replays.
FLOPs (2 x MACs) and bytes (inputs + outputs once) are counted exactly as the engine counts them.
`--power` samples the board's power (NVML through torch) while a large GEMM and a streaming add run for
a few seconds each, and at rest: the figures behind the profile's energy per FLOP, per byte and idle.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time

# Generic grid (bf16 and fp16), with the wave-quantization pairs (132 tiles against 133 on an H100/H200).
GEMM_SIZES = [(m, n, k) for m in (128, 1024, 4096, 8192) for n in (1024, 4096, 8192) for k in (1024, 4096, 8192)]
GEMM_SIZES += [
    (1, 4096, 4096),
    (1, 11008, 4096),
    (16, 4096, 4096),
    (1408, 3072, 4096),
    (1408, 3073, 4096),
    (1536, 2816, 8192),
    (1537, 2816, 8192),
    (8192, 8192, 8192),
]
# Model-shaped GEMMs (bf16): one layer's projections as (n, k) at several token counts m.
MODEL_GEMMS = {
    "llama2-7b": [(12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008)],  # qkv, o, gate+up, down
    "llama2-70b-tp8": [(1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584)],  # the rank's share, GQA 8 kv heads
}
MODEL_TOKENS = (1, 8, 32, 128, 512, 2048, 8192)
BERT_GEMMS = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]  # qkv, o, up, down
BERT_TOKENS = (512, 4096, 16384)
# Leading dimensions off the 16-byte alignment Hopper's TMA-fed kernels need, beside aligned twins
# (GPT-2's vocabulary, 50257, against nanoGPT's padded 50304).
ALIGN_GEMMS = [(1408, n, 4096) for n in (3073, 3074, 3076, 3080)] + [(1408, 3072, 4097), (1408, 3072, 4104)]
ALIGN_GEMMS += [(m, n, 768) for m in (1, 512, 8192) for n in (50257, 50304)]
FP8_GEMMS = [(m, n, k) for m in (128, 1024, 4096, 8192) for n, k in ((4096, 4096), (8192, 8192))] + [
    (m, n, k) for m in (16, 128, 2048, 8192) for n, k in MODEL_GEMMS["llama2-7b"]
]
# (batch, heads, seq, head_dim): prefill attention, q = k = v length
ATTENTION = [(16384 // s, 16, s, 128) for s in (512, 1024, 2048, 4096, 8192, 16384)] + [
    (8, 12, 512, 64),
    (1, 32, 2048, 128),
]
# (batch, heads, past, head_dim): one decode step's attention, one query per sequence over the KV cache
DECODE = [(b, 32, past, 128) for b in (1, 8, 32) for past in (512, 2048, 8192)]
# few sequences over long caches: where a kernel must split the cache across SMs to fill them (flash-decoding)
DECODE += [(b, h, past, 128) for b in (1, 2, 4) for h in (8, 32) for past in (1024, 4096, 16384, 32768)]
NORMS = [(rows, cols) for rows in (1024, 8192, 32768) for cols in (768, 4096, 8192)]
NORMS += [(1, 256), (1, 4096), (64, 4096), (64, 8192)]  # launch floors and decode-sized rows
QUICK = {
    "gemm": [(1024, 1024, 1024), (4096, 4096, 4096), (1408, 3072, 4096), (1408, 3073, 4096)],
    "attention": [(32, 16, 512, 128), (2, 16, 8192, 128)],
    "decode": [(8, 32, 2048, 128)],
    "norm": [(8192, 4096)],
}
L2_BYTES = 60 << 20  # H200's L2 as PyTorch reports it; the copies hold >= 2x this
MAX_COPIES = 32
GRAPH_TARGET_S = 3e-3  # one replay runs about this long (enough calls to swamp the replay's own launch)
FIELDS = [
    "kind",
    "shape",
    "dtype",
    "median_s",
    "best_s",
    "graph_s",
    "flops",
    "bytes",
    "tflops_per_s",
    "gb_per_s",
    "copies",
    "impl",
    "device",
    "torch",
    "cuda",
]


class Case:
    """One measurement: `make()` gives one copy of the inputs, `fn(inputs)` runs the kernel on them."""

    def __init__(self, kind, shape, dtype_name, make, fn, flops, nbytes, impl="torch"):
        self.kind, self.shape, self.dtype_name = kind, shape, dtype_name
        self.make, self.fn, self.flops, self.bytes, self.impl = make, fn, flops, nbytes, impl


def _gemm_cases(torch, device, dtype_name, sizes):
    dtype = getattr(torch, dtype_name)
    size = torch.empty((), dtype=dtype).element_size()
    for m, n, k in sizes:

        def make(m=m, n=n, k=k):
            return torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)

        yield Case(
            "gemm",
            f"{m}x{n}x{k}",
            dtype_name,
            make,
            lambda a: a[0] @ a[1],
            2 * m * n * k,
            (m * k + k * n + m * n) * size,
        )


def _attention_cases(torch, device, dtype_name, shapes, decode_shapes):
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    size = torch.empty((), dtype=dtype).element_size()
    for batch, heads, seq, d in shapes:

        def make(shape=(batch, heads, seq, d)):
            return tuple(torch.randn(*shape, device=device, dtype=dtype) for _ in range(3))

        flops = 4 * batch * heads * seq * seq * d
        io = 4 * batch * heads * seq * d * size
        text = f"{batch}x{heads}x{seq}x{d}"
        yield Case("attention-fused", text, dtype_name, make, lambda a: F.scaled_dot_product_attention(*a), flops, io)
        if batch * heads * seq * seq * size <= 8 << 30:  # the unfused S x S scores must fit in memory

            def naive(a, d=d):
                q, k, v = a
                return torch.softmax((q @ k.transpose(-1, -2)) * d**-0.5, dim=-1) @ v

            yield Case(
                "attention-unfused", text, dtype_name, make, naive, flops, io + 4 * batch * heads * seq**2 * size
            )
    for batch, heads, past, d in decode_shapes:

        def make(batch=batch, heads=heads, past=past, d=d):
            q = torch.randn(batch, heads, 1, d, device=device, dtype=dtype)
            return (q, *(torch.randn(batch, heads, past, d, device=device, dtype=dtype) for _ in range(2)))

        yield Case(
            "attention-decode",
            f"{batch}x{heads}x{past}x{d}",
            dtype_name,
            make,
            lambda a: F.scaled_dot_product_attention(*a),
            4 * batch * heads * past * d,
            (2 * batch * heads * d + 2 * batch * heads * past * d) * size,
        )


def _row_cases(torch, device, dtype_name, shapes):
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    size = torch.empty((), dtype=dtype).element_size()
    fused_rms = hasattr(F, "rms_norm")
    for rows, cols in shapes:
        elems = rows * cols

        def make(rows=rows, cols=cols):
            return torch.randn(rows, cols, device=device, dtype=dtype), torch.ones(cols, device=device, dtype=dtype)

        def rms(a, cols=cols):
            x, w = a
            if fused_rms:
                return F.rms_norm(x, (cols,), w, 1e-6)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        text = f"{rows}x{cols}"
        yield Case(
            "layernorm",
            text,
            dtype_name,
            make,
            lambda a, c=cols: F.layer_norm(a[0], (c,), a[1]),
            8 * elems,
            2 * elems * size,
        )
        yield Case(
            "rmsnorm",
            text,
            dtype_name,
            make,
            rms,
            4 * elems,
            2 * elems * size,
            "F.rms_norm" if fused_rms else "composite",
        )
        yield Case("softmax", text, dtype_name, make, lambda a: torch.softmax(a[0], -1), 5 * elems, 2 * elems * size)

        def make_pair(rows=rows, cols=cols):
            return tuple(torch.randn(rows, cols, device=device, dtype=dtype) for _ in range(2))

        yield Case("add", text, dtype_name, make_pair, lambda a: a[0] + a[1], elems, 3 * elems * size)


def _fp8_cases(torch, device, sizes):
    """fp8 (e4m3) GEMMs through torch._scaled_mm: A row-major, B column-major, unit scales, bf16 out."""
    fp8 = torch.float8_e4m3fn
    for m, n, k in sizes:

        def make(m=m, n=n, k=k):
            one = torch.ones((), device=device, dtype=torch.float32)
            a = torch.randn(m, k, device=device).to(fp8)
            return a, torch.randn(n, k, device=device).to(fp8).t(), one

        def fn(a):
            return torch._scaled_mm(a[0], a[1], scale_a=a[2], scale_b=a[2], out_dtype=torch.bfloat16)

        yield Case(
            "gemm", f"{m}x{n}x{k}", "float8_e4m3fn", make, fn, 2 * m * n * k, m * k + k * n + 2 * m * n, "_scaled_mm"
        )


GROUPS = ("gemm", "model", "align", "fp8", "attention", "decode", "rows")


def cases(torch, device: str, quick: bool, groups=GROUPS):
    """Every measurement of the chosen groups, in the order the CSV lists them."""
    want = set(groups)
    pick = lambda group, full, short=(): (short if quick else full) if group in want else []
    gemms = pick("gemm", GEMM_SIZES, QUICK["gemm"])
    model = pick("model", [(m, n, k) for shapes in MODEL_GEMMS.values() for n, k in shapes for m in MODEL_TOKENS])
    model += pick("model", [(m, n, k) for n, k in BERT_GEMMS for m in BERT_TOKENS])
    model += pick("align", ALIGN_GEMMS)
    attn = pick("attention", ATTENTION, QUICK["attention"])
    decode = pick("decode", DECODE, QUICK["decode"])
    norms = pick("rows", NORMS, QUICK["norm"])
    dtypes = ("bfloat16", "float16") if device == "cuda" else ("float32",)  # CPU: only checks the script
    for dtype_name in dtypes:
        first = dtype_name == dtypes[0]
        yield from _gemm_cases(torch, device, dtype_name, gemms + (model if first else []))
        yield from _attention_cases(torch, device, dtype_name, attn, decode if first else [])
        yield from _row_cases(torch, device, dtype_name, norms)
    if device == "cuda" and hasattr(torch, "_scaled_mm"):
        yield from _fp8_cases(torch, device, pick("fp8", FP8_GEMMS, FP8_GEMMS[:2]))


def _copies(case_bytes: int) -> int:
    return max(1, min(MAX_COPIES, math.ceil(2 * L2_BYTES / max(case_bytes, 1))))


def _time_eager(torch, device, fn, inputs, repeats: int, warmup: int) -> list[float]:
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    times = []
    if device != "cuda":
        for i in range(repeats):
            t = time.perf_counter()
            fn(inputs[i % len(inputs)])
            times.append(time.perf_counter() - t)
        return times
    torch.cuda.synchronize()
    for i in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(inputs[i % len(inputs)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def _time_graph(torch, fn, inputs, per_call_s: float) -> float:
    """Seconds a call when `calls` calls over the rotating copies replay from one CUDA graph."""
    calls = max(len(inputs), min(200, math.ceil(GRAPH_TARGET_S / max(per_call_s, 1e-7))))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(inputs[i % len(inputs)])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(inputs[i % len(inputs)])
    graph.replay()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    del graph
    return statistics.median(times)


def measure(torch, device: str, case: Case, repeats: int) -> dict:
    copies = _copies(case.bytes) if device == "cuda" else 1
    inputs = [case.make() for _ in range(copies)]
    times = _time_eager(torch, device, case.fn, inputs, repeats, warmup=3 if device == "cuda" else 1)
    median = statistics.median(times)
    graph_s = _time_graph(torch, case.fn, inputs, median) if device == "cuda" else median
    del inputs
    return {
        "kind": case.kind,
        "shape": case.shape,
        "dtype": case.dtype_name,
        "median_s": median,
        "best_s": min(times),
        "graph_s": graph_s,
        "flops": case.flops,
        "bytes": case.bytes,
        "tflops_per_s": case.flops / graph_s / 1e12,
        "gb_per_s": case.bytes / graph_s / 1e9,
        "copies": copies,
        "impl": case.impl,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
    }


def _power_w(torch) -> float:
    return torch.cuda.power_draw() / 1e3  # NVML reports milliwatts


def idle_row(torch, seconds: float = 3.0) -> dict:
    """Board power at rest (taken before any kernel has run, so the clocks have not been raised)."""
    return {
        "load": "idle",
        "shape": "",
        "seconds": seconds,
        "mean_w": _sample(torch, None, seconds),
        "rate": 0.0,
        "unit": "",
    }


def power_rows(torch, seconds: float = 4.0) -> list[dict]:
    """Board power under a large bf16 GEMM and under a streaming add, each held `seconds`."""
    rows = []
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    x, y = (torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16) for _ in range(2))  # 512 MiB each
    for load, shape, fn, work, unit in (
        ("gemm-bf16", "8192x8192x8192", lambda: a @ b, 2 * 8192**3, "TFLOP/s"),
        ("add-bf16", f"{1 << 28}", lambda: x + y, 3 * (1 << 28) * 2, "GB/s"),
    ):
        calls = [0]

        def run(fn=fn, calls=calls):
            fn()
            calls[0] += 1

        started = time.perf_counter()
        mean_w = _sample(torch, run, seconds)
        elapsed = time.perf_counter() - started
        scale = 1e12 if unit == "TFLOP/s" else 1e9
        rows.append(
            {
                "load": load,
                "shape": shape,
                "seconds": elapsed,
                "mean_w": mean_w,
                "rate": calls[0] * work / elapsed / scale,
                "unit": unit,
            }
        )
    return rows


def _sample(torch, run, seconds: float) -> float:
    """Mean power over the last two thirds of `seconds` while `run` is called back to back (None: at rest)."""
    torch.cuda.synchronize()
    started, readings = time.perf_counter(), []
    while (now := time.perf_counter()) - started < seconds:
        if run is not None:
            for _ in range(8):
                run()
            torch.cuda.synchronize()
        else:
            time.sleep(0.02)
        if now - started > seconds / 3:
            readings.append(_power_w(torch))
    return statistics.mean(readings) if readings else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, of: {', '.join(GROUPS)}")
    parser.add_argument("--power", help="also write board power at rest and under load to this CSV (GPU only)")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; use --device cpu to check the script", file=sys.stderr)
        return 2
    idle = idle_row(torch) if args.power and args.device == "cuda" else None
    started = time.perf_counter()
    with open(args.out, "w", newline="") as handle:
        out = csv.DictWriter(handle, fieldnames=FIELDS)
        out.writeheader()
        for case in cases(torch, args.device, args.quick, args.groups.split(",")):
            try:
                row = measure(torch, args.device, case, max(3, args.repeats if args.device == "cuda" else 3))
            except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # one shape's failure keeps the others
                print(
                    f"skipped {case.kind} {case.shape} {case.dtype_name}: {str(exc).splitlines()[0]}", file=sys.stderr
                )
                continue
            finally:
                if args.device == "cuda":
                    torch.cuda.empty_cache()
            out.writerow(row)
            handle.flush()
            print(
                f"{row['kind']:18s} {row['shape']:18s} {row['dtype']:9s} eager {row['median_s'] * 1e6:9.1f} us"
                f" graph {row['graph_s'] * 1e6:9.1f} us {row['tflops_per_s']:7.1f} TFLOP/s {row['gb_per_s']:6.0f} GB/s",
                flush=True,
            )
    if args.power and args.device == "cuda":
        rows = [idle, *power_rows(torch)]
        with open(args.power, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        for r in rows:
            print(f"power {r['load']:10s} {r['mean_w']:7.1f} W  {r['rate']:8.1f} {r['unit']}")
    where = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s on {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
