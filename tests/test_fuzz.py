"""Fuzzing the untrusted-input boundary (CI size; bench/fuzz.py runs 100,000 cases).

Every input either maps or is rejected with a one-line MapperError, within a time bound, and keeps the
rest of run_case's contract (the outcome its generator implies, no file opened, no formula written). The
regression tests rebuild, with onnx.helper, each crash the fuzzer found (docs/fuzzing.md).
"""

from __future__ import annotations

import collections
import random
import resource
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import mapper
from tests import fuzz_attacks, fuzz_checks
from tests.conftest import make_model, tensor, weight
from tests.fuzz_cases import (
    ATTACK_SHARES,
    BAD_NUMBERS,
    MESSAGE_CHARS,
    Case,
    CaseTimeout,
    attack_generator,
    base_profile,
    make_case,
    real_models,
    run_case,
    time_bound,
)

CASE_BOUND_S = 10.0
FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def outcome(case) -> str:
    try:
        with time_bound(CASE_BOUND_S):
            return run_case(case)
    except CaseTimeout:
        pytest.fail(f"hang: {case.describe()[:300]}")


@pytest.mark.slow
@FUZZ
@given(st.integers(min_value=0, max_value=2**32))
def test_generated_cases_keep_the_contract(seed):
    """Mutated real models, random graphs and protobufs, hostile profiles and traces, the attack classes
    (tests/fuzz_cases.py, tests/fuzz_attacks.py). run_case raises on a crash and on a broken contract; the
    test below shows each of its checks firing."""
    outcome(make_case(seed))


def test_run_case_fails_a_case_that_breaks_the_contract(monkeypatch, tmp_path):
    """Each check of run_case can fail a case: a wrong outcome, a long or multi-line message, a file opened,
    an external reference left after stripping."""
    with pytest.raises(AssertionError, match="must be mapped, was rejected"):
        run_case(Case("model", "junk", b"\x00junk", expect="mapped"))
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"1")
    real_load = mapper.load_workload
    two_lines = mapper.MapperError("")
    two_lines.args = ("two\nlines",)  # (MapperError joins the lines it is given; an override could split them)

    def raising(exc):
        def load(*args):
            raise exc

        return load

    for fake, match in (
        (lambda *a: real_load(secret.read_bytes()), "open"),
        (raising(mapper.MapperError("x" * (MESSAGE_CHARS + 1))), "one line"),
        (raising(two_lines), "one line"),
    ):
        monkeypatch.setattr(mapper, "load_workload", fake)
        with pytest.raises(AssertionError, match=match):
            run_case(Case("model", "fake", b"", checks=(fuzz_attacks.FILES,)))
    monkeypatch.undo()
    external = fuzz_attacks.external_data_model(random.Random(0))
    monkeypatch.setattr("mapper.model.ort_shapes.without_external_data", lambda m: m)  # a stripper that strips nothing
    with pytest.raises(AssertionError, match="external references left"):
        run_case(Case("model", external.label, external.data, checks=external.checks))


def test_every_place_of_external_data_is_generated_and_found():
    """The external-data generator hides a reference in each place (attributes, sparse tensors, bodies), and
    the walk the strip check uses finds it there."""
    import onnx

    seen = set()
    for seed in range(400):
        attack = fuzz_attacks.external_data_model(random.Random(seed))
        m = onnx.ModelProto()
        m.ParseFromString(attack.data)
        assert fuzz_checks.external_references(m), attack.label
        seen.add(attack.label)
    assert seen == {f"external:{w}" for w in fuzz_attacks.EXTERNAL_PLACES}


def test_the_sheet_checks_find_formulas_and_markup():
    import io

    import openpyxl

    assert fuzz_checks.live_formulas_in_csv(b'a,b,c\n=1+1,-1.5,ok\n@SUM(A1),"\tx",-x\n') == [
        "=1+1",
        "@SUM(A1)",
        "\tx",
        "-x",
    ]
    book = openpyxl.Workbook()
    book.active["A1"], book.active["B1"] = '=HYPERLINK("http://127.0.0.1:9")', "text"
    buffer = io.BytesIO()
    book.save(buffer)
    assert fuzz_checks.live_formulas_in_xlsx(buffer.getvalue()) == ["Sheet!A1"]
    model = b"<iframe src=http://127.0.0.1:1>"
    assert fuzz_checks.raw_markup_in_html(b"<p><iframe src=http://127.0.0.1:1></p>", model) == [model.decode()]
    assert fuzz_checks.raw_markup_in_html(b"<p>&lt;iframe src=http://127.0.0.1:1&gt;</p>", model) == []


@pytest.mark.parametrize("payload", [h for h in fuzz_attacks.HOSTILE if len(h) < 1000])
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_hostile_names_map_and_write_sheets_without_formulas_or_markup(payload):
    """A hostile string as the graph name, every node name and an op type: the model maps, and its .xlsx,
    .csv and .html sheets (as `map --out` writes them) hold no live formula cell and no raw markup."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name=payload),
        helper.make_node(payload, ["r"], ["y"], name=payload),
    ]
    graph = helper.make_graph(nodes, payload, [tensor("x", [2, 4])], [tensor("y", [2, 4])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    result = mapper.map_workload(mapper.load_workload(data), mapper.load_hardware("h100-sxm"))
    fuzz_checks.check_sheets(result, data)  # raises on a live formula, raw markup, or a writer's own exception


def test_each_attack_class_has_its_share():
    """A fifth of the seeds go to the attack classes, each near its share; the rest are classic cases."""
    seeds = 20_000
    counts = collections.Counter(attack_generator(s) for s in range(seeds))
    for share, generator in ATTACK_SHARES:
        assert abs(counts[generator] / seeds - share) < 0.006, generator.__name__
    assert abs(counts[None] / seeds - (1 - sum(share for share, _ in ATTACK_SHARES))) < 0.01


@pytest.mark.slow
@FUZZ
@given(st.sampled_from([name for name, _ in real_models()[:12]]), st.data())
def test_truncated_and_flipped_real_models(name, data):
    raw = bytearray(dict(real_models())[name])
    cut = data.draw(st.integers(0, len(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 7)), max_size=4))
    for at, bit in flips:
        raw[at] ^= 1 << bit
    try:
        with time_bound(CASE_BOUND_S):
            mapper.map_workload(mapper.load_workload(bytes(raw[:cut])), mapper.load_hardware("h100-sxm"))
    except mapper.MapperError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes_are_rejected(data):
    with pytest.raises(mapper.MapperError):
        mapper.load_workload(data)


@FUZZ
@given(st.data())
def test_profile_fields_with_hostile_values(data):
    """Any one number of a real profile set to 0, negative, NaN, inf, a string, a list... or removed."""
    import copy

    tree = copy.deepcopy(base_profile())
    section = data.draw(st.sampled_from(sorted(tree)))
    if not isinstance(tree[section], dict):
        return
    key = data.draw(st.sampled_from(sorted(tree[section])))
    value = data.draw(st.sampled_from(BAD_NUMBERS + ("missing",)))
    if value == "missing":
        del tree[section][key]
    elif isinstance(tree[section][key], dict) and "value" in tree[section][key]:
        tree[section][key]["value"] = value
    else:
        tree[section][key] = value
    try:
        hw = mapper.load_hardware(tree)
    except mapper.MapperError as exc:
        assert "\n" not in str(exc) and (section in str(exc) or "top level" in str(exc))
        return
    mapper.map_workload(mapper.load_workload("resnet50", {"batch": 1}), hw)


@pytest.mark.slow
def test_memory_stays_bounded_over_many_cases():
    """200 cases: the process's peak RSS grows by under 1 GiB (caps on elements and folding hold)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for seed in range(10_000, 10_200):
        outcome(make_case(seed))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1 << 20  # KiB


# ---- the crashes the fuzzer found, rebuilt by hand ---------------------------------------------


def _mapped_or_rejected(data: bytes, dims=None) -> str:
    try:
        mapper.map_workload(mapper.load_workload(data, dims or {}), mapper.load_hardware("h100-sxm"))
    except mapper.MapperError as exc:
        return str(exc)
    return "mapped"


def _relu_then(node, inputs, inits=()):
    return make_model([helper.make_node("Relu", ["x"], ["r"]), node], inputs, [tensor(node.output[0], None)], inits)


@pytest.mark.parametrize(
    "node,inits",
    [
        (helper.make_node("Gemm", ["r", "w"], ["y"]), [weight("w", (4,))]),  # rank-1 operands
        (helper.make_node("Conv", ["r", "w"], ["y"]), [weight("w", (4, 4))]),  # rank-2 weight
        (helper.make_node("ConvTranspose", ["r"], ["y"]), []),  # missing weight
        (helper.make_node("MatMul", ["r"], ["y"]), []),  # missing operand
        (helper.make_node("ReduceMean", [], ["y"]), []),  # no inputs at all
        (helper.make_node("Softmax", [], ["y"]), []),
        (helper.make_node("Attention", ["r", "w"], ["y"], domain="com.microsoft"), [weight("w", (4, 12))]),  # rank 2
        (helper.make_node("MultiHeadAttention", ["r"], ["y"], domain="com.microsoft"), []),
        (helper.make_node("Einsum", ["r", "r"], ["y"]), []),  # no equation
    ],
)
def test_nodes_missing_inputs_or_rank_are_unmodeled_not_crashes(node, inits):
    assert _mapped_or_rejected(_relu_then(node, [tensor("x", [2, 4])], inits)) == "mapped"


@pytest.mark.parametrize(
    "attr,value,inputs",
    [
        ("num_heads", "constant", ["r"]),
        ("axis", [1, 2], ["r"]),
        ("kernel_shape", 3, ["r"]),
        ("value", "text", []),
    ],
)
def test_attributes_of_the_wrong_type_are_rejected(attr, value, inputs):
    op = {"num_heads": "MultiHeadAttention", "axis": "Softmax", "kernel_shape": "MaxPool", "value": "ConstantOfShape"}
    node = helper.make_node(op[attr], inputs or ["shape"], ["y"], domain="com.microsoft" if attr == "num_heads" else "")
    node.attribute.append(helper.make_attribute(attr, value))
    inits = [numpy_helper.from_array(np.array([2, 4], np.int64), "shape")]
    message = _mapped_or_rejected(_relu_then(node, [tensor("x", [2, 4, 8])], inits))
    assert f"attribute {attr!r} must be" in message


def test_a_tensor_produced_twice_is_rejected():
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["y"])]
    message = _mapped_or_rejected(make_model(nodes, [tensor("x", [2, 4])], [tensor("y", [2, 4])]))
    assert "'y' is produced by both" in message
    shadow = [helper.make_node("Relu", ["x"], ["w"])]
    assert "produced by both" in _mapped_or_rejected(
        make_model(shadow, [tensor("x", [4])], [tensor("w", [4])], [weight("w", (4,))])
    )


def test_a_reshape_whose_target_does_not_fit_folds_to_nothing():
    nodes = [helper.make_node("Reshape", ["c", "t"], ["y"]), helper.make_node("Add", ["x", "y"], ["z"])]
    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.int64), "c"),
        numpy_helper.from_array(np.array([4, -1], np.int64), "t"),
    ]
    graph = helper.make_graph(
        nodes, "g", [tensor("x", [4, 2])], [tensor("z", [4, 2])], initializer=inits, value_info=[tensor("y", [4, 2])]
    )  # a declared shape the fallback would take
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    assert _mapped_or_rejected(data) == "mapped"


def test_a_profile_count_beyond_2_to_the_53_is_rejected():
    import copy

    tree = copy.deepcopy(base_profile())
    tree["compute"]["compute_units"]["value"] = 1 << 70
    with pytest.raises(mapper.MapperError, match="compute.compute_units must be <="):
        mapper.load_hardware(tree)


def test_the_time_bound_fires():
    with pytest.raises(CaseTimeout), time_bound(0.2):
        while True:
            pass


def test_mutated_model_dims_of_zero_negative_and_2_to_the_62():
    base = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [tensor("x", ["batch", 8])],
        [tensor("y", ["batch", 4])],
        [weight("w", (8, 4))],
    )
    assert _mapped_or_rejected(base, {"batch": 0}) == "mapped"
    assert "MAX_DIM" in _mapped_or_rejected(base, {"batch": -1})
    assert "MAX_DIM" in _mapped_or_rejected(base, {"batch": 1 << 62})
    huge = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [tensor("x", [1 << 62, 8])],
        [tensor("y", [1 << 62, 4])],
        [weight("w", (8, 4))],
    )
    assert "MAX_TENSOR_ELEMENTS" in _mapped_or_rejected(huge)


def test_a_4d_attention_without_a_separate_key_maps():
    node = helper.make_node("GroupQueryAttention", ["r"], ["y"])
    assert _mapped_or_rejected(_relu_then(node, [tensor("x", [1, 2, 8, 4])])) == "mapped"


def test_a_node_name_that_is_not_utf8_is_rejected():
    data = make_model([helper.make_node("Relu", ["x"], ["y"], name="QQQQ")], [tensor("x", [2])], [tensor("y", [2])])
    assert "not UTF-8" in _mapped_or_rejected(data.replace(b"QQQQ", b"Q\xecQQ"))


def test_onnx_fallback_inference_does_not_materialize_hostile_shapes():
    """Fuzz seed 503541 (a ViT with mutated initializer dims and a subgraph): onnx's shape inference with
    data propagation allocated ~24 GB for it. The fallback now infers shapes without propagating data.
    Run under a 4 GiB address-space cap so a regression fails here (bad_alloc) instead of exhausting RAM."""
    import subprocess
    import sys

    script = (
        "import resource, onnx, mapper\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "from tests.fuzz_cases import make_case, run_case\n"
        "real = onnx.shape_inference.infer_shapes\n"
        "def spy(*a, **k):\n"
        "    try:\n"
        "        return real(*a, **k)\n"
        "    except MemoryError:\n"
        "        print('BLOWUP')\n"
        "        raise\n"
        "onnx.shape_inference.infer_shapes = spy\n"
        "print(run_case(make_case(503541)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=str(Path(__file__).parent.parent),
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "BLOWUP" not in proc.stdout and proc.stdout.strip().splitlines()[-1] == "rejected"


def test_a_dim_param_literal_beyond_int64_is_not_written_into_onnx_inference():
    """Fuzz seed 609657: a graph input's dim_param '9' * 50 (an expression that is a number) reached
    protobuf's int64 dim_value in the fallback to onnx's inference: ValueError. Now it maps or is rejected."""
    nodes = [helper.make_node("Unique", ["x"], ["u"])]  # no shape rule: the fallback runs
    data = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["9" * 50, 4])],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, None)],
    )
    assert _mapped_or_rejected(data) == "mapped"
    assert outcome(make_case(609657)) == "mapped"


def test_a_dequantize_node_without_outputs_is_not_a_crash():
    """Fuzz seed 1032683 (a byte flip in the int8 QDQ ResNet-50): a DequantizeLinear of a constant with
    its output list gone folded away, and the QDQ weight bookkeeping read its first output: IndexError."""
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale"], []), helper.make_node("Relu", ["x"], ["y"])]
    inits = [
        numpy_helper.from_array(np.zeros((4, 4), np.int8), "w_q"),
        numpy_helper.from_array(np.array(0.1, np.float32), "w_scale"),
    ]
    data = make_model(nodes, [tensor("x", [4])], [tensor("y", [4])], inits)
    assert _mapped_or_rejected(data) == "mapped"  # raised IndexError before


def test_an_attention_group_on_the_host_is_not_a_crash():
    """Fuzz seed 1032683, once AlexNet joined the corpus and moved the seeds' models: a byte flip in Mixtral left
    an op of unknown type inside a fused decode attention group, the group ran on the host (no tile), and the
    paged decode latency read the tile it did not have: ValueError. The latency is a tiled kernel's only."""
    case = make_case(1032683)
    assert case.label.startswith("bytes:flip:mixtral")
    assert outcome(case) == "mapped"


def test_a_constant_without_outputs_is_not_a_crash():
    """Fuzz seed 1624208 (a byte flip in the TorchScript GPT-2, full of Constant nodes, before AlexNet joined the
    corpus and moved the seeds' models): a Constant whose output list was gone was read at its first output
    (IndexError). It makes nothing, and folds away."""
    nodes = [
        helper.make_node("Constant", [], [], value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Relu", ["x"], ["y"]),
    ]
    data = make_model(nodes, [tensor("x", [4])], [tensor("y", [4])])
    assert _mapped_or_rejected(data) == "mapped"


def test_attention_nodes_without_outputs_or_inputs_are_not_a_crash():
    """Found looking for seed 1624208's relatives (each real model with one node's outputs, then inputs,
    cleared): a Softmax with no outputs and a QK^T MatMul with no inputs reached the attention finder,
    which indexes them (IndexError)."""
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        helper.make_node("Softmax", ["s"], []),
        helper.make_node("Relu", ["q"], ["y"]),
    ]
    data = make_model(nodes, [tensor("q", [4, 4]), tensor("k", [4, 4])], [tensor("y", [4, 4])])
    assert _mapped_or_rejected(data) == "mapped"
    # and a QK^T MatMul whose inputs are gone (every attention built-in, its inputs cleared one node at a time)
    nodes = [
        helper.make_node("MatMul", [], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"]),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    data = make_model(nodes, [tensor("v", [4, 4])], [tensor("y", [4, 4])])
    assert _mapped_or_rejected(data) == "mapped"


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bert-base", "hf_gpt2_tiny_ts", "optimum_gpt2_tiny_merged"])
def test_each_node_without_its_outputs_or_inputs_maps_or_is_rejected(model):
    """The systematic form of the two seeds above: a real model with one node's outputs (then its inputs)
    cleared, for a sample of its nodes, maps or is a one-line error; never an exception."""
    import random

    import onnx

    base = onnx.ModelProto()
    base.ParseFromString(dict(real_models())[model])
    dims = {
        d.dim_param: 2
        for vi in base.graph.input
        for d in vi.type.tensor_type.shape.dim
        if d.dim_param and "+" not in d.dim_param
    } | ({"use_cache_branch": 1} if "merged" in model else {})
    for i in random.Random(0).sample(range(len(base.graph.node)), min(30, len(base.graph.node))):
        for field in ("output", "input"):
            m = onnx.ModelProto()
            m.CopyFrom(base)
            del getattr(m.graph.node[i], field)[:]
            _mapped_or_rejected(m.SerializeToString(), dims)  # raises on anything but MapperError


def test_broadcasting_beyond_numpys_64_dims_is_not_a_crash():
    """Fuzz seed 1531391 (ResNet-50 with an initializer mutated to 64 dims feeding an Expand):
    np.broadcast_shapes raised RuntimeError past its dims limit. Broadcasting is our own rule now, at any
    rank, and agrees with numpy's where numpy answers (checked on random shape sets below)."""
    from mapper.ops.shape import NoRule, broadcast

    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    data = make_model(nodes, [tensor("a", [1] * 70), tensor("b", [1] * 69 + [3])], [tensor("y", [1] * 69 + [3])])
    assert _mapped_or_rejected(data) == "mapped"  # raised RuntimeError before
    assert outcome(make_case(1531391)) == "mapped"
    rng = np.random.default_rng(0)
    for _ in range(2000):
        shapes = [
            tuple(int(d) for d in rng.choice([0, 1, 1, 2, 3], rng.integers(0, 5))) for _ in range(rng.integers(1, 4))
        ]
        try:
            want = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            want = None
        try:
            got = broadcast(*shapes)
        except NoRule:
            got = None
        assert got == want, shapes


@pytest.mark.parametrize("op", ["MatMul", "Softmax", "Gemm"])
def test_a_node_without_outputs_is_unmodeled_not_a_crash(op):
    """Found looking for the seed above's relatives: a live node whose output list is empty reached the
    work rules, which index its first output (IndexError). It is unmodeled now, with the reason."""
    node = helper.make_node(op, ["m", "m"] if op != "Softmax" else ["m"], [])
    data = make_model(
        [node, helper.make_node("Relu", ["x"], ["y"])], [tensor("m", [4, 4]), tensor("x", [4])], [tensor("y", [4])]
    )
    w = mapper.load_workload(data)
    assert "no outputs" in w.nodes[0].reason and w.nodes[0].op_class is mapper.OpClass.UNMODELED
    assert _mapped_or_rejected(data) == "mapped"


def test_a_trace_field_holding_the_rest_of_the_file_is_quoted_short():
    """Fuzz seed 70159 (the 100,000-case run on the hardened engine): a CSV trace whose quoted field ran
    over many lines put the whole field into the error, past the one-line bound; the value is now cut."""
    assert outcome(make_case(70159)) == "rejected"
