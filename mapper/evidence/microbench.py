"""Kernel micro-benchmarks against the engine: the one-op ONNX graph behind each measured row.

`bench/gpu_kernels.py` times GEMMs, attention (fused and unfused) and normalizations on a GPU and writes
a CSV; `compare_kernel_csv` maps each row's graph on a profile with the plan the row ran (fused
attention -> FlashAttention fusion; unfused -> one kernel per op) and reports predicted against measured.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.result import PlanOptions
from mapper.pipeline import load_workload, map_workload

DTYPES = {
    "bfloat16": (TensorProto.BFLOAT16, "bf16"),
    "float16": (TensorProto.FLOAT16, "fp16"),
    "float32": (TensorProto.FLOAT, "fp32"),
}
PLANS = {
    "gemm": "default",
    "attention-fused": "aggressive",
    "attention-unfused": "none",
    "layernorm": "default",
    "rmsnorm": "default",
    "softmax": "default",
}


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
    if kind.startswith("attention"):
        b, h, s, d = shape
        scale = numpy_helper.from_array(np.array(d**-0.5, dtype=np.float32), "scale")
        nodes = [
            helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["q", "kt"], ["scores"]),
            helper.make_node("Cast", ["scale"], ["scale_c"], to=elem),
            helper.make_node("Mul", ["scores", "scale_c"], ["scaled"]),
            helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v"], ["o"]),
        ]
        return _model(nodes, [t(n, (b, h, s, d)) for n in "qkv"], [t("o", (b, h, s, d))], [scale])
    rows, cols = shape
    weight = numpy_helper.from_array(np.ones(cols, dtype=np.float32), "w")
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
    else:
        raise MapperError(f"kernel kind {kind!r} is not one of {', '.join(PLANS)}")
    return _model(nodes, [t("x", (rows, cols))], [t("y", (rows, cols))], [weight] if weight is not None else [])


def compare_kernel_csv(path: str | os.PathLike, hw) -> list[dict]:
    """Predicted against measured for every row of a `bench/gpu_kernels.py` CSV, on profile `hw`."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size > limits.MAX_TRACE_BYTES:
        raise MapperError(f"kernel CSV {path} is missing or over {limits.limit_text('MAX_TRACE_BYTES')}")
    out = []
    with path.open(newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle), start=2):
            try:
                kind, dtype = row["kind"], row["dtype"]
                shape = tuple(int(x) for x in row["shape"].split("x"))
                measured = float(row["median_s"])
                elem, plan_dtype = DTYPES[dtype]
            except (KeyError, ValueError) as exc:
                raise MapperError(
                    f"kernel CSV {path.name} row {i}: {exc!s:.60}; write it with bench/gpu_kernels.py"
                ) from None
            result = map_workload(
                load_workload(kernel_model(kind, shape, elem)), hw, PlanOptions(dtype=plan_dtype, fusion=PLANS[kind])
            )
            predicted = result.totals.latency_s
            main = max(result.kernels, key=lambda e: e.time_s)
            out.append(
                {
                    "kind": kind,
                    "shape": row["shape"],
                    "dtype": dtype,
                    "measured_s": measured,
                    "predicted_s": predicted,
                    "error": (predicted - measured) / measured if measured > 0 else None,
                    "measured_tflops_per_s": float(row.get("tflops_per_s") or 0.0),
                    "predicted_tflops_per_s": result.totals.flops / predicted / 1e12 if predicted else 0.0,
                    "predicted_class": main.bottleneck,
                    "kernels": len(result.kernels),
                }
            )
    return out
