"""Time whole Llama-2 decode steps and prefills on a real GPU with PyTorch (CUDA-graph replay) -> CSV.

The step does the work of the built-in `llama2-7b` graph (mapper/zoo/llama.py), as HF's eager
LlamaForCausalLM does it with a static KV cache: embedding, per layer RMSNorm (F.rms_norm), separate q, k, v
projections, rotary embedding of q and k, the new keys and values written in place into the cache,
attention over the cache by F.scaled_dot_product_attention (FlashAttention; causal for a prompt), the
output projection and residual, RMSNorm, SwiGLU (separate gate and up) and residual; the final norm and the
LM head over every position of the step. Weights are random bf16 (timing does not depend on their values),
every layer its own, every layer its own cache.

    python3 bench/gpu_decode.py --out $OUT/decode.csv              # ~1 minute on an H200
    python3 bench/gpu_decode.py --power $OUT/decode_power.csv --out $OUT/d.csv --only-power  # energy per token
    python3 bench/gpu_decode.py --device cpu --quick --out /tmp/d.csv  # a 2-layer toy: checks the script

Each row: the model, phase (decode | prefill), batch, seq (new tokens), past (cached tokens), `graph_s`
(the step captured in one CUDA graph and replayed: median of 10 replays timed by CUDA events), `eager_s`
(the same step launched op by op from Python, median of 3), the weight bytes and the KV-cache bytes the
step reads. `bench/compare_gpu.py --steps decode.csv --hw h200-sxm` sets them against the engine.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time

try:
    from bench.gpu_common import capture, event_times, hold, parser, write_rows
except ImportError:  # run as a script: bench/ is on the path, the repository root is not
    from gpu_common import capture, event_times, hold, parser, write_rows

CONFIGS = {  # HF config.json figures, as mapper/zoo/llama.py has them
    "llama2-7b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn": 11008, "vocab": 32000},
    "toy": {"layers": 2, "hidden": 256, "heads": 4, "kv_heads": 4, "ffn": 512, "vocab": 1000},
}
DECODE = [(b, past) for b in (1, 8, 32, 64) for past in (512, 2048)] + [(1, 8192), (8, 8192)]
PREFILL = [(1, 512), (1, 2048), (8, 512)]
QUICK = {"decode": [(1, 64), (2, 64)], "prefill": [(1, 32)]}
POWER_STEPS = [("decode", 1, 1, 2048), ("decode", 32, 1, 2048), ("decode", 64, 1, 512), ("prefill", 1, 2048, 0)]
KV_LIMIT_BYTES = 96 << 30  # a batch whose cache would not fit beside the weights is left out
FIELDS = [
    "model",
    "phase",
    "batch",
    "seq",
    "past",
    "graph_s",
    "eager_s",
    "weight_bytes",
    "kv_read_bytes",
    "device",
    "torch",
    "cuda",
]


class Llama:
    """Random bf16 weights of a Llama-2 config, every layer its own, and one step's forward pass."""

    def __init__(self, torch, config: dict, device: str, dtype):
        self.torch, self.c, self.device, self.dtype = torch, config, device, dtype
        h, f, d = config["hidden"], config["ffn"], config["hidden"] // config["heads"]
        self.head_dim = d
        kv = config["kv_heads"] * d
        w = lambda *shape: torch.randn(*shape, device=device, dtype=dtype) * 0.02
        self.embed, self.lm_head, self.norm = (
            w(config["vocab"], h),
            w(h, config["vocab"]),
            torch.ones(h, device=device, dtype=dtype),
        )
        self.layers = [
            {
                "ln1": torch.ones(h, device=device, dtype=dtype),
                "wq": w(h, h),
                "wk": w(h, kv),
                "wv": w(h, kv),
                "wo": w(h, h),
                "ln2": torch.ones(h, device=device, dtype=dtype),
                "wg": w(h, f),
                "wu": w(h, f),
                "wd": w(f, h),
            }
            for _ in range(config["layers"])
        ]
        self.weight_bytes = sum(t.numel() for layer in self.layers for t in layer.values()) * 2
        self.weight_bytes += (self.embed.numel() + self.lm_head.numel() + self.norm.numel()) * 2

    def cache(self, batch: int, length: int):
        shape = (batch, self.c["kv_heads"], length, self.head_dim)
        return [
            tuple(self.torch.randn(shape, device=self.device, dtype=self.dtype) for _ in range(2)) for _ in self.layers
        ]

    def rope(self, past: int, seq: int):
        torch, d = self.torch, self.head_dim
        inv = 1.0 / 10000.0 ** (torch.arange(0, d, 2, device=self.device, dtype=torch.float32) / d)
        angles = torch.outer(torch.arange(past, past + seq, device=self.device, dtype=torch.float32), inv)
        angles = torch.cat((angles, angles), -1)
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def stepper(self, batch: int, seq: int, past: int):
        """One step at (batch, seq new tokens, past cached tokens) as a function of nothing: random token ids,
        a cache of past + seq positions, the rotary tables for the new positions."""
        ids = self.torch.randint(0, self.c["vocab"], (batch, seq), device=self.device)
        cache = self.cache(batch, past + seq)
        cos, sin = self.rope(past, seq)
        return lambda: self.step(ids, cache, past, cos, sin)

    def step(self, ids, cache, past: int, cos, sin):
        torch, F, c, d = self.torch, self.torch.nn.functional, self.c, self.head_dim
        batch, seq = ids.shape
        half = d // 2

        def rotate(t):
            return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin

        x = self.embed[ids]
        for layer, (kc, vc) in zip(self.layers, cache, strict=True):
            h = F.rms_norm(x, (c["hidden"],), layer["ln1"], 1e-5)
            q = (h @ layer["wq"]).view(batch, seq, c["heads"], d).transpose(1, 2)
            k = (h @ layer["wk"]).view(batch, seq, c["kv_heads"], d).transpose(1, 2)
            v = (h @ layer["wv"]).view(batch, seq, c["kv_heads"], d).transpose(1, 2)
            kc[:, :, past : past + seq] = rotate(k)
            vc[:, :, past : past + seq] = v
            o = F.scaled_dot_product_attention(
                rotate(q), kc[:, :, : past + seq], vc[:, :, : past + seq], is_causal=seq > 1 and past == 0
            )
            x = x + o.transpose(1, 2).reshape(batch, seq, c["hidden"]) @ layer["wo"]
            h = F.rms_norm(x, (c["hidden"],), layer["ln2"], 1e-5)
            x = x + (F.silu(h @ layer["wg"]) * (h @ layer["wu"])) @ layer["wd"]
        return F.rms_norm(x, (c["hidden"],), self.norm, 1e-5) @ self.lm_head


def time_step(torch, model: Llama, batch: int, seq: int, past: int, device: str) -> tuple[float, float]:
    """(graph_s, eager_s) of one step at (batch, seq new tokens, past cached tokens)."""
    run = model.stepper(batch, seq, past)
    if device != "cuda":
        run()
        started = time.perf_counter()
        run()
        return float("nan"), time.perf_counter() - started
    graph = capture(torch, run, 1)  # after warm-up calls, so the eager timing below is warm too
    eager = statistics.median(event_times(torch, run, 3))
    for _ in range(3):
        graph.replay()
    return statistics.median(event_times(torch, graph.replay, 10)), eager


def power_rows(torch, model: Llama) -> list[dict]:
    """Board power, tokens per second and SM clock while each of POWER_STEPS replays back to back for 3 s."""
    rows = []
    for phase, batch, seq, past in POWER_STEPS:
        got = hold(torch, model.stepper(batch, seq, past), batch * seq)
        rows.append({"phase": phase, "batch": batch, "seq": seq, "past": past, **got, "unit": "tokens/s"})
        torch.cuda.empty_cache()  # the step's cache went with its stepper
    return rows


def main(argv=None) -> int:
    parse = parser(__doc__)
    parse.add_argument("--model", default="llama2-7b", choices=sorted(CONFIGS))
    parse.add_argument("--power", help="also write board power while whole steps replay back to back (GPU only)")
    parse.add_argument("--only-power", action="store_true", help="with --power: time no steps")
    args = parse.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; use --device cpu to check the script", file=sys.stderr)
        return 2
    name = "toy" if args.device == "cpu" else args.model
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = Llama(torch, CONFIGS[name], args.device, dtype)
    c = model.c
    kv_per_token = 2 * c["layers"] * c["kv_heads"] * model.head_dim * 2
    plan = [("decode", b, 1, p) for b, p in (QUICK["decode"] if args.quick else DECODE)]
    plan += [("prefill", b, s, 0) for b, s in (QUICK["prefill"] if args.quick else PREFILL)]
    plan = [] if args.only_power else plan
    with torch.inference_mode(), open(args.out, "w", newline="") as handle:
        out = csv.DictWriter(handle, fieldnames=FIELDS)
        out.writeheader()
        for phase, batch, seq, past in plan:
            if batch * (past + seq) * kv_per_token > KV_LIMIT_BYTES:
                continue
            try:
                graph_s, eager_s = time_step(torch, model, batch, seq, past, args.device)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
                print(f"skipped {phase} b{batch} s{seq} p{past}: {str(exc).splitlines()[0]}", file=sys.stderr)
                continue
            finally:
                if args.device == "cuda":
                    torch.cuda.empty_cache()  # the step's cache and graph pool go before the next batch's
            row = {
                "model": name,
                "phase": phase,
                "batch": batch,
                "seq": seq,
                "past": past,
                "graph_s": graph_s,
                "eager_s": eager_s,
                "weight_bytes": model.weight_bytes,
                "kv_read_bytes": batch * (past + seq) * kv_per_token,
                "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                "torch": torch.__version__,
                "cuda": torch.version.cuda or "",
            }
            out.writerow(row)
            handle.flush()
            figures = f"graph {graph_s * 1e3:8.3f} ms  eager {eager_s * 1e3:8.3f} ms"
            print(f"{phase:8s} batch {batch:3d} seq {seq:5d} past {past:5d}  {figures}", flush=True)
        if args.power and args.device == "cuda":
            rows = write_rows(args.power, power_rows(torch, model))
            for r in rows:
                step = f"{r['phase']} b{r['batch']} s{r['seq']} p{r['past']}"
                print(f"power {step}: {r['mean_w']:.0f} W {r['rate']:.0f} tok/s {r['sm_mhz']:.0f} MHz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
