"""Time GEMMs, attention and normalization kernels on a real GPU with PyTorch (CUDA events) -> CSV.

Ready for the minutes a GPU machine is lent (see DEVELOPERS.md): one command measures every shape,
then `bench/compare_gpu.py` sets the CSV against the engine's predictions for the matching profile.

    python3 bench/gpu_kernels.py --out $OUT/gpu_kernels.csv            # about 3-5 minutes on an H100/H200
    python3 bench/gpu_kernels.py --quick --out /tmp/k.csv               # a handful of shapes
    python3 bench/gpu_kernels.py --device cpu --quick --out /tmp/k.csv  # check the script itself, no GPU

Each row: kind, shape, dtype, median and best time over timed repeats (after warm-up), FLOPs
(2 x MACs), the bytes a kernel must move (inputs + outputs once), achieved FLOP/s and bytes/s, the GPU
name, torch and CUDA versions. FLOPs and bytes are counted exactly as the engine counts them.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

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
ATTENTION = [(16384 // s, 16, s, 128) for s in (512, 1024, 2048, 4096, 8192, 16384)] + [
    (8, 12, 512, 64),
    (1, 32, 2048, 128),
]
NORMS = [(rows, cols) for rows in (1024, 8192, 32768) for cols in (768, 4096, 8192)]
QUICK = {
    "gemm": [(1024, 1024, 1024), (4096, 4096, 4096), (1408, 3072, 4096), (1408, 3073, 4096)],
    "attention": [(32, 16, 512, 128), (2, 16, 8192, 128)],
    "norm": [(8192, 4096)],
}
DTYPES = ("bfloat16", "float16")


def timer(torch, device: str):
    """A function fn -> list of seconds per call: CUDA events on a GPU, perf_counter on the CPU."""

    def run(fn, repeats: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            return times
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return times

    return run


def cases(torch, device: str, quick: bool):
    """(kind, shape text, dtype, fn, flops, bytes) for every measurement."""
    import torch.nn.functional as F

    gemms = QUICK["gemm"] if quick else GEMM_SIZES
    attn = QUICK["attention"] if quick else ATTENTION
    norms = QUICK["norm"] if quick else NORMS
    for dtype_name in DTYPES if device == "cuda" else ("float32",):  # CPU: only checks the script
        dtype = getattr(torch, dtype_name)
        size = torch.empty((), dtype=dtype).element_size()
        for m, n, k in gemms:
            a = torch.randn(m, k, device=device, dtype=dtype)
            b = torch.randn(k, n, device=device, dtype=dtype)
            yield (
                "gemm",
                f"{m}x{n}x{k}",
                dtype_name,
                (lambda a=a, b=b: a @ b),
                2 * m * n * k,
                (m * k + k * n + m * n) * size,
            )
        for batch, heads, seq, d in attn:
            q, k_, v = (torch.randn(batch, heads, seq, d, device=device, dtype=dtype) for _ in range(3))
            flops = 4 * batch * heads * seq * seq * d
            io = 4 * batch * heads * seq * d * size

            def naive(q=q, k_=k_, v=v, d=d):
                return torch.softmax((q @ k_.transpose(-1, -2)) * d**-0.5, dim=-1) @ v

            yield (
                "attention-fused",
                f"{batch}x{heads}x{seq}x{d}",
                dtype_name,
                (lambda q=q, k_=k_, v=v: F.scaled_dot_product_attention(q, k_, v)),
                flops,
                io,
            )
            if batch * heads * seq * seq * size <= 8 << 30:  # the unfused S x S scores must fit in memory
                yield (
                    "attention-unfused",
                    f"{batch}x{heads}x{seq}x{d}",
                    dtype_name,
                    naive,
                    flops,
                    io + 4 * batch * heads * seq * seq * size,
                )
        for rows, cols in norms:
            x = torch.randn(rows, cols, device=device, dtype=dtype)
            w = torch.ones(cols, device=device, dtype=dtype)
            elems = rows * cols
            yield (
                "layernorm",
                f"{rows}x{cols}",
                dtype_name,
                (lambda x=x, w=w, cols=cols: F.layer_norm(x, (cols,), w)),
                8 * elems,
                2 * elems * size,
            )
            yield (
                "rmsnorm",
                f"{rows}x{cols}",
                dtype_name,
                (lambda x=x, w=w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w),
                4 * elems,
                2 * elems * size,
            )
            yield (
                "softmax",
                f"{rows}x{cols}",
                dtype_name,
                (lambda x=x: torch.softmax(x, -1)),
                5 * elems,
                2 * elems * size,
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; use --device cpu to check the script", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    run = timer(torch, args.device)
    fields = [
        "kind",
        "shape",
        "dtype",
        "median_s",
        "best_s",
        "flops",
        "bytes",
        "tflops_per_s",
        "gb_per_s",
        "device",
        "torch",
        "cuda",
    ]
    started = time.perf_counter()
    with open(args.out, "w", newline="") as handle:
        out = csv.DictWriter(handle, fieldnames=fields)
        out.writeheader()
        for kind, shape, dtype, fn, flops, nbytes in cases(torch, args.device, args.quick):
            repeats = max(3, args.repeats if args.device == "cuda" else 3)
            times = run(fn, repeats, warmup=3 if args.device == "cuda" else 1)
            median = statistics.median(times)
            out.writerow(
                {
                    "kind": kind,
                    "shape": shape,
                    "dtype": dtype,
                    "median_s": median,
                    "best_s": min(times),
                    "flops": flops,
                    "bytes": nbytes,
                    "tflops_per_s": flops / median / 1e12,
                    "gb_per_s": nbytes / median / 1e9,
                    "device": gpu,
                    "torch": torch.__version__,
                    "cuda": torch.version.cuda or "",
                }
            )
            handle.flush()
            print(
                f"{kind:18s} {shape:18s} {dtype:9s} {median * 1e6:10.1f} us {flops / median / 1e12:8.1f} TFLOP/s"
                f" {nbytes / median / 1e9:8.0f} GB/s",
                flush=True,
            )
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s on {gpu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
