"""Shared fixtures: tiny ONNX graphs built with onnx.helper, and the engine's common objects."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mapper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS_DIR = Path(__file__).parent / "models"


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> bytes:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def weight(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.zeros(shape, dtype=dtype), name)


def gemm_model(m: int, n: int, k: int, dtype=TensorProto.FLOAT16) -> bytes:
    return make_model(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        [tensor("a", [m, k], dtype), tensor("b", [k, n], dtype)],
        [tensor("c", [m, n], dtype)],
    )


def attention_model(batch: int, heads: int, seq: int, head_dim: int, q_len: int | None = None) -> bytes:
    """Q K^T -> scale -> softmax -> P V, as exporters emit unfused attention; `q_len` queries over `seq` keys
    (1: a decode step over a cache of `seq`), `seq` queries when not given."""
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
    ]
    shape, q_shape = [batch, heads, seq, head_dim], [batch, heads, seq if q_len is None else q_len, head_dim]
    return make_model(
        nodes,
        [tensor("q", q_shape, TensorProto.FLOAT16), *(tensor(n, shape, TensorProto.FLOAT16) for n in "kv")],
        [tensor("o", q_shape, TensorProto.FLOAT16)],
        [numpy_helper.from_array(np.array(head_dim**-0.5, dtype=np.float16), "scale")],
    )


@pytest.fixture(scope="session")
def h100():
    return mapper.load_hardware("h100-sxm")


def light_models():
    return sorted(p for p in LIGHT_DIR.glob("*.onnx")) if LIGHT_DIR.exists() else []


os.environ.setdefault("MAPPER_TEST", "1")


@pytest.fixture(autouse=True)
def _restore_main_module():
    """Streamlit's AppTest installs the page script as sys.modules['__main__'] and leaves it there; a later
    test that spawns worker processes (Dask, process pools) would re-run that page in every worker."""
    import sys

    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


# The dashboard under test and its pages (AppTest names), shared by the app and red-team tests.
APP = str(Path(__file__).resolve().parents[1] / "app.py")
PAGES = [
    "overview",
    "layers",
    "kernels",
    "roofline",
    "timeline",
    "serving",
    "power",
    "devices",
    "validation",
    "sweep",
    "search",
    "compare",
    "hardware",
    "export",
]
