"""Make the int8 fixtures with ONNX Runtime's quantizers: ResNet-50 static, in both of its formats, and
BERT-base dynamic.

    .venv/bin/pip install sympy        # onnxruntime.quantization's pre-processing imports it
    .venv/bin/python tests/models/export_quantized.py

The float model is the built-in ResNet-50 (`mapper.build_zoo_model("resnet50")`, symbolic batch) with
deterministic stand-in weights (He-scaled normal convs and FC, identity BatchNorm), so that ONNX
Runtime can run it for calibration. Then, as a user of onnxruntime.quantization would:
`quant_pre_process` (folds BatchNorm into the convs) and `quantize_static` with per-tensor uint8
activations and int8 weights, calibrated on four seeded random images, once with
`QuantFormat.QOperator` (QLinearConv, com.microsoft QLinearAdd / QLinearGlobalAveragePool / QGemm) and
once with `QuantFormat.QDQ` (QuantizeLinear -> DequantizeLinear pairs around float Conv/Add/Gemm).
BERT-base (`mapper.build_zoo_model("bert-base")`, symbolic batch and sequence, the same kind of stand-in
weights) goes through `quantize_dynamic` with int8 weights, the usual recipe for transformers on CPU:
each Linear becomes DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the product of the two
scales, the form ONNX Runtime fuses into MatMulIntegerToFloat at load.
Each result is saved with every tensor over 1 KiB as external data, and that `.data` file is deleted:
the committed files are graph-only, like the Hugging Face fixtures (see README.md here).
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

HERE = Path(__file__).parent
SEED = 0
CALIBRATION_IMAGES = 4


def float_zoo_model(name: str, path: Path) -> str:
    """A built-in model with stand-in weights in place of its absent external ones; its first input's name."""
    sys.path.insert(0, str(HERE.parents[1]))
    import mapper

    model = mapper.build_zoo_model(name)
    rng = np.random.default_rng(SEED)
    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        dims = tuple(t.dims)
        if t.data_type != onnx.TensorProto.FLOAT:  # integer constants (token type ids): zeros
            value = np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        elif len(dims) >= 2:  # conv and FC weights: He-scaled so activations stay finite through 50 layers
            value = (rng.standard_normal(dims) * math.sqrt(1.0 / math.prod(dims[1:]))).astype(np.float32)
        elif t.name.endswith(("running_var", ".weight")):
            value = np.ones(dims, np.float32)
        else:
            value = np.zeros(dims, np.float32)
        t.CopyFrom(numpy_helper.from_array(value, t.name))
    onnx.save(model, path)
    return model.graph.input[0].name


def graph_only(model_path: Path, out: Path) -> None:
    model = onnx.load(model_path)
    model.graph.name = out.stem
    location = out.name + ".data"
    onnx.save_model(
        model, out, save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=1024
    )
    (out.parent / location).unlink()
    print(f"{out}: {out.stat().st_size} bytes, external data deleted")


def main() -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        input_name = float_zoo_model("resnet50", tmp / "float.onnx")
        quant_pre_process(str(tmp / "float.onnx"), str(tmp / "pre.onnx"), skip_symbolic_shape=True)

        class Images(CalibrationDataReader):
            def __init__(self):
                rng = np.random.default_rng(SEED)
                self.batches = [
                    {input_name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                    for _ in range(CALIBRATION_IMAGES)
                ]

            def get_next(self):
                return self.batches.pop() if self.batches else None

        for name, fmt in (("resnet50_int8_qoperator", QuantFormat.QOperator), ("resnet50_int8_qdq", QuantFormat.QDQ)):
            quantize_static(
                str(tmp / "pre.onnx"),
                str(tmp / f"{name}.onnx"),
                Images(),
                quant_format=fmt,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=False,
            )
            graph_only(tmp / f"{name}.onnx", HERE / f"{name}.onnx")

        float_zoo_model("bert-base", tmp / "bert.onnx")
        quantize_dynamic(str(tmp / "bert.onnx"), str(tmp / "bert_base_int8_dynamic.onnx"), weight_type=QuantType.QInt8)
        graph_only(tmp / "bert_base_int8_dynamic.onnx", HERE / "bert_base_int8_dynamic.onnx")


if __name__ == "__main__":
    main()
