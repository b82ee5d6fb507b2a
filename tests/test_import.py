"""Import and work model on real graphs: the onnx package's light models, HF exports, bad files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mapper
from mapper.core.errors import MapperError
from tests.conftest import LIGHT_DIR, MODELS_DIR, make_model, tensor, weight
from tests.models.flops import DIM_NAMES, matrix_flops

# Published matrix MACs (conv + linear, batch 1, 224x224) where the architecture matches the file:
# torchvision model docs, "GFLOPS" column (= GMACs, the weights' "_ops" meta): ResNet-50 4.089,
# VGG-19 19.63, DenseNet-121 2.834, SqueezeNet 1.1 0.35 (hardware-facts.md part 3).
PUBLISHED_GMACS = {"light_resnet50": 4.089, "light_vgg19": 19.63, "light_densenet121": 2.834, "light_squeezenet": 0.35}
LIGHT = [
    "light_bvlc_alexnet",
    "light_densenet121",
    "light_inception_v1",
    "light_inception_v2",
    "light_resnet50",
    "light_shufflenet",
    "light_squeezenet",
    "light_vgg19",
    "light_zfnet512",
]


def onnx_tool_matrix_macs(path) -> float:
    """The peer's count of the same file: onnx-tool's per-node MACs over Conv/Gemm/MatMul nodes.

    onnx-tool counts a conv's bias add as one MAC per output element; we count it as elementwise
    work, so the bias is subtracted to compare like with like.
    """
    onnx_tool = pytest.importorskip("onnx_tool")
    m = onnx_tool.Model(str(path))
    g = m.graph
    g.graph_reorder_nodes()
    g.shape_infer()
    g.profile()
    total = 0.0
    for node in g.nodemap.values():
        if node.op_type in ("Conv", "Gemm", "MatMul"):
            macs = float(node.macs[0])
            if len(node.input) > 2:  # bias: one add per output element
                macs -= float(np.prod(g.tensormap[node.output[0]].get_shape()))
            total += macs
    return total


@pytest.mark.parametrize("stem", LIGHT)
def test_light_models_matrix_macs_match_published_or_peer(stem):
    w = mapper.load_workload(str(LIGHT_DIR / f"{stem}.onnx"))
    macs = w.matrix_flops / 2
    assert not w.unmodeled, w.unmodeled[:3]
    if stem in PUBLISHED_GMACS:
        assert macs / 1e9 == pytest.approx(PUBLISHED_GMACS[stem], rel=0.01)
    assert macs == pytest.approx(onnx_tool_matrix_macs(LIGHT_DIR / f"{stem}.onnx"), rel=0.01)


HF = [
    "hf_bert_tiny",
    "hf_bert_tiny_sdpa",
    "hf_gpt2_tiny",
    "hf_llama_tiny",
    "hf_llama_tiny_sdpa",
    "hf_bert_tiny_ts",
    "hf_gpt2_tiny_ts",
    "hf_llama_tiny_ts",
]  # _ts: the TorchScript exporter (dynamo=False)


@pytest.mark.parametrize("stem", HF)
@pytest.mark.parametrize("batch,seq", [(1, 1), (1, 64), (2, 16), (3, 100)])
def test_hf_exports_map_with_closed_form_matrix_flops(stem, batch, seq):
    path = MODELS_DIR / f"{stem}.onnx"
    assert not path.with_suffix(".onnx.data").exists()  # graph-only: the external data is absent
    w = mapper.load_workload(str(path), {DIM_NAMES[stem]["batch"]: batch, DIM_NAMES[stem]["seq"]: seq})
    assert w.matrix_flops == matrix_flops(stem, batch, seq)
    assert not w.unmodeled
    assert any(n.layer_type is mapper.LayerType.ATTENTION for n in w.nodes)


@pytest.mark.parametrize("batch,seq,past", [(1, 1, 16), (2, 1, 63), (2, 4, 16)])
def test_hf_llama_decode_step_with_kv_cache(batch, seq, past):
    names = DIM_NAMES["hf_llama_tiny_decode"]
    dims = {names["batch"]: batch, names["seq"]: seq, names["past"]: past, names["total"]: past + seq}
    w = mapper.load_workload(str(MODELS_DIR / "hf_llama_tiny_decode.onnx"), dims)
    assert w.matrix_flops == matrix_flops("hf_llama_tiny_decode", batch, seq, past)


@pytest.mark.parametrize("stem", ["optimum_gpt2_tiny_with_past", "optimum_llama_tiny_with_past"])
@pytest.mark.parametrize("batch,seq,past", [(1, 7, 0), (2, 1, 31), (4, 1, 2048), (3, 5, 40)])
def test_optimum_export_with_kv_cache_prefill_and_decode(stem, batch, seq, past):
    """Hugging Face Optimum's text-generation-with-past export (one graph for prefill and decode; the mask's
    dim is the expression past_sequence_length + sequence_length), GPT-2 and Llama (GQA): closed-form FLOPs
    at each binding, bound with the --batch/--seq shortcuts (batch_size, sequence_length) and the past dim
    by name."""
    w = mapper.load_workload(str(MODELS_DIR / f"{stem}.onnx"), {DIM_NAMES[stem]["past"]: past}, batch=batch, seq=seq)
    assert w.matrix_flops == matrix_flops(stem, batch, seq, past)
    assert not w.unmodeled and w.graph.name == stem
    assert any(n.layer_type is mapper.LayerType.ATTENTION for n in w.nodes)


def test_batch_and_seq_shortcuts_bind_the_named_dims():
    a = mapper.load_workload(str(MODELS_DIR / "hf_bert_tiny.onnx"), batch=2, seq=16)
    assert dict(a.graph.dims) == {"batch": 2, "seq": 16}


def test_external_data_is_never_opened(tmp_path):
    """A weight whose external data names a real file, a '..' path and an absolute path: none is opened."""
    secret = tmp_path / "weights.bin"
    secret.write_bytes(b"\0" * 4096)
    nodes = [helper.make_node("MatMul", ["x", w], [f"y{i}"]) for i, w in enumerate(("w0", "w1", "w2"))]
    inits = []
    for name, location in (("w0", str(secret)), ("w1", "../../etc/passwd"), ("w2", "weights.bin")):
        t = weight(name, (8, 4))
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", "0"), ("length", "128")):
            t.external_data.add(key=k, value=v)
        inits.append(t)
    data = make_model(nodes, [tensor("x", [2, 8])], [tensor(f"y{i}", [2, 4]) for i in range(3)], inits)
    model_path = tmp_path / "model.onnx"
    model_path.write_bytes(data)
    opened = []
    hook_active = [True]

    def audit(event, args):
        if hook_active[0] and event == "open" and args and isinstance(args[0], (str, bytes)):
            opened.append(str(args[0]))

    sys.addaudithook(audit)
    try:
        w = mapper.load_workload(str(model_path))
    finally:
        hook_active[0] = False
    assert w.matrix_flops == 3 * 2 * 2 * 8 * 4
    assert w.weight_bytes == 3 * 8 * 4 * 4
    assert [
        p
        for p in opened
        if "model.onnx" not in p and not p.endswith(".py") and "site-packages" not in p and "__pycache__" not in p
    ] == []


def test_shape_subgraphs_fold_to_constants():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as torch exports emit it."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
        helper.make_node("MatMul", ["y", "w"], ["z"]),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
        onnx.numpy_helper.from_array(np.array([0], np.int64), "zero1"),
        onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        weight("w", (48, 5)),
    ]
    data = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 12])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 5])],
        inits,
    )
    w = mapper.load_workload(data, {"batch": 3})
    assert [n.op_type for n in w.nodes] == ["Reshape", "MatMul"]  # shape arithmetic is not a kernel
    assert w.graph.tensors["y"].shape == (3, 48)
    assert w.matrix_flops == 2 * 3 * 48 * 5


def test_constant_of_shape_fill_values_are_told_apart():
    """Two ConstantOfShape nodes alike but for their fill value (a tensor attribute) make different shape
    vectors: the importer's memo of repeated nodes must not hand the second the first one's value."""
    fill = lambda v: helper.make_tensor("fill", TensorProto.INT64, [1], [v])
    nodes = [
        helper.make_node("ConstantOfShape", ["two"], ["six_six"], value=fill(6)),
        helper.make_node("ConstantOfShape", ["two"], ["four_four"], value=fill(4)),
        helper.make_node("Reshape", ["x", "six_six"], ["y"]),
        helper.make_node("Reshape", ["z", "four_four"], ["t"]),
    ]
    data = make_model(
        nodes,
        [tensor("x", [36]), tensor("z", [16])],
        [tensor("y", None), tensor("t", None)],
        [onnx.numpy_helper.from_array(np.array([2], np.int64), "two")],
    )
    w = mapper.load_workload(data)
    assert (w.graph.tensors["y"].shape, w.graph.tensors["t"].shape) == ((6, 6), (4, 4))
    assert not w.graph.unresolved


def test_constant_of_shape_weights_are_weights():
    path = LIGHT_DIR / "light_bvlc_alexnet.onnx"
    w = mapper.load_workload(str(path))
    assert not any(n.op_type == "ConstantOfShape" for n in w.nodes)
    assert w.weight_bytes / 4 == pytest.approx(60.97e6, rel=0.01)  # AlexNet (BVLC): 60.97M params (onnx-tool README)


# --- bad input: one line, exit 2, no traceback -------------------------------------------------------
def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "mapper", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _bad_files(tmp_path):
    good = (LIGHT_DIR / "light_squeezenet.onnx").read_bytes()
    files = {
        "truncated.onnx": good[: len(good) // 3],
        "text.onnx": b"this is not a model\n" * 10,
        "random.onnx": np.random.default_rng(0).bytes(4096),
        "empty.onnx": b"",
    }
    out = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        out.append(str(tmp_path / name))
    return out


@pytest.mark.slow
def test_bad_files_give_one_line_errors(tmp_path):
    for path in [*_bad_files(tmp_path), str(tmp_path / "missing.onnx")]:
        r = _cli("map", path)
        assert r.returncode == 2, (path, r.stderr)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr


def test_unbound_dim_lists_the_names():
    with pytest.raises(MapperError, match="unbound dims: batch, seq"):
        mapper.load_workload(str(MODELS_DIR / "hf_bert_tiny.onnx"))
    r = _cli("map", str(MODELS_DIR / "hf_bert_tiny.onnx"), "--batch", "2")
    assert (
        r.returncode == 2
        and r.stderr.strip()
        == "error: unbound dims: seq; bind each with --dim NAME=VALUE "
        "(or --batch/--seq for the batch and sequence dims)"
    )


def test_bad_profile_gives_one_line_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        (mapper.hardware.load.hardware_dir() / "h100-sxm.toml")
        .read_text()
        .replace("dram_bandwidth_bytes_per_s = { value = 3.35e12", "dram_bandwidth_bytes_per_s = { value = -1")
    )
    r = _cli("map", "resnet50", "--hw", str(bad))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "dram_bandwidth_bytes_per_s" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,needle",
    [
        (("--dim", "batch=-3"), "must be an integer"),
        (("--batch", "0"), "--batch"),
        (("--dtype", "fp7"), "dtype"),
        (("--fusion", "max"), "fusion"),
        (("--dim", "batch=99999999999999"), "MAX_DIM"),
    ],
)
def test_bad_options_give_one_line_errors(args, needle):
    r = _cli("map", "bert-base", *args)
    assert r.returncode == 2 and r.stderr.startswith("error:") and needle in r.stderr and r.stderr.count("\n") == 1


def test_unknown_op_is_unmodeled_not_zero():
    data = make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("FancyOp", ["r"], ["y"], domain="com.example")],
        [tensor("x", [2, 8])],
        [tensor("y", [2, 8])],
    )
    model = onnx.load_from_string(data)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    w = mapper.load_workload(model.SerializeToString())
    (node,) = w.unmodeled
    assert node.op_type == "FancyOp" and node.reason


@pytest.mark.parametrize(
    "source, dims",
    [
        (str(LIGHT_DIR / "light_resnet50.onnx"), None),
        (str(MODELS_DIR / "hf_llama_tiny.onnx"), {"batch": 2, "seq": 16}),
        (str(MODELS_DIR / "hf_bert_tiny.onnx"), {"batch": 2, "seq": 16}),
        ("llama2-7b", {"batch": 2, "seq": 16, "past": 8}),
    ],
)
def test_repeated_nodes_take_the_shapes_and_work_found_once(source, dims, monkeypatch):
    """The importer infers and costs a node like one seen before (same signature, input shapes and
    constants) once; the graph and work must equal those of a walk that infers every node itself."""
    from mapper.model import nodes as onnx_nodes

    def load():  # a fresh model handle: nothing kept from the last load
        return mapper.load_workload(source, dims)

    memoized = load()
    monkeypatch.setattr(onnx_nodes, "node_signature", lambda *args: None)
    plain = load()
    assert all(n.signature is None for n in plain.graph.nodes)
    assert any(n.signature is not None for n in memoized.graph.nodes)
    assert memoized.graph.tensors == plain.graph.tensors
    assert memoized.graph.folded == plain.graph.folded and memoized.graph.weights == plain.graph.weights
    assert memoized.graph.unresolved == plain.graph.unresolved
    assert memoized.nodes == plain.nodes


@pytest.mark.slow
@pytest.mark.parametrize(
    "source,dims",
    [
        ("bert-base", {"batch": 2, "seq": 16}),
        ("llama2-7b", {"batch": 2, "seq": 16, "past": 8}),
        (str(LIGHT_DIR / "light_densenet121.onnx"), None),
        (str(LIGHT_DIR / "light_inception_v2.onnx"), None),
        (str(MODELS_DIR / "hf_gpt2_tiny.onnx"), {"batch": 2, "seq": 16}),
        (str(MODELS_DIR / "hf_llama_tiny_sdpa.onnx"), {"batch": 1, "seq": 7}),
        (str(MODELS_DIR / "hf_llama_tiny_decode.onnx"), {"batch": 2, "seq": 1, "past_seq": 8, "total_seq": 9}),
        (str(MODELS_DIR / "resnet50_int8_qdq.onnx"), {"batch": 3}),
        (str(MODELS_DIR / "hf_bert_tiny_ts.onnx"), {"batch": 1, "seq": 9}),
        (str(MODELS_DIR / "hf_llama_tiny_ts.onnx"), {"batch": 2, "seq": 5}),
        (
            str(MODELS_DIR / "optimum_gpt2_tiny_with_past.onnx"),
            {"batch_size": 2, "sequence_length": 1, "past_sequence_length": 17},
        ),
        (
            str(MODELS_DIR / "optimum_llama_tiny_with_past.onnx"),
            {"batch_size": 1, "sequence_length": 3, "past_sequence_length": 9},
        ),
    ],
)
def test_shapes_agree_with_onnxruntime_symbolic_inference(source, dims):
    """A peer check of our shape rules: ONNX Runtime's symbolic shape inference, run on the same model
    at the same bindings (its value_info cleared), gives the same shape for every tensor it resolves."""
    from mapper.model.onnx_import import value_info_shape
    from mapper.model.ort_shapes import ort_inferred_value_info

    graph = mapper.load_workload(source, dims).graph
    model = (
        mapper.build_zoo_model(source) if source in mapper.ZOO_NAMES else onnx.load(source, load_external_data=False)
    )
    bound = dict(graph.dims)
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in bound:
                d.dim_value = bound[d.dim_param]
    del model.graph.value_info[:]
    theirs = {vi.name: value_info_shape(vi, bound) for vi in ort_inferred_value_info(model)}
    compared = {
        name: (spec.shape, theirs[name].shape) for name, spec in graph.tensors.items() if theirs.get(name) is not None
    }
    assert len(compared) >= 0.9 * len(model.graph.node)  # ORT resolved (nearly) every node output
    assert {n: s for n, s in compared.items() if s[0] != s[1]} == {}


def test_generic_exporter_graph_names_give_way_to_the_file_name(tmp_path):
    """PyTorch's exporters name every graph "main_graph": a sheet or a comparison of two such models would
    show that name twice. The file's name (an upload's too) is used instead; a graph with a name of its
    own keeps it, from a path or an upload alike (the CLI and the dashboard say the same)."""
    path = tmp_path / "my_gpt2.onnx"
    path.write_bytes((MODELS_DIR / "hf_gpt2_tiny.onnx").read_bytes())
    assert onnx.load(path, load_external_data=False).graph.name == "main_graph"
    assert mapper.load_workload(str(path), {"batch": 1, "seq": 4}).graph.name == "my_gpt2"
    data = path.read_bytes()
    assert mapper.load_workload(data, {"batch": 1, "seq": 4}).graph.name == "upload"
    assert (
        mapper.load_workload(data, {"batch": 1, "seq": 4}, file_name="from_browser.onnx").graph.name == "from_browser"
    )
    assert mapper.load_workload(str(LIGHT_DIR / "light_densenet121.onnx")).graph.name == "densenet121"
    own = (LIGHT_DIR / "light_densenet121.onnx").read_bytes()
    assert mapper.load_workload(own, file_name="light_densenet121.onnx").graph.name == "densenet121"


MERGED = MODELS_DIR / "optimum_gpt2_tiny_merged.onnx"


@pytest.mark.parametrize("branch,batch,seq,past", [(0, 1, 7, 0), (1, 1, 7, 0), (1, 2, 1, 31), (1, 4, 1, 2048)])
def test_optimum_merged_decoder_maps_the_bound_branch(branch, batch, seq, past):
    """Optimum's decoder_model_merged form: one If on the input use_cache_branch holds both decoders. Bound
    like a dim, the input picks the branch, whose nodes replace the If: the closed-form FLOPs, every node
    modeled (unbound, the whole model would be one host-side node)."""
    w = mapper.load_workload(
        str(MERGED), {"past_sequence_length": past, "use_cache_branch": branch}, batch=batch, seq=seq
    )
    assert w.matrix_flops == matrix_flops("optimum_gpt2_tiny_with_past", batch, seq, past)
    assert not w.unmodeled and "If" not in {n.op_type for n in w.graph.nodes}
    assert w.graph.name == "optimum_gpt2_tiny_merged"  # "merged" is Optimum's name for every such graph


def test_optimum_merged_decoder_branches_do_not_share_cached_structure():
    """The graph depends on the branch: the two branches at the same dims are different graphs (the
    structure caches are keyed by the model's hash and the branch), and either order gives the same."""
    dims = {"past_sequence_length": 0, "batch_size": 1, "sequence_length": 5}
    first = [mapper.load_workload(str(MERGED), dims | {"use_cache_branch": b}) for b in (0, 1)]
    second = [mapper.load_workload(str(MERGED), dims | {"use_cache_branch": b}) for b in (1, 0)][::-1]
    assert len(first[0].graph.nodes) != len(first[1].graph.nodes)
    assert first[0].graph.sha256 != first[1].graph.sha256
    assert [len(w.graph.nodes) for w in first] == [len(w.graph.nodes) for w in second]


def test_optimum_merged_decoder_needs_its_branch_bound_and_says_how():
    with pytest.raises(mapper.MapperError, match=r"unbound dims: use_cache_branch.*chooses the branch of an If"):
        mapper.load_workload(str(MERGED), {"past_sequence_length": 0}, batch=1, seq=4)
    with pytest.raises(mapper.MapperError, match=r"branch input 'use_cache_branch'=2 must be 0 or 1"):
        mapper.load_workload(str(MERGED), {"past_sequence_length": 0, "use_cache_branch": 2}, batch=1, seq=4)


def test_branch_inlining_is_bounded_and_malformed_branches_are_errors(monkeypatch):
    """A hostile file can nest Ifs on the bound input: the inlined graph is held to MAX_NODES like any
    other, and a branch whose outputs do not match the If's is a one-line error."""
    from onnx import TensorProto, helper

    from mapper.core import limits

    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [1])
    body = helper.make_graph(
        [helper.make_node("Relu", ["x"], [f"r{i}"]) for i in range(5)]
        + [helper.make_node("Identity", ["r0"], ["y_inner"])],
        "body",
        [],
        [helper.make_tensor_value_info("y_inner", TensorProto.FLOAT, [4])],
    )
    node = helper.make_node("If", ["flag"], ["y"], then_branch=body, else_branch=body)
    graph = helper.make_graph([node], "g", [flag, tensor("x", [4])], [tensor("y", [4])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    assert {n.op_type for n in mapper.load_workload(data, {"flag": 1}).graph.nodes} == {"Relu", "Identity"}
    monkeypatch.setattr(limits, "MAX_NODES", 4)
    with pytest.raises(mapper.MapperError, match="over MAX_NODES"):
        mapper.load_workload(data, {"flag": 0})
    monkeypatch.undo()
    bad = helper.make_graph([helper.make_node("Relu", ["x"], ["z"])], "bad", [], [])
    node = helper.make_node("If", ["flag"], ["y"], then_branch=bad, else_branch=bad)
    graph = helper.make_graph([node], "g", [flag, tensor("x", [4])], [tensor("y", [4])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(mapper.MapperError, match="branch has 0 outputs for 1"):
        mapper.load_workload(data, {"flag": 1})
