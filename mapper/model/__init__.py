"""Stage one, import: ONNX bytes -> Graph at concrete shapes (bindings, branches, quantized ops,
shape rules, constant folding, ONNX Runtime's inference as the last fallback, external-data stripping)."""
