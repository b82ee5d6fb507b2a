"""Multi-device mapping: collectives by the alpha-beta formulas, Megatron sharding, memory capacity."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import mapper
from mapper import PlanOptions
from mapper.cost.collectives import collective_time
from mapper.hardware.profile import Interconnect
from mapper.schedule.stages import balance_stages

NVSWITCH = Interconnect(link_bandwidth_bytes_per_s=450e9, latency_s=3e-6, topology="nvswitch", max_devices=8)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("n", [1e3, 1e6, 256e6])
def test_all_reduce_equals_the_alpha_beta_formula(p, n):
    a, b = NVSWITCH.latency_s, NVSWITCH.link_bandwidth_bytes_per_s
    ring = 2 * (p - 1) * a + 2 * (p - 1) / p * n / b
    tree = 2 * math.ceil(math.log2(p)) * a + 2 * n / b
    c = collective_time("all-reduce", p, n, NVSWITCH)
    assert c.time_s == pytest.approx(min(ring, tree))
    assert c.algorithm == ("tree" if tree < ring else "ring")


def test_other_collectives_and_the_torus():
    a, b = NVSWITCH.latency_s, NVSWITCH.link_bandwidth_bytes_per_s
    assert collective_time("all-gather", 4, 8e6, NVSWITCH).time_s == pytest.approx(3 * a + 0.75 * 8e6 / b)
    assert collective_time("p2p", 2, 8e6, NVSWITCH).time_s == pytest.approx(a + 8e6 / b)
    torus = Interconnect(100e9, 1e-6, "torus2d", 256)
    # 16 chips as a 4 x 4 torus: a ring per dimension on half the data, both at once
    ring4 = 2 * 3 * 1e-6 + 2 * 3 / 4 * 4e6 / 100e9
    assert collective_time("all-reduce", 16, 8e6, torus).time_s == pytest.approx(2 * ring4)
    assert collective_time("all-reduce", 1, 8e6, NVSWITCH).time_s == 0.0


def _gemms(result):
    """The weight GEMMs (what tensor parallelism splits column- or row-wise)."""
    return [e for e in result.kernels if e.kernel.layer_type is mapper.LayerType.LINEAR and e.kernel.weight_bytes > 0]


def test_doubling_tp_halves_gemm_work_and_adds_the_expected_collectives(h100):
    w = mapper.load_workload("bert-base", {"batch": 8, "seq": 256})
    one, two, four = (mapper.map_workload(w, h100, PlanOptions(dtype="bf16", tp=t)) for t in (1, 2, 4))
    for a, b in ((one, two), (two, four)):
        assert sum(e.kernel.matrix_flops for e in _gemms(b)) == pytest.approx(
            sum(e.kernel.matrix_flops for e in _gemms(a)) / 2
        )
    # two row-parallel GEMMs per layer (attention output, FFN down) -> 24 all-reduces of B x S x H
    reduces = [e for e in two.kernels if e.kernel.collective == "all-reduce"]
    assert len(reduces) == 24
    message = 8 * 256 * 768 * 2
    assert all(e.kernel.dram_bytes == message for e in reduces)
    link, efficiency = h100.interconnect, h100.all_reduce_efficiency  # the share of the link it reaches
    expected = collective_time("all-reduce", 2, message, link, False, efficiency).time_s + h100.kernel_launch_s
    assert reduces[0].time_s == pytest.approx(expected)
    assert reduces[0].bottleneck == "interconnect" and reduces[0].owner == "runtime systems engineer"
    assert one.parallel.collectives == () and two.parallel.interconnect_share > 0


def test_llama2_70b_fits_only_with_tensor_parallelism(h100):
    w = mapper.load_workload("llama2-70b", {"batch": 1, "seq": 1, "past": 2048})
    single = mapper.map_workload(w, h100, PlanOptions(dtype="bf16"))
    memory = single.memory
    # 68.98B parameters x 2 bytes = 138 GB of weights against 80 GB
    assert not memory.fits and memory.shortfall_bytes > 50e9
    assert memory.per_device_bytes == pytest.approx(memory.capacity_bytes + memory.shortfall_bytes)
    assert memory.smallest_fit is not None and memory.smallest_fit.tp * memory.smallest_fit.pp >= 2
    for tp in (4, 8):
        r = mapper.map_workload(w, h100, PlanOptions(dtype="bf16", tp=tp))
        assert r.memory.fits
        share = r.parallel.interconnect_share
        assert 0 < share < 1  # the decode step's all-reduce share is reported
        assert len([c for c in r.parallel.collectives if c.kind == "all-reduce"]) == 160


def _greedy_stages(times: list[float], stages: int) -> list[int]:
    """The stage search kernel by kernel, a running sum per stage: what `balance_stages` must give."""

    def fill(bound: float) -> list[int] | None:
        out, stage, acc = [], 0, 0.0
        for x in times:
            if acc + x > bound and acc > 0:
                stage, acc = stage + 1, 0.0
            if stage >= stages:
                return None
            out.append(stage)
            acc += x
        return out

    lo, hi = max(times), float(np.sum(times))
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fill(mid) is None else (lo, mid)
    return fill(hi) or [0] * len(times)


def test_stage_search_matches_the_running_sum_kernel_by_kernel():
    # ties included: equal kernels, zero-time kernels and one kernel past every bound
    rng = np.random.default_rng(7)
    cases = [rng.exponential(1e-5, 2000).tolist(), [1e-5] * 999, [0.0, 0.0, 3e-6, 1e-6, 0.0, 2e-6] * 50]
    cases.append([1e-6] * 40 + [1e-3] + [1e-6] * 40)
    # the search's ends jump to bounds a fill meets or misses exactly: repeated layers' equal sums, short timelines
    cases += [np.tile(rng.uniform(0, 1e-4, 7), 40).tolist(), rng.uniform(0, 1e-3, 5).tolist(), [2e-6, 1e-6] * 3]
    cases += [rng.choice([1e-5, 2e-5, 3e-6], 300).tolist() for _ in range(20)]
    for times in cases:
        for stages in (2, 3, 4, 8):
            assert balance_stages(times, stages) == _greedy_stages(times, stages)


def test_pipeline_stages_are_balanced_and_send_activations(h100):
    assert balance_stages([1, 1, 1, 1, 4], 2) == [0, 0, 0, 0, 1]
    assert balance_stages([3, 1, 1, 1, 1, 1], 2) == [0, 0, 1, 1, 1, 1]  # 4 and 4
    w = mapper.load_workload("llama2-7b", {"batch": 4, "seq": 128, "past": 0})
    one = mapper.map_workload(w, h100, PlanOptions(dtype="bf16"))
    two = mapper.map_workload(w, h100, PlanOptions(dtype="bf16", pp=2))
    stages = two.parallel.stage_times_s
    assert max(stages) / min(stages) < 1.1
    sends = [e for e in two.kernels if e.kernel.collective == "p2p"]
    assert len(sends) == 1 and sends[0].kernel.dram_bytes >= 4 * 128 * 4096 * 2  # at least the hidden state
    assert two.totals.throughput_per_s > 1.8 * one.totals.throughput_per_s
    assert two.totals.latency_s >= one.totals.latency_s


def test_data_parallel_replicas_multiply_throughput(h100):
    w = mapper.load_workload("resnet50", {"batch": 32})
    one = mapper.map_workload(w, h100, PlanOptions(dtype="bf16"))
    four = mapper.map_workload(w, h100, PlanOptions(dtype="bf16", dp=4))
    assert four.totals.throughput_per_s == pytest.approx(4 * one.totals.throughput_per_s)
    assert four.totals.latency_s == pytest.approx(one.totals.latency_s)


def test_too_many_devices_for_the_interconnect_is_an_error(h100):
    with pytest.raises(mapper.MapperError, match="exceeds the 8"):
        mapper.map_workload(mapper.load_workload("bert-base"), h100, PlanOptions(tp=16))


def test_cli_json_has_memory_and_collectives(capsys):
    import json

    from mapper.cli.main import main

    assert (
        main(
            [
                "map",
                "llama2-7b",
                "--seq",
                "1",
                "--dim",
                "past=1024",
                "--dtype",
                "bf16",
                "--devices",
                "8",
                "--tp",
                "4",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert {"per_device_bytes", "capacity_bytes", "fits", "shortfall_bytes"} <= set(doc["memory"])
    assert doc["parallel"]["dp"] == 2 and any(k["bottleneck"] == "interconnect" for k in doc["kernels"])


def test_pipeline_stages_of_a_partly_unresolved_model_map_without_a_crash(h100):
    """A tensor of no known shape (its node unresolved: BERT-tiny past its 128 positions) crossing a stage
    boundary is left out of the sends, as the kernels leave it out of their traffic; it raised KeyError."""
    model = mapper.open_model(str(Path(__file__).parent / "models" / "hf_bert_tiny_ts.onnx"))
    workload = model.bind({"batch": 3, "seq": 200})
    assert workload.graph.unresolved  # the shapes the positions' Gather cannot give
    result = mapper.map_workload(workload, h100, PlanOptions(pp=2))
    assert len(result.parallel.stage_times_s) == 2 and result.totals.latency_s > 0


def test_tensor_roles_are_assigned_once_per_fusion_plan_and_match_a_fresh_assignment(h100, monkeypatch):
    """The roles depend on the graph's structure and the kernels' nodes, not on sizes or the TP degree: mapping
    two bindings at two TP degrees assigns them once (ModelCaches.tensor_roles), and the kernels equal those of
    a handle that assigns them itself; a different plan (other fusion groups) assigns its own."""
    from mapper.plan import sharding

    calls = []
    real = sharding.assign_roles
    monkeypatch.setattr(sharding, "assign_roles", lambda *a, **k: calls.append(1) or real(*a, **k))
    model = mapper.open_model("gpt2-small")
    results = [
        mapper.map_workload(model.bind({"batch": b, "seq": 128}), h100, PlanOptions(tp=tp))
        for b, tp in ((1, 2), (8, 4))
    ]
    assert len(calls) == 1
    mapper.map_workload(model.bind({"batch": 1, "seq": 128}), h100, PlanOptions(tp=2, fusion="none"))
    assert len(calls) == 2  # other kernels, other roles
    fresh = mapper.map_workload(mapper.open_model("gpt2-small").bind({"batch": 8, "seq": 128}), h100, PlanOptions(tp=4))
    assert [k.kernel.shard for k in fresh.kernels] == [k.kernel.shard for k in results[1].kernels]
    assert fresh.totals.latency_s == results[1].totals.latency_s
