"""Hostile inputs of issue 31's item 1, built small and fast: shared by bench/bench_hostile.py and the tests
(tests/security/test_config_bounds.py).

Configs are a shipped config.json with one field set past reason. ONNX files are written as protobuf wire bytes
directly (mapper.model.wire's encoding), since onnx.helper takes ~10 s to build a million NodeProtos in Python.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from mapper.model.wire import LEN, VARINT, field_key, varint_bytes

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
IR_VERSION, OPSET = 8, 17


def config(name: str, **fields) -> dict:
    """A shipped config (data/configs/NAME.json) with `fields` set over it."""
    return {**json.loads((CONFIGS / f"{name}.json").read_text()), **fields}


BERT = {
    "model_type": "bert",
    "num_hidden_layers": 12,
    "hidden_size": 768,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
}

# name -> (the config, the field or limit its one error line names). Each asks for far more than a server has:
# 10^11 nodes, 10^8 experts' nodes, an 8 GiB table, 10^20 parameters.
HOSTILE_CONFIGS: dict[str, tuple[dict, str]] = {
    "layers 1e9": (config("llama-3-8b", num_hidden_layers=10**9), "MAX_NODES"),
    "hidden_size 2^31": (config("llama-3-8b", hidden_size=2**31), "MAX_PARAMETERS"),
    "head_dim 2^31": (config("llama-3-8b", head_dim=2**31), "MAX_PARAMETERS"),
    "head_dim 2^30, narrow": (
        config("llama-3-8b", head_dim=2**30, hidden_size=8, num_attention_heads=1, num_key_value_heads=1),
        "MAX_CONFIG_TABLE_BYTES",
    ),
    "experts 1e6": (config("mixtral-8x7b", num_local_experts=10**6), "MAX_NODES"),
    "bert layers 1e6": ({**BERT, "num_hidden_layers": 10**6}, "MAX_NODES"),
}


# A million entries differ only in their names: each field key and each length prefix is encoded once
_len_key = cache(lambda number: field_key(number, LEN))
_varint = cache(varint_bytes)


def _field(number: int, body: bytes) -> bytes:
    return _len_key(number) + _varint(len(body)) + body


def _text(number: int, text: str) -> bytes:
    return _field(number, text.encode())


def _node(op_type: str, inputs: list[str], outputs: list[str]) -> bytes:
    """NodeProto: input (1), output (2), op_type (4)."""
    body = b"".join(_text(1, i) for i in inputs) + b"".join(_text(2, o) for o in outputs) + _text(4, op_type)
    return _field(1, body)  # GraphProto.node


def _value_info(name: str, dims: list[int]) -> bytes:
    """ValueInfoProto {name, type {tensor_type {elem_type FLOAT, shape {dim {dim_value}}}}}."""
    return _text(1, name) + _float_type(tuple(dims))


@cache
def _float_type(dims: tuple[int, ...]) -> bytes:
    """ValueInfoProto.type: a float tensor of `dims`."""
    shape = b"".join(_field(1, field_key(1, VARINT) + varint_bytes(d)) for d in dims)
    tensor_type = field_key(1, VARINT) + varint_bytes(1) + _field(2, shape)
    return _field(2, _field(1, tensor_type))


def onnx_bytes(nodes: bytes, inputs: list[tuple[str, list[int]]], outputs: list[tuple[str, list[int]]]) -> bytes:
    """ModelProto {ir_version, graph {nodes, name, input, output}, opset_import {version}} as wire bytes."""
    graph = nodes + _text(2, "hostile")
    graph += b"".join(_field(11, _value_info(n, d)) for n, d in inputs)
    graph += b"".join(_field(12, _value_info(n, d)) for n, d in outputs)
    opset = field_key(2, VARINT) + varint_bytes(OPSET)
    return field_key(1, VARINT) + varint_bytes(IR_VERSION) + _field(7, graph) + _field(8, opset)


def relu_chain(count: int) -> bytes:
    """`count` Relu nodes in a chain over x [8]: the node limit's case (1M nodes: ~28 MB)."""
    names = [f"t{i}" for i in range(count + 1)]
    relu = _text(4, "Relu")  # NodeProto as _node writes it: input (1), output (2), op_type (4)
    nodes = b"".join(_field(1, _text(1, names[i]) + _text(2, names[i + 1]) + relu) for i in range(count))
    return onnx_bytes(nodes, [("t0", [8])], [(f"t{count}", [8])])


def wide_sum(inputs: int, nodes: int = 1) -> bytes:
    """`nodes` Sum nodes, each over the graph input x repeated `inputs` times (12M inputs: 36 MB, the issue's case)."""
    one = _text(1, "x") * inputs
    body = b"".join(_field(1, one + _text(2, f"s{i}") + _text(4, "Sum")) for i in range(nodes))
    return onnx_bytes(body, [("x", [8])], [(f"s{i}", [8]) for i in range(nodes)])


def relu() -> bytes:
    return _node("Relu", ["x"], ["y"])


def initializers(count: int) -> bytes:
    """`count` one-element float initializers (TensorProto dims, data_type, name, raw_data) beside one Relu."""
    one = field_key(1, VARINT) + varint_bytes(1) + field_key(2, VARINT) + varint_bytes(1)
    raw = _field(9, b"\0\0\0\0")
    tensors = b"".join(_field(5, one + _text(8, f"w{i}") + raw) for i in range(count))
    return onnx_bytes(relu() + tensors, [("x", [8])], [("y", [8])])


def value_infos(count: int) -> bytes:
    """`count` value_info entries beside one Relu."""
    infos = b"".join(_field(13, _value_info(f"v{i}", [8])) for i in range(count))
    return onnx_bytes(relu() + infos, [("x", [8])], [("y", [8])])


# name -> (the file's bytes, built on demand, and the limit its one error line names)
HOSTILE_ONNX = {
    "1M nodes": (lambda: relu_chain(1_000_000), "MAX_NODES"),
    "Sum of 12M inputs": (lambda: wide_sum(12_000_000), "MAX_NODE_INPUTS"),
    "40 Sums of 60k inputs": (lambda: wide_sum(60_000, 40), "MAX_EDGES"),
    "2M initializers": (lambda: initializers(2_000_000), "MAX_TENSORS"),
    "2M value infos": (lambda: value_infos(2_000_000), "MAX_VALUE_INFOS"),
}
