"""Kernel micro-benchmarks against the engine: the one-op ONNX graph behind each measured row.

`bench/gpu_kernels.py` times GEMMs, attention (prefill fused and unfused, decode), normalizations and a
residual add on a GPU and writes a CSV; `compare_kernel_csv` maps each row's graph on a profile with the plan
the row ran (fused attention -> FlashAttention fusion; unfused -> one kernel per op) and the launches it was
timed with (`graph_s`: CUDA-graph replay, the profile's graph launch cost; `median_s`: eager launches, its
kernel launch cost), and reports predicted against measured.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.pipeline import load_workload, map_workload

DTYPES = {
    "bfloat16": (TensorProto.BFLOAT16, "bf16"),
    "float16": (TensorProto.FLOAT16, "fp16"),
    "float32": (TensorProto.FLOAT, "fp32"),
    "float8_e4m3fn": (TensorProto.BFLOAT16, "fp8"),  # a bf16 graph planned in fp8 (`_scaled_mm`'s operands)
}
PLANS = {
    "gemm": "default",
    "attention-fused": "aggressive",
    "attention-decode": "aggressive",
    "attention-decode-gqa": "aggressive",
    "attention-unfused": "none",
    "layernorm": "default",
    "rmsnorm": "default",
    "softmax": "default",
    "add": "default",
    "quantize": "default",
}
TIMINGS = {"graph": ("graph_s", "graph"), "eager": ("median_s", "eager")}  # timing -> (CSV column, plan launch)


def _model(nodes, inputs, outputs, inits=()) -> bytes:
    graph = helper.make_graph(nodes, "microbench", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def kernel_model(kind: str, shape: tuple[int, ...], elem: int) -> bytes:
    """The ONNX graph that does what the measured kernel did."""
    t = lambda name, dims: helper.make_tensor_value_info(name, elem, list(dims))
    if kind == "gemm":
        m, n, k = shape
        return _model(
            [helper.make_node("MatMul", ["a", "b"], ["c"])], [t("a", (m, k)), t("b", (k, n))], [t("c", (m, n))]
        )
    if kind == "attention-decode-gqa":
        return _gqa_model(shape, elem, t)
    if kind.startswith("attention"):
        b, h, s, d = shape
        q_len = 1 if kind == "attention-decode" else s  # decode: one query a sequence over s cached keys
        scale = numpy_helper.from_array(np.array(d**-0.5, dtype=np.float32), "scale")
        inputs = [t("q", (b, h, q_len, d)), t("k", (b, h, s, d)), t("v", (b, h, s, d))]
        return _model(_attention_nodes("k", "v", elem), inputs, [t("o", (b, h, q_len, d))], [scale])
    rows, cols = shape
    weight: TensorProto | None = numpy_helper.from_array(np.ones(cols, dtype=np.float32), "w")
    if kind == "layernorm":
        nodes = [
            helper.make_node("Cast", ["w"], ["wc"], to=elem),
            helper.make_node("LayerNormalization", ["x", "wc"], ["y"], axis=-1),
        ]
    elif kind == "rmsnorm":
        nodes = [
            helper.make_node("Cast", ["w"], ["wc"], to=elem),
            helper.make_node("SimplifiedLayerNormalization", ["x", "wc"], ["y"], axis=-1),
        ]
    elif kind == "softmax":
        nodes, weight = [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], None
    elif kind == "quantize":  # an fp8 GEMM module's dynamic activation quantize: a scale pass, then a scaling one
        nodes, weight = (
            [
                helper.make_node("ReduceMax", ["x"], ["amax"], axes=[-1], keepdims=1),
                helper.make_node("Div", ["x", "amax"], ["y"]),
            ],
            None,
        )
    elif kind == "add":
        nodes = [helper.make_node("Add", ["x", "x2"], ["y"])]
        inputs = [t("x", (rows, cols)), t("x2", (rows, cols))]
        return _model(nodes, inputs, [t("y", (rows, cols))])
    else:
        raise MapperError(f"kernel kind {kind!r} is not one of {', '.join(PLANS)}")
    return _model(nodes, [t("x", (rows, cols))], [t("y", (rows, cols))], [weight] if weight is not None else [])


def _attention_nodes(k: str, v: str, elem: int) -> list:
    """QK^T -> scale -> softmax -> PV over q and the keys and values `k`, `v` (the constant `scale` cast to
    the element type), as exporters emit unfused attention."""
    return [
        helper.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Cast", ["scale"], ["scale_c"], to=elem),
        helper.make_node("Mul", ["scores", "scale_c"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", v], ["o"]),
    ]


def _gqa_model(shape: tuple[int, ...], elem: int, t) -> bytes:
    """One decode step's grouped-query attention as exporters write it: K and V repeated to every query head
    (HF repeat_kv: Unsqueeze -> Expand -> Reshape), then QK^T, scale, softmax, PV."""
    b, hq, hkv, s, d = shape
    consts: dict[str, np.ndarray] = {
        "scale": np.array(d**-0.5, dtype=np.float32),
        "axis2": np.array([2], dtype=np.int64),
        "expand_to": np.array([b, hkv, hq // hkv, s, d], dtype=np.int64),
        "heads": np.array([b, hq, s, d], dtype=np.int64),
    }
    nodes = []
    for x in "kv":
        nodes += [
            helper.make_node("Unsqueeze", [x, "axis2"], [f"{x}_u"]),
            helper.make_node("Expand", [f"{x}_u", "expand_to"], [f"{x}_e"]),
            helper.make_node("Reshape", [f"{x}_e", "heads"], [f"{x}_r"]),
        ]
    nodes += _attention_nodes("k_r", "v_r", elem)
    inputs = [t("q", (b, hq, 1, d)), t("k", (b, hkv, s, d)), t("v", (b, hkv, s, d))]
    inits = [numpy_helper.from_array(v, n) for n, v in consts.items()]
    return _model(nodes, inputs, [t("o", (b, hq, 1, d))], inits)


def compare_kernel_csv(path: str | os.PathLike, hw, timing: str = "graph") -> list[dict]:
    """Predicted against measured for every row of a `bench/gpu_kernels.py` CSV, on profile `hw`: the rows'
    `graph_s` against graph-replay launches (`timing="graph"`), or `median_s` against eager ones."""
    if timing not in TIMINGS:
        raise MapperError(f"timing {timing!r} is not one of {', '.join(TIMINGS)}")
    column, launch = TIMINGS[timing]
    path = _checked(path, "kernel CSV")
    out = []
    with path.open(newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle), start=2):
            kind, shape, measured, (elem, plan_dtype) = _parse_row(row, column, f"kernel CSV {path.name} row {i}")
            result = map_workload(
                load_workload(kernel_model(kind, shape, elem)),
                hw,
                PlanOptions(dtype=plan_dtype, fusion=PLANS[kind], launch=launch),
            )
            predicted = result.totals.latency_s
            main = max(result.kernels, key=lambda e: e.time_s)
            out.append(
                {
                    "kind": kind,
                    "shape": row["shape"],
                    "dtype": row["dtype"],
                    "measured_s": measured,
                    "predicted_s": predicted,
                    "error": (predicted - measured) / measured if measured > 0 else None,
                    "measured_tflops_per_s": float(row.get("flops") or 0.0) / measured / 1e12 if measured > 0 else 0.0,
                    "predicted_tflops_per_s": result.totals.flops / predicted / 1e12 if predicted else 0.0,
                    "predicted_class": main.bottleneck,
                    "kernels": len(result.kernels),
                }
            )
    return out


def _checked(path: str | os.PathLike, what: str) -> Path:
    """The CSV's path, once it is a file within the trace size limit (a bench CSV, read whole)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size > limits.MAX_TRACE_BYTES:
        raise MapperError(f"{what} {path} is missing or over {limits.limit_text('MAX_TRACE_BYTES')}")
    return path


SHAPE_RANKS = {
    "gemm": 3,
    "attention-fused": 4,
    "attention-unfused": 4,
    "attention-decode": 4,
    "attention-decode-gqa": 5,
}


def _parse_row(row: dict, column: str, where: str):
    """(kind, shape, measured seconds, (ONNX element type, plan dtype)) of one CSV row, or one line naming it."""
    try:
        kind = row["kind"]
        if kind not in PLANS:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(PLANS)}")
        shape = tuple(int(x) for x in row["shape"].split("x"))
        if len(shape) != SHAPE_RANKS.get(kind, 2) or min(shape) < 1:
            raise ValueError(f"shape {row['shape']!r} is not {SHAPE_RANKS.get(kind, 2)} positive sizes for {kind}")
        measured = float(row[column])
        dtype = DTYPES[row["dtype"]]
    except (KeyError, ValueError, AttributeError) as exc:
        raise MapperError(f"{where}: {exc!s:.80}; write it with bench/gpu_kernels.py") from None
    return kind, shape, measured, dtype


STEP_MODELS = {"llama2-7b": "llama2-7b"}  # a `bench/gpu_decode.py` model name -> the built-in it mirrors


def compare_step_csv(path: str | os.PathLike, hw, opener) -> list[dict]:
    """Predicted against measured for every row of a `bench/gpu_decode.py` CSV: the built-in the row's model
    mirrors, bound at its batch, new tokens and cached tokens, bf16, a static KV cache written in place (one
    contiguous cache a sequence, no pages: what the script ran), the step replayed from a CUDA graph (the profile's
    graph launch cost) and fused attention. `opener(name)` gives a model handle (`mapper.open_model`), so one
    handle serves every row."""
    path = _checked(path, "step CSV")
    options = PlanOptions(dtype="bf16", runtime="vllm", kv_cache="static", launch="graph")
    handles, out = {}, []
    with path.open(newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle), start=2):
            try:
                model, phase = STEP_MODELS[row["model"]], row["phase"]
                batch, seq, past = (int(row[k]) for k in ("batch", "seq", "past"))
                measured = float(row["graph_s"])
            except (KeyError, ValueError) as exc:
                raise MapperError(
                    f"step CSV {path.name} row {i}: {exc!s:.60}; write it with bench/gpu_decode.py"
                ) from None
            if model not in handles:
                handles[model] = opener(model)
            result = map_workload(handles[model].bind({"batch": batch, "seq": seq, "past": past}), hw, options)
            predicted = result.totals.latency_s
            out.append(
                {
                    "model": row["model"],
                    "phase": phase,
                    "batch": batch,
                    "seq": seq,
                    "past": past,
                    "measured_s": measured,
                    "predicted_s": predicted,
                    "error": (predicted - measured) / measured if measured > 0 else None,
                    "kernels": len(result.kernels),
                }
            )
    return out
