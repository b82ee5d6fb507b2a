"""Names and definitions a meeting can read: kernels named by module path and what they are, one memory-stall
definition that agrees with the bottleneck class, and a speed-up without the bottleneck on the same roofline."""

import math

import pytest

import mapper
from mapper.core.classes import Bottleneck
from mapper.core.graph import Node
from mapper.core.vocab import KernelRule
from mapper.cost.bottleneck import Facts, speedup_if_removed
from mapper.cost.roofline import kernel_time, memory_stall_fraction
from mapper.plan.kernel_names import module_of, plan_names, what_it_is

A100 = mapper.load_hardware("a100-sxm-80gb")
DECODE = {"batch": 32, "past": 2048, "seq": 1}  # mapper map llama2-7b --batch 32 --dim past=2048 --dim seq=1


@pytest.fixture(scope="module")
def decode():
    """Llama-2-7B fp16 decode on A100: the step the issue read "a Transpose is the bottleneck" in."""
    return mapper.map_workload(mapper.load_workload("llama2-7b", DECODE), A100, mapper.PlanOptions(dtype="fp16"))


def test_the_decode_steps_kernels_are_named_by_module_and_what_they_are(decode):
    names = [e.kernel.name for e in decode.kernels]
    slowest = max(decode.kernels, key=lambda e: e.time_s)
    assert slowest.kernel.name == "model.layers.0.self_attn · fused attention"  # was ".../Transpose_3+5"
    assert slowest.kernel.op_types[0] == "Transpose"  # its first node is still a Transpose: the name says what it is
    for expected in (
        "model.layers.0.mlp.down_proj · matmul + add",  # the residual Add rides in the epilogue
        "model.layers.0.mlp.gate_proj · matmul + silu",  # x * sigmoid(x)
        "model.layers.31.input_layernorm · rms norm",  # decomposed: no mean subtracted
        "model.layers.0.self_attn · slice #2",  # four Slices in one module, numbered in graph order
        "lm_head · matmul",
    ):
        assert expected in names
    assert len(set(names)) == len(names)
    assert not [n for n in names if "/" in n or "+" in n.replace(" + ", "")]  # no exported node leaf, no "+5"


@pytest.mark.parametrize(
    ("source", "options"),
    [
        ("resnet50", mapper.PlanOptions()),
        ("bert-base", mapper.PlanOptions(fusion="aggressive")),
        ("gpt2-small", mapper.PlanOptions(fusion="none")),
        ("mixtral-8x7b", mapper.PlanOptions(tp=2, ep=2)),  # collectives named after their kernels
        ("mixtral-8x7b", mapper.PlanOptions(ep=2, attention_dp=True)),  # and all-to-alls
        ("llama2-7b", mapper.PlanOptions(fusion="aggressive", dtype="fp32")),  # mi300x: attention split back
    ],
)
def test_names_are_unique_in_every_mapping(source, options):
    """The drill-down, the sheet and calibration key on names: one kernel each, whatever the plan adds."""
    hw = mapper.load_hardware("mi300x" if options.dtype == "fp32" else "h100-sxm")
    names = [e.kernel.name for e in mapper.map_workload(mapper.load_workload(source), hw, options).kernels]
    assert len(set(names)) == len(names)
    if options.dtype == "fp32":  # 64 KiB of SRAM a unit holds no FlashAttention tile of head dim 128 at fp32
        assert "model.layers.0.self_attn · attention step 2 of 6: matmul" in names
    if options.attention_dp:
        assert "model.layers.0.block_sparse_moe · dispatch all-to-all" in names
    elif options.ep > 1:
        assert "model.layers.0.block_sparse_moe · combine all-reduce" in names


@pytest.mark.parametrize(
    ("scoped", "module"),
    [
        ("/model/layers.0/self_attn/Transpose_3", "model.layers.0.self_attn"),
        ("/layer1/layer1.0/conv1/Conv", "layer1.0.conv1"),  # torchvision: a scope spelling out its parent's path
        ("/encoder/encoder.layer.2/output/dense/MatMul", "encoder.layer.2.output.dense"),
        ("/model/model/layers.11/mlp/up_proj/MatMul", "model.model.layers.11.mlp.up_proj"),
        ("/Gather_4", ""),  # an op at the model's root
        ("node_linear_3", None),  # no scopes: the kernel is located by the node's name
    ],
)
def test_module_path_of_an_exported_node(scoped, module):
    assert module_of(scoped) == module


def _nodes(*ops: str, weight_input: int | None = None) -> list[Node]:
    return [
        Node(f"n{i}", op, "", (f"x{i}", "w" if i == weight_input else f"y{i}"), (f"x{i + 1}",))
        for i, op in enumerate(ops)
    ]


@pytest.mark.parametrize(
    ("rule", "members", "what"),
    [
        (
            KernelRule.FLASH_ATTENTION,
            _nodes("Transpose", "MatMul", "Div", "Add", "Softmax", "MatMul"),
            "fused attention",
        ),
        (KernelRule.GEMM_EPILOGUE, _nodes("Conv", "BatchNormalization", "Relu"), "conv + bn + relu"),
        (  # BERT's intermediate dense: bias, then GELU as erf arithmetic
            KernelRule.GEMM_EPILOGUE,
            _nodes("MatMul", "Add", "Div", "Mul", "Erf", "Add", "Mul", weight_input=1),
            "matmul + bias + gelu",
        ),
        (KernelRule.GEMM_EPILOGUE, _nodes("MatMul", "Add"), "matmul + add"),  # a residual: no weight read
        (KernelRule.GEMM_EPILOGUE, _nodes("QLinearConv", "QuantizeLinear", "DequantizeLinear"), "conv"),
        (KernelRule.NORM, _nodes("Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Mul", "Mul"), "rms norm"),
        (KernelRule.NORM, _nodes("ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div"), "layer norm"),
        (KernelRule.NORM, _nodes("LayerNormalization"), "layer norm"),
        (KernelRule.SINGLE, _nodes("Softmax"), "softmax"),
        (KernelRule.SINGLE, _nodes("GlobalAveragePool"), "global average pool"),
        (KernelRule.ELEMENTWISE_CHAIN, _nodes("Mul", "Mul", "Add"), "mul + mul + add"),
        (KernelRule.ELEMENTWISE_CHAIN, _nodes("Add", "Mul", "Sub", "Neg", "Exp", "Abs"), "elementwise chain of 6"),
    ],
)
def test_what_a_kernel_is_comes_from_its_rule_and_ops(rule, members, what):
    assert what_it_is(rule, members, frozenset({"w"})) == what


def test_names_repeated_in_a_module_are_numbered_and_the_rest_left_alone():
    places = [("m.layers.0.attn", "slice"), ("m.layers.0.attn", "neg"), ("m.layers.0.attn", "slice"), ("", "gather")]
    assert plan_names(places) == [
        "m.layers.0.attn · slice #1",
        "m.layers.0.attn · neg",
        "m.layers.0.attn · slice #2",
        "gather",
    ]


def test_repeated_layers_group_under_the_kernel_name(decode):
    doc = mapper.mapping_document(decode)
    groups = mapper.group_kernels(doc["kernels"], doc["totals"]["latency_s"])
    top = groups[0]
    assert top["kernel"] == "model.layers.*.self_attn · fused attention x 32"
    # 67.3% since A100's matrix DRAM curve (2026-12-06: the GEMMs' weight streams slower), 69.5% before (68.8% unpaged)
    assert top["count"] == 32 and top["share"] == pytest.approx(0.673, abs=0.005)
    assert len({g["kernel"] for g in groups}) == len(groups)


def test_memory_stall_is_the_memory_time_the_overlap_leaves_beyond_compute():
    """The fused decode attention's figures (Llama-2-7B fp16 on A100, 689.5 us): compute 369.6 us (one query row
    padded to the query block), memory 685.7 us; overlapped (p = 6): (369.6^6 + 685.7^6)^(1/6) = 688.5 us, of
    which 688.5 - 369.6 = 318.9 us the engines wait on DRAM: 46.2% of 689.5 us (max(0, m - c) / t says 45.8%)."""
    c, m, t = 369.6e-6, 685.7e-6, 689.5e-6
    p = mapper.load_hardware("a100-sxm-80gb").overlap_exponent
    assert p == 6.0
    overlapped = (c**p + m**p) ** (1 / p)
    assert overlapped == pytest.approx(688.5e-6, abs=0.1e-6)
    assert memory_stall_fraction(c, m, t, p) == pytest.approx((overlapped - c) / t, rel=1e-12)
    assert memory_stall_fraction(c, m, t, p) == pytest.approx(0.462, abs=0.001)
    assert memory_stall_fraction(0.0, 0.0, 1e-6, p) == 0.0 and memory_stall_fraction(1.0, 1.0, 0.0, p) == 0.0
    assert "waits on DRAM" in mapper.MEMORY_STALL_DEFINITION or "wait on DRAM" in mapper.MEMORY_STALL_DEFINITION


def test_stall_agrees_with_the_class_and_the_time_split(decode):
    """Every memory-bound kernel waits at least (memory - compute) / time (so never 0%); a kernel's time is its
    compute, stall, launch and sync; the model's and each layer type's stall are time-weighted over kernels."""
    for e in decode.kernels:
        if e.bottleneck == Bottleneck.MEMORY:
            assert e.stall_fraction >= (e.memory_time_s - e.compute_time_s) / e.time_s > 0
        if not e.throttled and e.kernel.engine != "interconnect":
            split = e.compute_time_s + e.stall_fraction * e.time_s + e.overhead_s + e.sync_s
            assert split == pytest.approx(e.time_s, rel=1e-9)
    t = decode.totals
    weighted = sum(e.stall_fraction * e.time_s for e in decode.kernels) / t.latency_s
    assert t.memory_stall_fraction == pytest.approx(weighted, rel=1e-12)
    # 51.5% since A100's matrix DRAM curve (2026-12-06: the GEMMs wait longer on their weight streams), 49.9% since
    # the paged decode kernel's own latency (2026-12-06; launch-like, not a stall), 51.4% since the A100 GEMM
    # curve's refit (40.8% before: its GEMMs computed slower, overlapping more of memory)
    assert t.memory_stall_fraction == pytest.approx(0.515, abs=0.002)
    attention = next(layer for layer in decode.layers if layer.layer_type == "Attention")
    assert attention.share == pytest.approx(0.673, abs=0.005) and attention.stall_fraction > 0.3


@pytest.mark.parametrize(
    ("source", "dims", "hw", "options"),
    [
        ("llama2-7b", DECODE, "a100-sxm-80gb", mapper.PlanOptions(dtype="fp16")),
        ("llama2-7b", {"batch": 1, "past": 0, "seq": 2048}, "a100-sxm-80gb", mapper.PlanOptions()),  # compute-bound
        ("resnet50", {"batch": 32}, "a100-sxm-80gb", mapper.PlanOptions()),
        ("mixtral-8x7b", None, "h100-sxm", mapper.PlanOptions(tp=2, ep=2)),  # collectives: the wire is the floor
    ],
)
def test_no_kernel_is_faster_without_its_bottleneck_than_at_its_roofline(source, dims, hw, options):
    """The drill-down's "at its roofline" and "speed-up without its bottleneck" read one roofline: the time left
    without the bottleneck is never below the roofline time (it was: a compute-bound Llama-2-7B prefill
    q_proj at 112.5 us, roofline 55.1 us, read 2.49x: 45.2 us, its memory time alone)."""
    result = mapper.map_workload(mapper.load_workload(source, dims), mapper.load_hardware(hw), options)
    for e in result.kernels:
        assert e.speedup_if_removed >= 1.0
        assert e.time_s / e.speedup_if_removed >= e.roofline_time_s * (1 - 1e-9), e.kernel.name


def test_a_compute_bound_kernel_without_its_bottleneck_computes_at_its_peak():
    """Compute 111.4 us at 49% of the peak (roofline 55.1 us), memory 44.2 us, launch 1 us: without the compute
    loss it computes at its roofline and still streams its memory: (55.1^6 + 44.2^6)^(1/6) + 1 = 58.3 us, so
    112.5 / 58.3 = 1.93x, not 112.5 / (44.2 + 1) = 2.49x."""
    f = Facts("matrix", 112.5e-6, 111.4e-6, 44.2e-6, 1e-6, 0.0, 100.0, 153.0, 4, 1.0, 1.0, 6.0,
              compute_roofline_s=55.1e-6, memory_roofline_s=40e-6, roofline_s=55.1e-6)  # fmt: skip
    rest = kernel_time(55.1e-6, 44.2e-6, 1e-6, 0.0, 6.0)
    assert rest == pytest.approx(58.3e-6, abs=0.05e-6)
    assert speedup_if_removed(Bottleneck.COMPUTE_MATRIX, f) == pytest.approx(112.5 / 58.3, rel=1e-3)
    memory_bound = Facts("matrix", 23.7e-6, 11.1e-6, 22.7e-6, 1e-6, 0.0, 32.0, 153.0, 1, 1.0, 1.0, 6.0,
                         compute_roofline_s=3.4e-6, memory_roofline_s=16.6e-6, roofline_s=16.6e-6)  # fmt: skip
    expected = 23.7e-6 / kernel_time(11.1e-6, 16.6e-6, 1e-6, 0.0, 6.0)  # its bytes at DRAM's peak, compute as costed
    assert speedup_if_removed(Bottleneck.MEMORY, memory_bound) == pytest.approx(expected, rel=1e-12)
    assert math.isclose(speedup_if_removed(Bottleneck.MEMORY, memory_bound), 1.33, abs_tol=0.01)
    assert "roofline" in mapper.SPEEDUP_DEFINITION
