"""CPU PyTorch profiler traces of the built-ins, for `mapper measure MODEL --profile TRACE`.

Builds ResNet-50 (torchvision's module names), BERT-base and GPT-2 small (Hugging Face's module names) in plain
PyTorch at the built-ins' shapes (batch 1; 224x224; 128 tokens), random weights, eval mode, and records
`torch.profiler` (CPU activity) over two iterations after one warm-up, as a gzipped Chrome trace. Each module's
forward runs inside `record_function(<module path>)`, so every op sits in the scope of the module that ran it:
that is what `mapper.evidence.torch_trace` matches to mapped kernels (the built-ins' ONNX node names carry the
same module paths). Copy `scope_modules` into your own script to make a trace this way.

    /tmp/torchvenv/bin/python bench/torch_cpu_trace.py --out data/evidence/torch_cpu --threads 1

torch is imported inside the functions: importing this module needs nothing beyond the standard library.
"""

from __future__ import annotations

import argparse
import math
import platform
from pathlib import Path

MODELS = ("resnet50", "bert-base", "gpt2-small")
SEQ = 128


def scope_modules(model, record_function) -> None:
    """Wrap each submodule's forward in `record_function(<its dotted module path>)` (the root stays unwrapped)."""
    for name, module in model.named_modules():
        if not name:
            continue

        def wrapped(*args, _forward=module.forward, _name=name, **kwargs):
            with record_function(_name):
                return _forward(*args, **kwargs)

        module.forward = wrapped


def _resnet50(torch):
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride, down):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, width * 4, 1, bias=False), nn.BatchNorm2d(width * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = (
                nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride, bias=False), nn.BatchNorm2d(width * 4))
                if down
                else None
            )

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            out += identity
            return self.relu(out)

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
            self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
            cin = 64
            for i, (width, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))):
                layer = []
                for b in range(blocks):
                    layer.append(Bottleneck(cin, width, stride if b == 0 else 1, b == 0))
                    cin = width * 4
                setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
            self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(2048, 1000)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet50(), (torch.rand(1, 3, 224, 224),)


def _attention(torch, q, k, v, heads, mask):
    """Scores, softmax and context as Hugging Face's eager attention computes them."""
    b, t, d = q.shape
    q, k, v = (x.view(b, t, heads, d // heads).permute(0, 2, 1, 3) for x in (q, k, v))
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // heads)
    scores = scores + mask if mask.dtype != torch.bool else torch.where(mask, scores, -1e4)
    context = torch.matmul(torch.softmax(scores, dim=-1), v)
    return context.permute(0, 2, 1, 3).contiguous().view(b, t, d)


def _named(nn):
    """A module whose children are given by name (the built-ins' module paths: "self" is a child of attention)."""

    class Named(nn.Module):
        def __init__(this, **children):  # "self" is a child's name here
            super().__init__()
            for key, value in children.items():
                setattr(this, key, value)

    return Named


def _bert(torch):
    nn = torch.nn

    Named = _named(nn)

    class SelfAttention(Named):
        def forward(self, x, mask):
            return _attention(torch, self.query(x), self.key(x), self.value(x), 12, mask)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Named(
                self=SelfAttention(query=nn.Linear(768, 768), key=nn.Linear(768, 768), value=nn.Linear(768, 768)),
                output=Named(dense=nn.Linear(768, 768), LayerNorm=nn.LayerNorm(768)),
            )
            self.intermediate = Named(dense=nn.Linear(768, 3072))
            self.output = Named(dense=nn.Linear(3072, 768), LayerNorm=nn.LayerNorm(768))

        def forward(self, x, mask):
            a = self.attention.output.LayerNorm(self.attention.output.dense(self.attention.self(x, mask)) + x)
            h = nn.functional.gelu(self.intermediate.dense(a))
            return self.output.LayerNorm(self.output.dense(h) + a)

    class Embeddings(Named):
        def forward(self, ids):
            pos = torch.arange(ids.shape[1])[None]
            x = self.word_embeddings(ids) + self.position_embeddings(pos)
            return self.LayerNorm(x + self.token_type_embeddings(torch.zeros_like(ids)))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Embeddings(
                word_embeddings=nn.Embedding(30522, 768),
                position_embeddings=nn.Embedding(512, 768),
                token_type_embeddings=nn.Embedding(2, 768),
                LayerNorm=nn.LayerNorm(768),
            )
            self.encoder = Named(layer=nn.ModuleList(Layer() for _ in range(12)))
            self.pooler = Named(dense=nn.Linear(768, 768))

        def forward(self, ids, mask):
            x = self.embeddings(ids)
            ext = (1.0 - mask[:, None, None, :].float()) * -10000.0
            for layer in self.encoder.layer:
                x = layer(x, ext)
            return torch.tanh(self.pooler.dense(x[:, 0]))

    ids = torch.randint(0, 30522, (1, SEQ))
    return Bert(), (ids, torch.ones(1, SEQ, dtype=torch.long))


def _gpt2(torch):
    nn = torch.nn

    Named = _named(nn)

    class Attn(Named):
        def forward(self, x, causal):
            q, k, v = self.c_attn(x).split(768, dim=2)
            return self.c_proj(_attention(torch, q, k, v, 12, causal))

    class Mlp(Named):
        def forward(self, x):
            h = self.c_fc(x)
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
            return self.c_proj(h)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(768), nn.LayerNorm(768)
            self.attn = Attn(c_attn=nn.Linear(768, 2304), c_proj=nn.Linear(768, 768))
            self.mlp = Mlp(c_fc=nn.Linear(768, 3072), c_proj=nn.Linear(3072, 768))

        def forward(self, x, causal):
            x = x + self.attn(self.ln_1(x), causal)
            return x + self.mlp(self.ln_2(x))

    class Gpt2(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = Named(
                wte=nn.Embedding(50257, 768),
                wpe=nn.Embedding(1024, 768),
                h=nn.ModuleList(Block() for _ in range(12)),
                ln_f=nn.LayerNorm(768),
            )
            self.lm_head = nn.Linear(768, 50257, bias=False)

        def forward(self, ids):
            t = self.transformer
            x = t.wte(ids) + t.wpe(torch.arange(ids.shape[1])[None])
            causal = torch.tril(torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool))[None, None]
            for block in t.h:
                x = block(x, causal)
            return self.lm_head(t.ln_f(x))

    return Gpt2(), (torch.randint(0, 50257, (1, SEQ)),)


def profile_runs(torch, run, path: Path, device: str = "cpu") -> None:
    """Two profiled calls of `run` after one warm-up, as a gzipped Chrome trace at `path` (CPU activity, and on
    "cuda" the GPU's too, each call synchronized)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    run()
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        on_trace_ready=lambda done: done.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(3):
            run()
            if device == "cuda":
                torch.cuda.synchronize()
            prof.step()


def record(name: str, out: Path, threads: int) -> Path:
    """Two profiled iterations of `name` after one warm-up, as <out>/<name>.json.gz."""
    import torch
    from torch.profiler import record_function

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model, inputs = {"resnet50": _resnet50, "bert-base": _bert, "gpt2-small": _gpt2}[name](torch)
    model.eval()
    scope_modules(model, record_function)
    path = out / f"{name}.json.gz"
    with torch.inference_mode():
        profile_runs(torch, lambda: model(*inputs), path)
    print(f"{path}: torch {torch.__version__}, {threads} thread(s), {platform.processor() or platform.machine()}")
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/evidence/torch_cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name in args.models:
        record(name, Path(args.out), args.threads)


if __name__ == "__main__":
    main()
