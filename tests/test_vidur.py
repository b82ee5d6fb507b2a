"""Kernel-level evidence on A100 without a GPU here: the engine against Vidur's measured Llama-2 layer ops.

data/evidence/vidur_a100/ (microsoft/vidur profiling data, MIT licence; its README says what each column is):
measured A100 times (CUDA events, fp16) of every Llama-2-7B and 70B layer op except attention at 1-4096 tokens
and TP 1-8, and all-reduce times on a DGX A100. Each op is mapped as a one-op graph of the same shapes and plan
(fp16; CUDA events time the GPU only, so kernels are charged the profile's graph-replay launch); each all-reduce
as the engine's collective kernel. `python tests/test_vidur.py` prints the medians (docs/validation.md).
"""

from __future__ import annotations

import statistics
import sys
from functools import cache
from pathlib import Path

import pytest

import mapper
from mapper.cost.collectives import collective_time
from mapper.zoo import blocks
from mapper.zoo.builder import GraphBuilder

pytestmark = pytest.mark.slow  # every Vidur A100 row mapped (2 x 1044 rows x 10 ops), ~10-30 s

DATA = Path(__file__).resolve().parents[1] / "data" / "evidence" / "vidur_a100"  # microsoft/vidur, MIT
PLAN = mapper.PlanOptions(dtype="fp16", runtime="vllm", launch="graph")
HEAD_DIM = 128
# Acceptance (issue #18): median |error| over each group of rows
GEMM_TOLERANCE = 0.10
VECTOR_TOLERANCE = 0.20  # norms, activation and rope
ALL_REDUCE_TOLERANCE = 0.20
GROUPS = {
    "gemm": ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"),
    "vector": ("input_layernorm", "post_attention_layernorm", "mlp_act", "attn_rope"),
    "other": ("emb", "add"),
}


def _graph(op: str, hidden: int, heads: int, kv_heads: int, ffn: int, tp: int):
    """The one-op graph of a Vidur op, [tokens, ...] with a free `tokens` dim."""
    b = GraphBuilder(f"vidur-{op}")
    if op in ("input_layernorm", "post_attention_layernorm"):
        out = blocks.rms_norm(b, b.input("x", ["tokens", hidden]), hidden, "norm", 1e-5)
    elif op == "add":
        out = b.op("Add", b.input("x", ["tokens", hidden]), b.input("y", ["tokens", hidden]))
    elif op == "emb":
        out = b.op("Gather", b.weight("embed", [32000, hidden]), b.input("ids", ["tokens"], 7))
    elif op == "mlp_act":  # SiLU(gate) * up over the rank's share of the expanded width
        gate, up = (b.input(n, ["tokens", ffn // tp]) for n in ("gate", "up"))
        out = b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up)
    elif op == "attn_rope":  # q and k of the rank's heads rotated: x * cos + rotate(x) * sin, one pass
        x = b.input("qk", ["tokens", (heads + kv_heads) // tp, HEAD_DIM])
        cos, sin = (b.input(n, ["tokens", 1, HEAD_DIM]) for n in ("cos", "sin"))
        out = b.op("Add", b.op("Mul", x, cos), b.op("Mul", x, sin))
    else:
        k, n = {
            "attn_pre_proj": (hidden, (heads + 2 * kv_heads) * HEAD_DIM // tp),
            "attn_post_proj": (hidden // tp, hidden),
            "mlp_up_proj": (hidden, 2 * ffn // tp),
            "mlp_down_proj": (ffn // tp, hidden),
        }[op]
        out = b.op("MatMul", b.input("x", ["tokens", k]), b.weight("w", [k, n]))
    b.output(out, out, ["tokens", None, None] if op == "attn_rope" else ["tokens", None])
    return mapper.open_model(b.build(op).SerializeToString())


@cache
def _model(op, hidden, heads, kv_heads, ffn, tp):
    return _graph(op, hidden, heads, kv_heads, ffn, tp)


@cache
def _predicted_s(op, shape, tokens, tp, hw_name="a100-sxm-80gb") -> float:
    model = _model(op, *shape, tp if op not in ("input_layernorm", "post_attention_layernorm", "add", "emb") else 1)
    result = mapper.map_workload(model.bind({"tokens": tokens}), mapper.load_hardware(hw_name), PLAN)
    return result.totals.latency_s


def layer_rows():
    """(model, op, tokens, tp, measured s, predicted s) for every op of every row of both files."""
    import pandas as pd

    rows = []
    for name in ("7b", "70b"):
        frame = pd.read_csv(DATA / f"llama2_{name}_mlp.csv")
        for record in frame.to_dict("records"):
            shape = (record["n_embd"], record["n_head"], record["n_kv_head"], record["n_expanded_embd"])
            tokens, tp = int(record["num_tokens"]), int(record["num_tensor_parallel_workers"])
            for op in (o for group in GROUPS.values() for o in group):
                measured_s = record[f"time_stats.{op}.median"] * 1e-3
                rows.append((name, op, tokens, tp, measured_s, _predicted_s(op, shape, tokens, tp)))
    return rows


def all_reduce_rows():
    """(devices, fp16 elements, measured s, predicted s): the engine's all-reduce kernel (wire + launch)."""
    import pandas as pd

    hw = mapper.load_hardware("a100-sxm-80gb")
    frame = pd.read_csv(DATA / "all_reduce_dgx.csv")
    frame = frame[frame.devices_per_node == frame.num_workers]  # one NVSwitch node, as the profile is
    out = []
    for devices, size, measured_ms in zip(frame.num_workers, frame["size"], frame["time_stats.all_reduce.median"]):
        wire = collective_time("all-reduce", int(devices), 2.0 * size, hw.interconnect).time_s
        out.append((int(devices), int(size), measured_ms * 1e-3, wire + hw.kernel_launch_s))
    return out


def _median_error(pairs) -> float:
    return statistics.median(abs(p / m - 1.0) for m, p in pairs if m > 0)


@pytest.fixture(scope="module")
def scored():
    if not DATA.is_dir():
        pytest.skip("the Vidur A100 data (data/evidence/vidur_a100) is not here")
    return layer_rows(), all_reduce_rows()


def group_errors(rows) -> dict[str, float]:
    return {g: _median_error([(m, p) for _, op, _, _, m, p in rows if op in ops]) for g, ops in GROUPS.items()}


def test_gemm_rows_within_tolerance(scored):
    assert group_errors(scored[0])["gemm"] <= GEMM_TOLERANCE


def test_norm_activation_rope_rows_within_tolerance(scored):
    assert group_errors(scored[0])["vector"] <= VECTOR_TOLERANCE


def test_all_reduce_rows_within_tolerance(scored):
    assert _median_error([(m, p) for _, _, m, p in scored[1]]) <= ALL_REDUCE_TOLERANCE


def test_every_row_is_scored(scored):
    layers, reduces = scored
    assert len(layers) == 2 * 1044 * sum(len(g) for g in GROUPS.values())
    assert len(reduces) > 0 and all(p > 0 for *_, p in reduces)


if __name__ == "__main__":  # the figures of docs/validation.md
    layers, reduces = layer_rows(), all_reduce_rows()
    for op in (o for g in GROUPS.values() for o in g):
        for name in ("7b", "70b"):
            pairs = [(m, p) for n, o, _, _, m, p in layers if o == op and n == name]
            print(f"{name:4s} {op:26s} rows {len(pairs):5d} median |error| {_median_error(pairs):6.1%}")
    for group, error in group_errors(layers).items():
        print(f"group {group:8s} median |error| {error:6.1%}")
    for devices in (2, 4, 8):
        pairs = [(m, p) for d, _, m, p in reduces if d == devices]
        print(f"all-reduce x{devices}: rows {len(pairs)} median |error| {_median_error(pairs):6.1%}")
    print(f"all-reduce: median |error| {_median_error([(m, p) for _, _, m, p in reduces]):6.1%}")
    sys.exit(0)
