"""Sweeps: one row per slice with the totals of a direct mapping, seq ignored where a model has none,
failed slices reported not fatal, best plans and flips, and the same table from every executor."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pandas as pd
import pytest

import mapper
from mapper.core.errors import MapperError
from mapper.explore.executors import executor_spec
from mapper.explore.sweep import NO_SEQ_NOTE, SweepSpec, parse_int_list, plan_flips, plan_tasks, run_sweep, write_table

# A reduced grid (the full 6 x 5 x 2 x 2 x 2 grid runs in bench/bench_sweep.py).
SMALL = SweepSpec(
    ("resnet50", "bert-base"),
    ("h100-sxm", "a100-sxm-80gb"),
    (1, 8),
    (128, 512),
    ("bf16",),
    ("none", "aggressive"),
    chunk_slices=8,
)


@pytest.fixture(scope="module")
def inprocess():
    calls = []
    result = run_sweep(SMALL, progress=lambda done, total: calls.append((done, total)))
    return result, calls


def test_grid_rows_and_no_seq_model(inprocess):
    result, _ = inprocess
    table = result.table
    # bert: 2 batch x 2 seq x 2 hw x 2 fusion; resnet50 has no seq dim: 2 batch x 2 hw x 2 fusion
    assert len(table) == 16 + 8
    assert list(table["slice_id"]) == list(range(24))
    resnet = table[table["model"] == "resnet50"]
    assert resnet["seq"].isna().all() and (resnet["note"] == NO_SEQ_NOTE).all()
    assert (table[table["model"] == "bert-base"]["note"] == "").all()
    assert (table["status"] == "ok").all()


def test_row_equals_a_direct_mapping(inprocess):
    table = inprocess[0].table
    row = table[
        (table.model == "bert-base")
        & (table.hardware == "a100-sxm-80gb")
        & (table.batch == 8)
        & (table.seq == 512)
        & (table.fusion == "aggressive")
    ].iloc[0]
    result = mapper.map_workload(
        mapper.load_workload("bert-base", batch=8, seq=512),
        mapper.load_hardware("a100-sxm-80gb"),
        mapper.PlanOptions(dtype="bf16", fusion="aggressive"),
    )
    assert row.latency_s == result.totals.latency_s and row.mfu == result.totals.mfu
    assert row.dram_bytes == result.totals.dram_bytes and row.kernel_count == len(result.kernels)
    by_class = {}
    for k in result.kernels:
        by_class[k.bottleneck] = by_class.get(k.bottleneck, 0) + k.time_s
    assert row.dominant_bottleneck == max(by_class, key=by_class.get)
    largest = max((k for k in result.kernels if k.tiling.chosen), key=lambda k: k.kernel.matrix_flops)
    assert row.tile == f"{largest.tiling.chosen.tile_m}x{largest.tiling.chosen.tile_n}x{largest.tiling.chosen.tile_k}"


def test_other_dims_are_held_for_every_slice():
    """A file with a KV-cache dim (Optimum's export) sweeps batch and seq with its past length held; one
    sweep holds a dim for every model that has it (a built-in's past too) and leaves the rest alone. Rows
    equal direct mappings at the same bindings; without the held dim the sweep says which one to bind."""
    from tests.conftest import MODELS_DIR

    optimum = str(MODELS_DIR / "optimum_gpt2_tiny_with_past.onnx")
    spec = SweepSpec(
        (optimum, "llama2-7b", "resnet50"),
        ("h100-sxm",),
        (1, 4),
        (1,),
        ("bf16",),
        ("default",),
        dims=(("past_sequence_length", 512), ("past", 2048)),
    )
    table = run_sweep(spec).table
    assert (table["status"] == "ok").all() and len(table) == 2 + 2 + 2
    for model, dims in ((optimum, {"past_sequence_length": 512}), ("llama2-7b", {"past": 2048})):
        name = "optimum_gpt2_tiny_with_past" if model == optimum else model
        row = table[(table.model == name) & (table.batch == 4)].iloc[0]
        direct = mapper.map_workload(
            mapper.load_workload(model, dims, batch=4, seq=1),
            mapper.load_hardware("h100-sxm"),
            mapper.PlanOptions(dtype="bf16"),
        )
        assert row.latency_s == direct.totals.latency_s
    with pytest.raises(MapperError, match="unbound dims: past_sequence_length"):
        run_sweep(SweepSpec((optimum,), ("h100-sxm",), (1,), (1,)))


def test_progress_reaches_total(inprocess):
    calls = inprocess[1]
    assert calls[0] == (0, 24) and calls[-1] == (24, 24)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_fusion_wins_and_best_plan_is_fastest(inprocess):
    result = inprocess[0]
    table = result.table
    for keys, group in table.groupby(["model", "hardware", "batch", "seq"], dropna=False):
        lat = group.set_index("fusion")["latency_s"]
        assert lat["aggressive"] < lat["none"], keys
    assert len(result.best) == 12
    assert (result.best["fusion"] == "aggressive").all()


def test_plan_flips_name_what_changed():
    best = pd.DataFrame(
        {
            "model": ["m"] * 3,
            "hardware": ["h"] * 3,
            "batch": [1, 8, 64],
            "seq": pd.array([128] * 3, dtype="Int64"),
            "fusion": ["none", "none", "aggressive"],
            "plan_dtype": ["bf16"] * 3,
            "tile": ["64x64x32", "128x128x32", "128x128x32"],
        }
    )
    flips = plan_flips(best)
    assert list(flips["changed"]) == ["tile", "fusion"]
    assert list(flips["from"]) == [1, 8] and list(flips["to"]) == [8, 64]
    assert (flips["axis"] == "batch").all() and (flips["at"] == "seq=128").all()


def test_unsupported_dtype_is_a_failed_row_not_a_crash():
    result = run_sweep(SweepSpec(("resnet50",), ("a100-sxm-80gb", "h100-sxm"), (1,), (128,), ("fp8",), ("default",)))
    a100, h100 = result.table.itertuples()
    assert a100.status == "error" and "fp8" in a100.error
    assert h100.status == "ok" and h100.plan_dtype == "fp8"


@pytest.mark.parametrize(
    "bad, message",
    [
        (SweepSpec(("resnet50",), ("h100-sxm",), (0,)), "positive integers"),
        (SweepSpec(("resnet50",), ("h100-sxm",), fusions=("max",)), "fusion"),
        (SweepSpec(("no-such-model",), ("h100-sxm",)), "no-such-model"),
        (SweepSpec(("resnet50",), ("no-such-profile",)), "no-such-profile"),
    ],
)
def test_bad_grids_are_errors_a_person_can_act_on(bad, message):
    with pytest.raises(MapperError, match=message):
        plan_tasks(bad)


def test_tasks_hold_whole_shapes_and_name_the_model_shipped_once():
    shared, tasks, total = plan_tasks(SMALL)
    assert total == 24
    assert sum(len(t.shapes) for t in tasks) == 4 + 2  # every shape in exactly one task
    assert len(shared.hardware) == 2 and all(len(t.options) == 2 for t in tasks)
    assert {t.model for t in tasks} == set(range(len(shared.models)))  # an index: the parse is not in the task
    assert all(len(pickle.dumps(t)) < 1000 for t in tasks)


def test_int_lists():
    assert parse_int_list("1, 8,64", "batch") == (1, 8, 64)
    with pytest.raises(MapperError, match="--seq"):
        parse_int_list("128,x", "seq")


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_table_round_trips(inprocess, tmp_path, suffix):
    path = str(tmp_path / f"t.{suffix}")
    write_table(inprocess[0], path)
    back = pd.read_parquet(path) if suffix == "parquet" else pd.read_csv(path)
    assert len(back) == 24 and back["latency_s"].tolist() == pytest.approx(inprocess[0].table["latency_s"].tolist())


def test_process_pool_table_equals_inprocess(inprocess):
    pooled = run_sweep(SMALL, executor_spec("processes", workers=2))
    pd.testing.assert_frame_equal(pooled.table, inprocess[0].table)


@pytest.mark.slow
def test_dask_local_cluster_table_equals_inprocess(inprocess):
    pytest.importorskip("distributed")
    dasked = run_sweep(SMALL, executor_spec("dask", workers=2))  # a LocalCluster: 2 workers x 1 thread
    assert "dask" in dasked.provenance["executor"]
    pd.testing.assert_frame_equal(dasked.table, inprocess[0].table)
    pd.testing.assert_frame_equal(dasked.best, inprocess[0].best)


EARLY_CHILD = r"""
import json, sys, psutil
from mapper.explore.executors import executor_spec, start_workers_early
from mapper.explore.sweep import run_task
start_workers_early(executor_spec(sys.argv[1], scheduler=sys.argv[2] or None), run_task)
print(json.dumps([" ".join(c.cmdline()) for c in psutil.Process().children()]))
"""


@pytest.mark.parametrize(
    ("kind", "scheduler", "started"),
    [("dask", "", True), ("inprocess", "", False), ("processes", "", False), ("dask", "tcp://127.0.0.1:1", False)],
)
def test_a_local_dask_clusters_fork_server_starts_before_the_tasks_are_planned(kind, scheduler, started):
    """The sweep starts the fork server a LocalCluster's workers fork from before it plans (its imports overlap);
    nothing starts for another executor or a running cluster's address."""
    pytest.importorskip("distributed")
    out = subprocess.run(
        [sys.executable, "-c", EARLY_CHILD, kind, scheduler],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    servers = [c for c in json.loads(out) if "forkserver" in c]
    assert bool(servers) == started, out
    if started:  # its preload: Dask, then the engine's stages and the task's module
        assert "['distributed', 'mapper.pipeline', 'mapper.explore.sweep']," in servers[0]


def test_sweep_page_runs_a_small_sweep_with_heatmaps():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    page = str(Path(__file__).resolve().parents[1] / "app_pages" / "sweep.py")
    at = AppTest.from_file(page, default_timeout=120).run()
    assert not at.exception and at.info  # asks for a run first
    at.multiselect(key="sweep_batches").set_value([1, 8]).run()
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 3  # MFU, latency, bottleneck class
    at.radio(key="sweep_plan").set_value("bf16 · fusion none").run()
    assert not at.exception and len(at.get("plotly_chart")) == 3
