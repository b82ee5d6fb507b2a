"""GPU PyTorch profiler traces of the built-ins, for `mapper measure MODEL --profile TRACE` where a GPU is lent.

Builds Llama-2-7B as `transformers`' eager LlamaForCausalLM runs it (its module names: model.layers.N.self_attn.
q_proj, ..., mlp.down_proj; RMSNorm in fp32; rotary q and k; the past keys and values concatenated with the new
ones, as the exported graph of the built-in `llama2-7b` does; attention as matmul, mask, softmax, matmul) and
ResNet-50 (torchvision's names, bench/torch_cpu_trace.py), random bf16 weights, eval mode, and records
`torch.profiler` (CPU and CUDA activity: each kernel tied to its launching op by correlation id) over two
iterations after one warm-up, as gzipped Chrome traces. Each module's forward runs inside
`record_function(<module path>)` (torch_cpu_trace.scope_modules): the scopes `mapper.evidence.torch_match` matches
to the built-ins' ONNX node names. With --nvtx the same scopes are also NVTX ranges, for `nsys profile` of a run.

The traces and the commands that set each against its mapping (the plan the eager run is: unfused attention, the
cache concatenated, one launch per kernel):

    llama2-7b-prefill.json.gz  mapper measure llama2-7b --hw h100-sxm --dtype bf16 --batch 1 --seq 512 --dim past=0
    llama2-7b-decode.json.gz   mapper measure llama2-7b --hw h100-sxm --dtype bf16 --batch 8 --seq 1 --dim past=512
    resnet50.json.gz           mapper measure resnet50 --hw h100-sxm --dtype bf16 --batch 32
    (each with --attention-fusion off --kv-cache copy --launch eager --profile TRACE)

    python3 bench/torch_gpu_trace.py --out $OUT                     # on the lent GPU: well under a minute
    python3 bench/torch_gpu_trace.py --device cpu --quick --out /tmp/t  # a 2-layer toy on the CPU: checks the script

torch is imported inside the functions: importing this module needs nothing beyond the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import platform
import sys
from pathlib import Path

try:
    from bench.torch_cpu_trace import _resnet50, profile_runs, scope_modules
except ImportError:  # run as a script: bench/ is on the path, the repository root is not
    from torch_cpu_trace import _resnet50, profile_runs, scope_modules

LLAMA = {"layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000}  # HF config.json, as the built-in
TOY = {"layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1000}
RMS_EPS = 1e-5
ROPE_THETA = 10000.0
# (trace name, batch, new tokens, cached tokens); a ResNet-50 batch
LLAMA_STEPS = (("llama2-7b-prefill", 1, 512, 0), ("llama2-7b-decode", 8, 1, 512))
QUICK_STEPS = (("llama2-7b-prefill", 1, 16, 0), ("llama2-7b-decode", 2, 1, 16))
RESNET_BATCH, QUICK_RESNET_BATCH = 32, 1


def llama(torch, config: dict):
    """A Llama-2 decoder with HF's module names and eager forward, taking (ids, past keys, past values)."""
    nn, F = torch.nn, torch.nn.functional
    hidden, heads = config["hidden"], config["heads"]
    head_dim = hidden // heads

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x):
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)
            return self.weight * h.to(x.dtype)

    def rotate(t, cos, sin):
        half = t.shape[-1] // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(hidden, hidden, bias=False) for _ in "qkvo")

        def forward(self, x, past_k, past_v, cos, sin, mask):
            b, s, _ = x.shape
            q, k, v = (
                p(x).view(b, s, heads, head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)
            )
            k = torch.cat((past_k, rotate(k, cos, sin)), 2)
            v = torch.cat((past_v, v), 2)
            scores = torch.matmul(rotate(q, cos, sin), k.transpose(2, 3)) / math.sqrt(head_dim)
            if mask is not None:
                scores = scores + mask
            probs = F.softmax(scores, -1, dtype=torch.float32).to(q.dtype)
            return self.o_proj(torch.matmul(probs, v).transpose(1, 2).reshape(b, s, hidden)), k, v

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = (nn.Linear(hidden, config["ffn"], bias=False) for _ in "gu")
            self.down_proj = nn.Linear(config["ffn"], hidden, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
            self.self_attn, self.mlp = Attention(), MLP()

        def forward(self, x, past_k, past_v, cos, sin, mask):
            o, k, v = self.self_attn(self.input_layernorm(x), past_k, past_v, cos, sin, mask)
            x = x + o
            return x + self.mlp(self.post_attention_layernorm(x)), k, v

    class RotaryEmbedding(nn.Module):
        """HF's LlamaRotaryEmbedding (model.rotary_emb): its inverse frequencies a buffer, made once."""

        def __init__(self):
            super().__init__()
            inv = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, x, cached: int):
            """cos and sin of the new positions' angles."""
            positions = torch.arange(cached, cached + x.shape[1], device=x.device, dtype=torch.float32)
            angles = positions[:, None] * self.inv_freq[None, :]
            angles = torch.cat((angles, angles), -1)
            return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(config["vocab"], hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(config["layers"]))
            self.norm = RMSNorm()
            self.rotary_emb = RotaryEmbedding()

    class LlamaForCausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Model()
            self.lm_head = nn.Linear(hidden, config["vocab"], bias=False)

        def forward(self, ids, past):
            s, cached = ids.shape[1], past[0][0].shape[2]
            x = self.model.embed_tokens(ids)
            cos, sin = self.model.rotary_emb(x, cached)
            mask = None
            if s > 1:
                mask = torch.full((s, cached + s), float("-inf"), device=ids.device, dtype=x.dtype).triu(cached + 1)
            presents = []
            for layer, (pk, pv) in zip(self.model.layers, past, strict=True):
                x, k, v = layer(x, pk, pv, cos, sin, mask)
                presents.append((k, v))
            return self.lm_head(self.model.norm(x)), presents

    return LlamaForCausalLM(), head_dim


def _llama_traces(torch, out: Path, device: str, dtype, quick: bool, scope) -> list[Path]:
    config = TOY if quick else LLAMA
    model, head_dim = llama(torch, config)
    model = model.to(device=device, dtype=dtype).eval()
    scope_modules(model, scope)
    written = []
    for name, batch, seq, cached in QUICK_STEPS if quick else LLAMA_STEPS:
        ids = torch.randint(0, config["vocab"], (batch, seq), device=device)
        shape = (batch, config["heads"], cached, head_dim)
        past = [(torch.randn(shape, device=device, dtype=dtype),) * 2 for _ in range(config["layers"])]
        path = out / f"{name}.json.gz"
        profile_runs(torch, lambda ids=ids, past=past: model(ids, past), path, device)
        written.append(path)
    return written


def _resnet_trace(torch, out: Path, device: str, dtype, quick: bool, scope) -> Path:
    model, _ = _resnet50(torch)
    model = model.to(device=device, dtype=dtype).eval()
    scope_modules(model, scope)
    images = torch.randn(QUICK_RESNET_BATCH if quick else RESNET_BATCH, 3, 224, 224, device=device, dtype=dtype)
    path = out / "resnet50.json.gz"
    profile_runs(torch, lambda: model(images), path, device)
    return path


def record_all(out: Path, device: str, quick: bool, nvtx: bool) -> list[Path]:
    """The Llama-2-7B prefill and decode traces and the ResNet-50 one, under `out`."""
    import torch
    from torch.profiler import record_function

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    scope = record_function
    if nvtx:  # the scopes as NVTX ranges too, for `nsys profile` of the same run

        @contextlib.contextmanager
        def scope(name: str):
            with record_function(name):
                torch.cuda.nvtx.range_push(name)
                try:
                    yield
                finally:
                    torch.cuda.nvtx.range_pop()

    with torch.inference_mode():
        written = _llama_traces(torch, out, device, dtype, quick, scope)
        if device == "cuda":
            torch.cuda.empty_cache()  # the Llama's weights went with it
        written.append(_resnet_trace(torch, out, device, dtype, quick, scope))
    where = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    for path in written:
        print(f"{path}: torch {torch.__version__}, {where}")
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="a 2-layer toy Llama and one image: checks the script")
    parser.add_argument("--nvtx", action="store_true", help="the module scopes as NVTX ranges too (CUDA only)")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; use --device cpu --quick to check the script", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    record_all(Path(args.out), args.device, args.quick, args.nvtx and args.device == "cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
