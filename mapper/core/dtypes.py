"""ONNX element types by name: the one table the import, the shape rules and the ORT fallback share."""

from __future__ import annotations

import onnx

_DTYPE_NAMES = {v: k.lower() for k, v in onnx.TensorProto.DataType.items()}
_DTYPE_NAMES[onnx.TensorProto.FLOAT] = "float32"


_DTYPE_CODES = {name: code for code, name in _DTYPE_NAMES.items()}


def dtype_name(elem_type: int) -> str:
    return _DTYPE_NAMES.get(int(elem_type), "undefined")


def dtype_code(name: str) -> int:
    """The onnx.TensorProto element type of a dtype name (0, UNDEFINED, if unknown)."""
    return _DTYPE_CODES.get(name, onnx.TensorProto.UNDEFINED)


def tensor_dtype(t: onnx.TensorProto) -> str:
    return dtype_name(t.data_type)
