"""The command line as CI jobs use it: the JSON document's stable keys, sheets, listings."""

from __future__ import annotations

import json

import pytest

from mapper.cli.main import main


def _json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_map_json_has_the_stable_keys(capsys):
    doc = _json(
        capsys,
        "map",
        "bert-base",
        "--hw",
        "h100-sxm",
        "--batch",
        "2",
        "--seq",
        "64",
        "--dtype",
        "bf16",
        "--rate",
        "1000",
        "--json",
    )
    assert {"name", "sha256", "nodes"} <= set(doc["model"]) and doc["hardware"]["name"] == "h100-sxm"
    assert {
        "flops",
        "matrix_flops",
        "dram_bytes",
        "weight_bytes",
        "latency_s",
        "throughput_per_s",
        "mfu",
        "memory_stall_fraction",
        "energy_j",
        "avg_power_w",
        "perf_per_watt",
    } <= set(doc["totals"])
    node = doc["nodes"][0]
    assert {"name", "op_type", "op_class", "layer_type", "flops", "bytes"} <= set(node)
    kernel = doc["kernels"][0]
    assert {
        "name",
        "ops",
        "layer_type",
        "engine",
        "tile",
        "waves",
        "flops",
        "dram_bytes",
        "time_s",
        "compute_time_s",
        "memory_time_s",
        "overhead_s",
        "stall_fraction",
        "bottleneck",
        "evidence",
        "owner",
    } <= set(kernel)
    assert {"layer_type", "time_s", "flops", "mfu", "stall_fraction"} <= set(doc["layer_types"][0])
    assert doc["options"]["dtype"] == "bf16" and doc["unmodeled"] == []
    serving = doc["serving"]
    assert serving["p50_s"] <= serving["p95_s"] <= serving["p99_s"] and serving["assumptions"]
    assessment = doc["assessment"]
    assert {"question", "load", "first_failure", "candidates", "chosen", "chosen_reason"} <= set(assessment)
    assert assessment["load"]["rate_per_s"] == 1000 and not assessment["load"]["derived"]
    assert sum(k["time_s"] for k in doc["kernels"]) == pytest.approx(doc["totals"]["latency_s"])


def test_hw_and_zoo_listings(capsys):
    hw = _json(capsys, "hw", "--json")
    assert {r["name"] for r in hw} >= {
        "h100-sxm",
        "h200-sxm",
        "a100-sxm-80gb",
        "l4",
        "b200",
        "mi300x",
        "tpu-v5e",
        "gaudi2",
        "cpu-x86",
    }
    zoo = _json(capsys, "zoo", "--json")
    assert [z["name"] for z in zoo] == [
        "resnet50",
        "mobilenetv2",
        "alexnet",
        "bert-base",
        "gpt2-small",
        "vit-b16",
        "llama2-7b",
        "llama2-70b",
        "mixtral-8x7b",
    ]


def test_map_writes_a_sheet(tmp_path, capsys):
    out = tmp_path / "sheet.xlsx"
    assert main(["map", "resnet50", "--batch", "4", "--out", str(out)]) == 0
    import pandas as pd

    sheets = pd.read_excel(out, sheet_name=None)
    assert {"Summary", "Kernels", "Serving", "Assumptions", "Provenance"} <= set(sheets)


def test_sweep_holds_a_dim_given_with_dim(capsys):
    """`mapper sweep --dim NAME=VALUE` holds a dim the grid does not sweep (an Optimum export's past length)."""
    from tests.conftest import MODELS_DIR

    doc = _json(
        capsys,
        "sweep",
        str(MODELS_DIR / "optimum_gpt2_tiny_with_past.onnx"),
        "--batch",
        "1,2",
        "--seq",
        "1",
        "--dim",
        "past_sequence_length=64",
        "--json",
        "--no-progress",
    )
    assert doc["slices"] == 2 and doc["failed"] == 0


def test_hw_name_shows_how_the_figures_were_obtained_and_checked(capsys, tmp_path):
    from mapper import load_hardware

    assert main(["hw", "mi300x"]) == 0
    out = capsys.readouterr().out
    evidence = load_hardware("mi300x").evidence
    assert evidence is not None
    words = " ".join(out.split())  # the notes are wrapped to the terminal's width
    assert f"obtained: {evidence.obtained} checked: {evidence.checked}" in words
    assert out.startswith("mi300x: AMD Instinct MI300X 192GB (AMD, gpu), profile sha ")
    doc = _json(capsys, "hw", "mi300x", "--json")
    assert doc["meta"]["evidence"]["checked"] == evidence.checked and doc["sha256"] == load_hardware("mi300x").sha256
    tree = load_hardware("l4").to_dict()
    del tree["meta"]["evidence"]
    (tmp_path / "mine.json").write_text(json.dumps(tree))
    assert main(["hw", str(tmp_path / "mine.json")]) == 0
    assert "obtained: not stated in the profile" in capsys.readouterr().out
    assert main(["hw", "no-such-device"]) == 2
    assert "not a built-in profile" in capsys.readouterr().err
