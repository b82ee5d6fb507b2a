"""A prompt's logits as the runtime computes them (issue 35, mechanism 3): serving engines run the LM head on each
sequence's last token only (vLLM's LogitsProcessor, TensorRT-LLM without gather_context_logits); the exported
graph under ONNX Runtime computes every token's."""

from __future__ import annotations

import pytest

import mapper
from mapper.plan.logits import LAST_TOKEN_NOTE, logits_outputs

H100 = mapper.load_hardware("h100-sxm")
PROMPT = {"batch": 2, "seq": 1000, "past": 0}
HIDDEN, VOCAB = 4096, 32000  # Llama-2-7B's LM head: [tokens, 4096] x [4096, 32000], fp16


def _lm_head(result) -> mapper.KernelEstimate:
    return next(e for e in result.kernels if e.kernel.name.startswith("lm_head"))


@pytest.fixture(scope="module")
def prompt():
    return mapper.load_workload("llama2-7b", PROMPT)


def test_a_serving_runtime_runs_the_lm_head_on_each_sequences_last_token(prompt):
    served = _lm_head(mapper.map_workload(prompt, H100)).kernel  # auto: the vLLM preset for a decoder on a GPU
    exported = _lm_head(mapper.map_workload(prompt, H100, mapper.PlanOptions(runtime="onnxruntime"))).kernel
    assert exported.matrix is not None and exported.matrix.m == 2 * 1000
    assert exported.matrix_flops == 2.0 * 2 * 1000 * HIDDEN * VOCAB and exported.note == ""
    assert served.matrix is not None and served.matrix.m == 2 and served.note == LAST_TOKEN_NOTE
    assert served.matrix_flops == 2.0 * 2 * HIDDEN * VOCAB  # one row a sequence
    weights = HIDDEN * VOCAB * 2
    assert served.weight_bytes == exported.weight_bytes == weights  # the whole weight is still read
    activations = (2 * 1000 * HIDDEN + 2 * 1000 * VOCAB) * 2  # hidden states in, logits out
    assert exported.dram_bytes == pytest.approx(weights + activations)
    assert served.dram_bytes == pytest.approx(weights + activations / 1000)


def test_the_document_says_which_and_a_decode_step_is_unchanged(prompt):
    rows = {a["name"]: a for a in mapper.mapping_document(mapper.map_workload(prompt, H100))["assumptions"]}
    assert rows["runtime.logits"]["value"] == "last token"
    step = mapper.load_workload("llama2-7b", {"batch": 2, "seq": 1, "past": 1000})
    served = _lm_head(mapper.map_workload(step, H100)).kernel
    exported = _lm_head(mapper.map_workload(step, H100, mapper.PlanOptions(runtime="onnxruntime"))).kernel
    assert served.matrix_flops == exported.matrix_flops and served.note == ""


def test_only_a_decoders_logits_are_found(prompt):
    assert logits_outputs(prompt.graph) == {"logits": 1000}
    assert logits_outputs(mapper.load_workload("bert-base", {"batch": 1, "seq": 128}).graph) == {}


def _view_model(extra_reader: bool) -> bytes:
    """x[4, 64] @ w[64, 256] -> Identity -> the graph output y (an export's logits), and where `extra_reader`, a
    Relu of the MatMul's output as a second output."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    t = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.FLOAT16, dims)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Identity", ["h"], ["y"])]
    outputs = [t("y", [4, 256])]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["h"], ["r"]))
        outputs.append(t("r", [4, 256]))
    w = numpy_helper.from_array(np.zeros((64, 256), np.float16), "w")
    graph = helper.make_graph(nodes, "view", [t("x", [4, 64])], outputs, initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("extra_reader", [False, True])
def test_a_view_shown_outside_its_kernel_is_written_once(extra_reader):
    """The MatMul's kernel absorbs the Identity (a free view): the output it shows is written once, 4 x 256 fp16,
    whether the view is the only reader (it was not written at all before) or another kernel reads the tensor
    too (the view adds no second write)."""
    result = mapper.map_workload(mapper.load_workload(_view_model(extra_reader), {}), H100)
    matmul = next(e.kernel for e in result.kernels if "MatMul" in e.kernel.op_types)
    assert matmul.dram_bytes == (4 * 64 + 64 * 256 + 4 * 256) * 2
