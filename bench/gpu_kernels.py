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
`--power` also writes the board's power (NVML through torch), the achieved rate and the SM clock at rest and
while each of `power_loads` (compute-bound, mixed and streaming GEMMs, fp8, fused attention, a norm, a
streaming add) runs back to back from a CUDA graph for 3 s (bench/gpu_common.py): the figures behind the
profile's idle power and energy per FLOP and per byte. `--groups ""` measures power alone.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
import time

try:
    from bench.gpu_common import at_rest, capture, event_times, graph_of, hold, parser, replay_s, write_rows
except ImportError:  # run as a script: bench/ is on the path, the repository root is not
    from gpu_common import at_rest, capture, event_times, graph_of, hold, parser, replay_s, write_rows

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
# (batch, heads, key/value heads, past, head_dim): one decode step's attention, one query a sequence over the cache
DECODE = [(b, 32, 32, past, 128) for b in (1, 8, 32) for past in (512, 2048, 8192)]
# few sequences over long caches: where a kernel must split the cache across SMs to fill them (flash-decoding)
DECODE += [(b, h, h, past, 128) for b in (1, 2, 4) for h in (8, 32) for past in (1024, 4096, 16384, 32768)]
# (batch, query heads, key/value heads, past, head_dim): grouped-query decode attention (Llama-2-70B at TP 8 and
# TP 1, Llama-3-8B), SDPA with enable_gqa
DECODE_GQA = [(b, hq, hkv, past, 128) for hq, hkv in ((8, 1), (64, 8), (32, 8)) for b in (1, 8, 32, 64)
              for past in (1024, 4096, 16384)]  # fmt: skip
NORMS = [(rows, cols) for rows in (1024, 8192, 32768) for cols in (768, 4096, 8192)]
NORMS += [(1, 256), (1, 4096), (64, 4096), (64, 8192)]  # launch floors and decode-sized rows
QUICK = {
    "gemm": [(1024, 1024, 1024), (4096, 4096, 4096), (1408, 3072, 4096), (1408, 3073, 4096)],
    "attention": [(32, 16, 512, 128), (2, 16, 8192, 128)],
    "decode": [(8, 32, 32, 2048, 128)],
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


def _attention_cases(torch, device, dtype_name, shapes):
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


def _decode_cases(torch, device, dtype_name, shapes):
    """One decode step's attention, one query a sequence over the cache: (batch, query heads, key/value heads,
    past, head_dim), each key/value head serving hq / hkv query heads (SDPA's enable_gqa where they differ)."""
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    size = torch.empty((), dtype=dtype).element_size()
    for batch, hq, hkv, past, d in shapes:

        def make(batch=batch, hq=hq, hkv=hkv, past=past, d=d):
            q = torch.randn(batch, hq, 1, d, device=device, dtype=dtype)
            return (q, *(torch.randn(batch, hkv, past, d, device=device, dtype=dtype) for _ in range(2)))

        gqa = hq != hkv
        yield Case(
            "attention-decode-gqa" if gqa else "attention-decode",
            f"{batch}x{hq}x{hkv}x{past}x{d}" if gqa else f"{batch}x{hq}x{past}x{d}",
            dtype_name,
            make,
            lambda a, gqa=gqa: F.scaled_dot_product_attention(*a, enable_gqa=gqa),
            4 * batch * hq * past * d,
            (2 * batch * hq * d + 2 * batch * hkv * past * d) * size,
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


GROUPS = ("gemm", "model", "align", "fp8", "attention", "decode", "gqa", "rows")


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
    gqa = pick("gqa", DECODE_GQA, DECODE_GQA[:1])
    norms = pick("rows", NORMS, QUICK["norm"])
    dtypes = ("bfloat16", "float16") if device == "cuda" else ("float32",)  # CPU: only checks the script
    for dtype_name in dtypes:
        first = dtype_name == dtypes[0]
        yield from _gemm_cases(torch, device, dtype_name, gemms + (model if first else []))
        yield from _attention_cases(torch, device, dtype_name, attn)
        yield from _decode_cases(torch, device, dtype_name, (decode + gqa) if first else [])
        yield from _row_cases(torch, device, dtype_name, norms)
    if device == "cuda" and hasattr(torch, "_scaled_mm"):
        yield from _fp8_cases(torch, device, pick("fp8", FP8_GEMMS, FP8_GEMMS[:2]))


def _copies(case_bytes: int) -> int:
    return max(1, min(MAX_COPIES, math.ceil(2 * L2_BYTES / max(case_bytes, 1))))


def _cycling(inputs: list):
    """A function that hands out `inputs` in turn (a graph captures each call's own set)."""
    turn = [-1]

    def next_inputs():
        turn[0] = (turn[0] + 1) % len(inputs)
        return inputs[turn[0]]

    return next_inputs


def _time_eager(torch, device, fn, inputs, repeats: int, warmup: int) -> list[float]:
    pick = _cycling(inputs)
    for _ in range(warmup):
        fn(pick())
    if device == "cuda":
        torch.cuda.synchronize()
        return event_times(torch, lambda: fn(pick()), repeats)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(pick())
        times.append(time.perf_counter() - t)
    return times


def _time_graph(torch, fn, inputs, per_call_s: float) -> float:
    """Seconds a call when `calls` calls over the rotating copies replay from one CUDA graph."""
    calls = max(len(inputs), min(200, math.ceil(GRAPH_TARGET_S / max(per_call_s, 1e-7))))
    pick = _cycling(inputs)
    graph = capture(torch, lambda: fn(pick()), calls)
    graph.replay()
    seconds = statistics.median(event_times(torch, graph.replay, 5)) / calls
    del graph
    return seconds


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


def power_loads(torch) -> list[tuple]:
    """(load, shape, fn, work a call, unit) of each held load: compute-bound, mixed and streaming GEMMs, fp8,
    fused attention, a norm and a streaming add."""
    import torch.nn.functional as F

    bf16 = torch.bfloat16
    rand = lambda *shape, dtype=bf16: torch.randn(*shape, device="cuda", dtype=dtype)
    loads = []
    for m, n, k, copies in ((8192, 8192, 8192, 1), (4096, 4096, 4096, 4), (128, 12288, 4096, 2), (1, 12288, 4096, 2)):
        pick = _cycling([(rand(m, k), rand(k, n)) for _ in range(copies)])

        def gemm(pick=pick):
            a, b = pick()
            return a @ b

        loads.append(("gemm-bf16", f"{m}x{n}x{k}", gemm, 2 * m * n * k, "TFLOP/s"))
    fp8, one = torch.float8_e4m3fn, torch.ones((), device="cuda")
    a8, b8 = rand(8192, 8192).to(fp8), rand(8192, 8192).to(fp8).t()
    loads.append(
        (
            "gemm-fp8",
            "8192x8192x8192",
            lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=bf16),
            2 * 8192**3,
            "TFLOP/s",
        )
    )
    q, k_, v = (rand(4, 16, 4096, 128) for _ in range(3))
    loads.append(
        (
            "attention-fused-bf16",
            "4x16x4096x128",
            lambda: F.scaled_dot_product_attention(q, k_, v),
            4 * 4 * 16 * 4096**2 * 128,
            "TFLOP/s",
        )
    )
    x, w = rand(32768, 8192), torch.ones(8192, device="cuda", dtype=bf16)
    loads.append(("layernorm-bf16", "32768x8192", lambda: F.layer_norm(x, (8192,), w), 2 * x.numel() * 2, "GB/s"))
    y, z = rand(1 << 28), rand(1 << 28)  # 512 MiB each
    loads.append(("add-bf16", f"{1 << 28}", lambda: y + z, 3 * (1 << 28) * 2, "GB/s"))
    return loads


def power_rows(torch, seconds: float = 3.0) -> list[dict]:
    """Board power, achieved rate and SM clock under each of `power_loads`, held `seconds` each."""
    rows = []
    for load, shape, fn, work, unit in power_loads(torch):
        got = hold(torch, fn, work / (1e12 if unit == "TFLOP/s" else 1e9), seconds)
        rows.append({"load": load, "shape": shape, "seconds": seconds, **got, "unit": unit})
        torch.cuda.empty_cache()
    return rows


L2_SIZES_MB = (4, 8, 16, 24, 32)  # buffers that stay in the 50-60 MB L2 once read


def l2_rows(torch) -> list[dict]:
    """L2 bandwidth a kernel sees: a sum over (reads) and a copy of (reads and writes) one bf16 buffer that stays
    in L2, replayed 200 times from a CUDA graph; bytes moved a call over the time a call (launch included, so
    a lower bound)."""
    rows = []
    for mb in L2_SIZES_MB:
        x = torch.randn(mb << 19, device="cuda", dtype=torch.bfloat16)  # mb MiB of bf16
        y = torch.empty_like(x)
        for op, fn, moved in (
            ("sum", lambda x=x: x.sum(), x.numel() * 2),
            ("copy", lambda x=x, y=y: y.copy_(x), x.numel() * 4),
        ):
            graph, calls = graph_of(torch, fn, 1e-3 / 200)
            per_call = min(replay_s(torch, graph) for _ in range(5)) / calls
            rows.append(
                {"op": op, "mib": mb, "calls": calls, "per_call_s": per_call, "tb_per_s": moved / per_call / 1e12}
            )
            del graph
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    parse = parser(__doc__)
    parse.add_argument("--repeats", type=int, default=20)
    parse.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, of: {', '.join(GROUPS)}")
    parse.add_argument("--power", help="also write board power at rest and under load to this CSV (GPU only)")
    parse.add_argument("--l2", help="also write the L2 bandwidth a sum and a copy see to this CSV (GPU only)")
    args = parse.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; use --device cpu to check the script", file=sys.stderr)
        return 2
    if args.power and args.device == "cuda":
        idle = {"load": "idle", "shape": "", "seconds": 3.0, **at_rest(torch), "unit": ""}  # before any kernel
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
        rows = write_rows(args.power, [idle, *power_rows(torch)])
        for r in rows:
            rate = f"{r['rate']:8.1f} {r['unit']} {r['sm_mhz']:5.0f} MHz"
            print(f"power {r['load']:20s} {r['shape']:16s} {r['mean_w']:7.1f} W {rate}")
    if args.l2 and args.device == "cuda":
        rows = write_rows(args.l2, l2_rows(torch))
        for r in rows:
            print(f"l2 {r['op']:5s} {r['mib']:3d} MiB {r['per_call_s'] * 1e6:8.2f} us {r['tb_per_s']:6.2f} TB/s")
    where = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s on {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
