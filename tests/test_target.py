"""The typed target (`hardware.target.Target`): the device's rates at the plan's precision, built once, with the
runtime's launch cost as an input and the tiling constants read from the profile.

The cost stage's memo keys on `Target.key`: each input it reads changes the key, and a mapping answered from a
warm memo equals one computed cold, input by input.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import mapper
from mapper.hardware.target import Target, device_target

INPUTS = (
    "hw",
    "dtype",
    "act_bytes",
    "weight_bytes",
    "kv_bytes",
    "power_cap_w",
    "sparse",
    "launch_s",
    "decode_attention",
    "causal_attention",
)


@pytest.fixture(scope="module")
def h100():
    return mapper.load_hardware("h100-sxm")


def test_the_rest_of_a_target_follows_from_its_inputs(h100):
    """The peaks, energy, headroom and ridge are read from the profile at the dtype and cap: not inputs."""
    derived = {f.name for f in dataclasses.fields(Target)} - set(INPUTS)
    assert derived == {
        "matrix_peak_flops_per_s",
        "vector_peak_flops_per_s",
        "energy_per_flop_j",
        "headroom_w",
        "ridge_flop_per_byte",
    }
    t = device_target(h100, "fp8", (1.0, 1.0, 1.0), 400.0, False, 1e-6)
    assert t.matrix_peak_flops_per_s == h100.matrix_peak("fp8") and t.headroom_w == 400.0 - h100.idle_w
    assert t.ridge_flop_per_byte == h100.matrix_peak("fp8") / h100.dram_bandwidth_bytes_per_s


def test_every_input_is_in_the_memo_key(h100):
    base = device_target(h100, "bf16", (2.0, 2.0, 2.0), None, False, 3e-6)
    edited = mapper.edit_profile(h100, {"memory.l2_cluster_sharing": 1.0})
    changes = {
        "hw": edited,
        "dtype": "fp16",
        "act_bytes": 4.0,
        "weight_bytes": 0.5,
        "kv_bytes": 1.0,
        "power_cap_w": 300.0,
        "sparse": True,
        "launch_s": 1e-6,
        "decode_attention": dataclasses.replace(base.decode_attention, packs_query_group=True),
        "causal_attention": True,
    }
    assert set(changes) == set(INPUTS)
    for name, value in changes.items():
        assert dataclasses.replace(base, **{name: value}).key != base.key, name


def _document(result) -> dict:
    doc = json.loads(json.dumps(mapper.mapping_document(result)))
    doc.pop("created_utc")
    return doc


@pytest.mark.parametrize(
    "change",
    [
        {"options": {"launch": "graph"}},
        {"options": {"power_cap_w": 150.0}},
        {"options": {"dtype": "fp8"}},
        {"options": {"weight_dtype": "int4"}},
        {"options": {"sparsity": "2:4"}},
        {"options": {"kv_dtype": "fp8"}},
        {"profile": {"memory.l2_cluster_sharing": 1.0}},
        {"profile": {"compute.sram_bytes_per_clock_per_unit": 64.0}},
        {"profile": {"efficiency.overlap_exponent": 3.0}},
        {"profile": {"overhead.kernel_launch_s": 9e-6}},
    ],
    ids=lambda c: ",".join(f"{k}" for part in c.values() for k in part),
)
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_a_warm_memo_answers_as_a_cold_mapping(h100, change):
    """Map a slice, then the slice with one input changed on the same handle (its memo warm): the answer equals
    the changed slice mapped on a fresh handle, and differs from the first."""
    dims = {"batch": 2, "seq": 64, "past": 0}
    hw = mapper.edit_profile(h100, change["profile"]) if "profile" in change else h100
    base = {"dtype": "bf16", "launch": "eager"}
    options = mapper.PlanOptions(**(base | change.get("options", {})))
    warm = mapper.open_model("llama2-7b")
    first = _document(mapper.map_workload(warm.bind(dims), h100, mapper.PlanOptions(**base)))
    again = _document(mapper.map_workload(warm.bind(dims), hw, options))
    cold = _document(mapper.map_workload(mapper.open_model("llama2-7b").bind(dims), hw, options))
    assert again == cold
    assert again["totals"] != first["totals"]


def test_graph_replay_is_a_launch_cost_not_another_profile(h100):
    """Under --launch graph each kernel costs the profile's graph_launch_s; the profile (and its hash in the
    document) stays the one the user chose."""
    workload = mapper.open_model("gpt2-small").bind({"batch": 1, "seq": 1, "past": 64})
    eager = mapper.map_workload(workload, h100, mapper.PlanOptions(launch="eager"))
    graph = mapper.map_workload(workload, h100, mapper.PlanOptions(launch="graph"))
    assert graph.hardware_sha256 == eager.hardware_sha256 == h100.sha256
    compute = [e for e in graph.kernels if e.kernel.engine != "interconnect"]
    paged = [e for e in compute if e.kernel.rule == "flash-attention"]  # the paged decode kernel's own latency
    assert {e.overhead_s for e in compute if e not in paged} == {h100.graph_launch_s}
    assert {e.overhead_s for e in eager.kernels if e.kernel.rule != "flash-attention"} == {h100.kernel_launch_s}
    for e in paged:  # the launch, the kernel's fixed latency and its work items' (split tiles) spread over the SMs
        fixed = h100.paged_decode_s + h100.paged_decode_item_s * e.tiling.best.tiles / h100.compute_units
        assert e.overhead_s == pytest.approx(h100.graph_launch_s + fixed)
    assert paged


def test_tiling_constants_are_the_profiles_own():
    """SRAM bytes per clock, L2 cluster sharing and the overlap exponent come from each profile with a source.
    Thread-block clusters (TMA multicast of an operand panel to a 2-CTA cluster) need compute capability 9.0:
    the A100 (8.0) and L4 (8.9) fetch each panel per CTA. The search halved their L2 traffic as Hopper's before
    these became profile fields (the bug this fixes), and every non-NVIDIA profile's too."""
    sharing = {name: mapper.load_hardware(name).l2_cluster_sharing for name in mapper.list_hardware()}
    assert {n for n, s in sharing.items() if s > 1} == {"h100-sxm", "h200-sxm", "b200"}
    for name in mapper.list_hardware():
        hw = mapper.load_hardware(name)
        for key in (
            "compute.sram_bytes_per_clock_per_unit",
            "memory.l2_cluster_sharing",
            "efficiency.overlap_exponent",
        ):
            assert hw.sources[key].strip(), (name, key)
    a100 = mapper.load_hardware("a100-sxm-80gb")
    assert "compute capability 9.0" in a100.sources["memory.l2_cluster_sharing"]


def test_the_search_reads_the_cluster_sharing():
    """A GEMM's L2 traffic on A100 halves with a 2-CTA cluster's sharing, all else equal."""
    a100 = mapper.load_hardware("a100-sxm-80gb")
    shared = mapper.edit_profile(a100, {"memory.l2_cluster_sharing": 2.0})
    workload = mapper.open_model("bert-base").bind({"batch": 8, "seq": 128})
    own = mapper.map_workload(workload, a100, mapper.PlanOptions(dtype="bf16"))
    halved = mapper.map_workload(workload, shared, mapper.PlanOptions(dtype="bf16"))
    pairs = [
        (a, b)
        for a, b in zip(own.kernels, halved.kernels)
        if a.assessment.tiling.kind == "matrix" and a.assessment.tiling.chosen.split_k == 1
        if a.assessment.tiling.chosen.tile_m == b.assessment.tiling.chosen.tile_m
        if a.assessment.tiling.chosen.tile_n == b.assessment.tiling.chosen.tile_n
    ]
    assert pairs
    for a, b in pairs:
        assert b.assessment.l2_bytes == pytest.approx(a.assessment.l2_bytes / 2, rel=1e-12)
