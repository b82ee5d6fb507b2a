"""Vidur's measured A100 Llama-2 layer ops against the engine (data/evidence/vidur_a100, microsoft/vidur, MIT).

Measured A100 times (CUDA events, fp16) of every Llama-2-7B and 70B layer op except attention at 1-4096 tokens
and TP 1-8, and all-reduce times on a DGX A100 (the data's README says what each column is). Each op is mapped
as a one-op graph of the same shapes and plan (fp16; CUDA events time the GPU only, so kernels are charged the
profile's graph-replay launch); each all-reduce as the engine's collective kernel (wire + launch).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data" / "evidence" / "vidur_a100"  # microsoft/vidur, MIT
PROFILE = "a100-sxm-80gb"
HEAD_DIM = 128
VOCAB = 32000
MS = 1e-3
FP16_BYTES = 2
GROUPS = {
    "gemm": ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"),
    "vector": ("input_layernorm", "post_attention_layernorm", "mlp_act", "attn_rope"),
    "other": ("emb", "add"),
}
UNSHARDED = ("input_layernorm", "post_attention_layernorm", "add", "emb")  # the same on every TP rank


def gemm_dims(op: str, hidden: int, heads: int, kv_heads: int, ffn: int, tp: int) -> tuple[int, int]:
    """(k, n) of a Vidur GEMM op on one TP rank."""
    return {
        "attn_pre_proj": (hidden, (heads + 2 * kv_heads) * HEAD_DIM // tp),
        "attn_post_proj": (hidden // tp, hidden),
        "mlp_up_proj": (hidden, 2 * ffn // tp),
        "mlp_down_proj": (ffn // tp, hidden),
    }[op]


def _graph(op: str, hidden: int, heads: int, kv_heads: int, ffn: int, tp: int):
    """The one-op graph of a Vidur op, [tokens, ...] with a free `tokens` dim."""
    import mapper
    from mapper.zoo import blocks
    from mapper.zoo.builder import GraphBuilder

    b = GraphBuilder(f"vidur-{op}")
    if op in ("input_layernorm", "post_attention_layernorm"):
        out = blocks.rms_norm(b, b.input("x", ["tokens", hidden]), hidden, "norm", 1e-5)
    elif op == "add":
        out = b.op("Add", b.input("x", ["tokens", hidden]), b.input("y", ["tokens", hidden]))
    elif op == "emb":
        out = b.op("Gather", b.weight("embed", [VOCAB, hidden]), b.input("ids", ["tokens"], 7))
    elif op == "mlp_act":  # SiLU(gate) * up over the rank's share of the expanded width
        gate, up = (b.input(n, ["tokens", ffn // tp]) for n in ("gate", "up"))
        out = b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up)
    elif op == "attn_rope":  # q and k of the rank's heads rotated: x * cos + rotate(x) * sin, one pass
        x = b.input("qk", ["tokens", (heads + kv_heads) // tp, HEAD_DIM])
        cos, sin = (b.input(n, ["tokens", 1, HEAD_DIM]) for n in ("cos", "sin"))
        out = b.op("Add", b.op("Mul", x, cos), b.op("Mul", x, sin))
    else:
        k, n = gemm_dims(op, hidden, heads, kv_heads, ffn, tp)
        out = b.op("MatMul", b.input("x", ["tokens", k]), b.weight("w", [k, n]))
    b.output(out, out, ["tokens", None, None] if op == "attn_rope" else ["tokens", None])
    return mapper.open_model(b.build(op).SerializeToString())


@cache
def _model(op, hidden, heads, kv_heads, ffn, tp):
    return _graph(op, hidden, heads, kv_heads, ffn, tp)


def predicted_s(op: str, shape: tuple[int, int, int, int], tokens: int, tp: int) -> float:
    """The engine's time for Vidur op `op` of a model of `shape` (hidden, heads, kv heads, ffn) on A100 at TP `tp`
    (an op every rank runs whole is mapped once for every TP degree)."""
    return _predicted_s(op, shape, tokens, 1 if op in UNSHARDED else tp)


@cache
def _predicted_s(op: str, shape: tuple[int, int, int, int], tokens: int, rank_tp: int) -> float:
    import mapper

    plan = mapper.PlanOptions(dtype="fp16", runtime="vllm", launch="graph")
    model = _model(op, *shape, rank_tp)
    return mapper.map_workload(model.bind({"tokens": tokens}), mapper.load_hardware(PROFILE), plan).totals.latency_s


def measured_rows(data: Path = DATA) -> list[tuple]:
    """(model, op, tokens, tp, measured s, shape) for every op of every row of both files, no mapping yet."""
    rows = []
    for name in ("7b", "70b"):
        with (data / f"llama2_{name}_mlp.csv").open(newline="") as handle:
            for record in csv.DictReader(handle):
                shape = tuple(int(record[k]) for k in ("n_embd", "n_head", "n_kv_head", "n_expanded_embd"))
                tokens, tp = int(record["num_tokens"]), int(record["num_tensor_parallel_workers"])
                for op in (o for group in GROUPS.values() for o in group):
                    rows.append((name, op, tokens, tp, float(record[f"time_stats.{op}.median"]) * MS, shape))
    return rows


def layer_rows(data: Path = DATA) -> list[tuple]:
    """(model, op, tokens, tp, measured s, predicted s) for every op of every row of both files."""
    return [(n, op, t, tp, m, predicted_s(op, shape, t, tp)) for n, op, t, tp, m, shape in measured_rows(data)]


def all_reduce_rows(data: Path = DATA) -> list[tuple]:
    """(devices, fp16 elements, measured s, predicted s): the engine's all-reduce kernel (wire + launch), on one
    NVSwitch node as the profile is."""
    import mapper
    from mapper.cost.collectives import collective_time

    hw = mapper.load_hardware(PROFILE)
    out = []
    with (data / "all_reduce_dgx.csv").open(newline="") as handle:
        for record in csv.DictReader(handle):
            devices, size = int(record["num_workers"]), int(record["size"])
            if int(record["devices_per_node"]) != devices:
                continue
            wire = collective_time(
                "all-reduce", devices, FP16_BYTES * size, hw.interconnect, False, hw.all_reduce_efficiency
            ).time_s
            out.append((devices, size, float(record["time_stats.all_reduce.median"]) * MS, wire + hw.kernel_launch_s))
    return out
