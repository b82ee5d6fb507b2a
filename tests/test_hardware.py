"""Hardware profiles: every built-in loads with a source per number, golden ridge points, and bad input is refused."""

from __future__ import annotations

import copy
import json
import math
import tomllib

import numpy as np
import pytest

from mapper.core.errors import MapperError
from mapper.hardware.load import hardware_dir, list_hardware, load_hardware
from mapper.hardware.profile import EfficiencyCurve, HardwareProfile

BUILTINS = ["a100-sxm-80gb", "b200", "cpu-x86", "gaudi2", "h100-sxm", "h200-sxm", "l4", "mi300x", "tpu-v5e"]


def test_list_hardware_names_the_nine_builtins():
    assert list_hardware() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_loads_and_its_name_is_its_file_name(name):
    profile = load_hardware(name)
    assert isinstance(profile, HardwareProfile)
    assert profile.name == name
    assert len(profile.sha256) == 64


def _numbers(tree, prefix=""):
    """Every { value, source } inline table in a raw parsed profile, by dotted key."""
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and "value" in value:
            yield dotted, value
        elif isinstance(value, dict):
            yield from _numbers(value, dotted + ".")
        else:
            assert isinstance(value, str), f"{dotted} is a bare number without a source"


@pytest.mark.parametrize("name", BUILTINS)
def test_every_number_has_a_specific_source(name):
    raw = tomllib.loads((hardware_dir() / f"{name}.toml").read_text())
    entries = dict(_numbers(raw))
    assert len(entries) >= 30
    profile = load_hardware(name)
    for dotted, entry in entries.items():
        assert len(entry["source"].strip()) >= 10, dotted
        assert profile.sources[dotted] == entry["source"]
    assert set(profile.sources) == set(entries)


# PRIMER.md section 5: ridge point = peak / bandwidth, H100 bf16 ~295 FLOP/B, H200 ~206, A100 ~153.
@pytest.mark.parametrize("name, ridge", [("h100-sxm", 295), ("h200-sxm", 206), ("a100-sxm-80gb", 153)])
def test_ridge_points_match_the_primer(name, ridge):
    assert load_hardware(name).ridge_point("bf16") == pytest.approx(ridge, rel=0.01)


def test_h200_has_h100_compute_and_more_memory():
    h100, h200 = load_hardware("h100-sxm"), load_hardware("h200-sxm")
    assert h200.matrix_peak_flops_per_s == h100.matrix_peak_flops_per_s
    assert (h200.compute_units, h200.clock_hz, h200.sfu_peak_ops_per_s) == (
        h100.compute_units,
        h100.clock_hz,
        h100.sfu_peak_ops_per_s,
    )
    assert h200.dram_bytes > h100.dram_bytes
    assert h200.dram_bandwidth_bytes_per_s > h100.dram_bandwidth_bytes_per_s


def test_h100_large_gemm_efficiency_and_power_are_calibrated():
    h100 = load_hardware("h100-sxm")
    assert h100.matrix_efficiency.at(8192**3 * 2) == pytest.approx(0.82, abs=0.01)
    assert h100.matrix_efficiency.at(1e7) < 0.5 < h100.matrix_efficiency.at(1e10)
    # A compute-bound bf16 GEMM at 80% of peak, streaming half the HBM bandwidth, draws about TDP.
    power_w = (
        h100.idle_w
        + 0.8 * h100.matrix_peak("bf16") * h100.energy_per_flop_j["bf16"]
        + 0.5 * h100.dram_bandwidth_bytes_per_s * h100.energy_per_dram_byte_j
    )
    assert 0.9 * h100.tdp_w <= power_w <= 1.05 * h100.tdp_w


@pytest.mark.parametrize("name", BUILTINS)
def test_profile_is_self_consistent(name):
    p = load_hardware(name)
    assert 0 <= p.idle_w < p.tdp_w
    assert set(p.matrix_peak_flops_per_s) <= set(p.energy_per_flop_j)
    # large streams reach 85-93% of peak; a curve fitted to measured kernels says so and may sit lower (A100: 77%)
    fitted = p.sources["efficiency.dram_by_bytes"].startswith("FITTED")
    assert p.dram_efficiency.at(1e12) >= (0.7 if fitted else 0.85)
    for dtype, peak in p.matrix_peak_flops_per_s.items():
        assert p.tdp_w / peak < 2e-10, dtype  # the [D] TDP/peak bound stays far below CPU-era nJ per op


def test_matrix_peak_lookup_and_fallbacks():
    a100, h100, gaudi2 = load_hardware("a100-sxm-80gb"), load_hardware("h100-sxm"), load_hardware("gaudi2")
    assert h100.matrix_peak("bfloat16") == h100.matrix_peak("bf16") == 989.4e12
    assert h100.matrix_peak("float8e4m3fn") == 1978.9e12
    assert gaudi2.matrix_peak("fp32") == gaudi2.vector_peak("fp32")  # no fp32 MME figure: GEMM on the vector units
    with pytest.raises(MapperError, match=r"'fp8'.*bf16") as info:
        a100.matrix_peak("fp8")
    assert "\n" not in str(info.value)
    assert h100.vector_peak("bf16") == h100.vector_peak("fp32")  # no bf16 vector figure: fp32 figure
    assert h100.vector_peak("fp16") == 133.8e12


@pytest.mark.parametrize("name", BUILTINS)
def test_to_dict_round_trips_to_an_equal_profile(name):
    profile = load_hardware(name)
    again = load_hardware(profile.to_dict())
    assert again == profile and again.sha256 == profile.sha256
    from_json = load_hardware(json.dumps(profile.to_dict()).encode())
    assert from_json == profile


def test_sha256_follows_the_content():
    tree = load_hardware("h100-sxm").to_dict()
    tree["memory"]["dram_bandwidth_bytes_per_s"]["value"] = 3.0e12
    assert load_hardware(tree).sha256 != load_hardware("h100-sxm").sha256


# ---- bad input: one MapperError line naming the field ------------------------------------------


def _set(tree, dotted, value):
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree[part]
    if value is _DELETE:
        del tree[leaf]
    else:
        tree[leaf] = value


_DELETE = object()
_CURVE = "efficiency.matrix_by_flops.value"
BAD = [
    ("missing field", "memory.dram_bytes", _DELETE, "memory.dram_bytes", "missing"),
    ("missing source", "power.tdp_w.source", _DELETE, "power.tdp_w.source", "missing"),
    ("blank source", "power.tdp_w.source", "  ", "power.tdp_w.source", "source"),
    ("zero", "memory.dram_bandwidth_bytes_per_s.value", 0, "memory.dram_bandwidth_bytes_per_s", "> 0"),
    ("negative", "memory.dram_bandwidth_bytes_per_s.value", -1, "memory.dram_bandwidth_bytes_per_s", "> 0 (got -1)"),
    ("negative idle", "power.idle_w.value", -5.0, "power.idle_w", ">= 0"),
    ("NaN", "compute.clock_hz.value", math.nan, "compute.clock_hz", "finite"),
    ("inf", "memory.l2_bandwidth_bytes_per_s.value", math.inf, "memory.l2_bandwidth_bytes_per_s", "finite"),
    ("string number", "compute.compute_units.value", "132", "compute.compute_units", "whole number"),
    ("fractional count", "compute.compute_units.value", 131.5, "compute.compute_units", "whole number"),
    ("bool", "power.tdp_w.value", True, "power.tdp_w", "number"),
    ("bare number", "power.tdp_w", 700, "power.tdp_w", "table"),
    ("unknown key", "memory.hbm_bytes", {"value": 1, "source": "x"}, "memory.hbm_bytes", "not a known field"),
    (
        "unknown dtype",
        "compute.matrix_peak_flops_per_s.fp64",
        {"value": 6.7e13, "source": "x"},
        "compute.matrix_peak_flops_per_s.fp64",
        "one of",
    ),
    ("bad kind", "meta.kind", "fpga", "meta.kind", "one of"),
    ("bad topology", "interconnect.topology", "hypercube", "interconnect.topology", "one of"),
    (
        "huge table",
        _CURVE,
        [[10.0 ** (1 + i / 100), 0.5] for i in range(300)],
        "efficiency.matrix_by_flops",
        "at most 256",
    ),
    ("unsorted curve", _CURVE, [[1e9, 0.5], [1e6, 0.3]], "efficiency.matrix_by_flops", "sort the points"),
    ("efficiency above 1", _CURVE, [[1e6, 0.5], [1e9, 1.2]], "efficiency.matrix_by_flops", "(0, 1]"),
    ("efficiency zero", _CURVE, [[1e6, 0.0], [1e9, 0.8]], "efficiency.matrix_by_flops", "(0, 1]"),
    ("x zero", _CURVE, [[0.0, 0.1], [1e9, 0.8]], "efficiency.matrix_by_flops", "x must be"),
    ("one point", _CURVE, [[1e9, 0.8]], "efficiency.matrix_by_flops", "at least 2"),
    ("triple point", _CURVE, [[1e6, 0.5, 1.0], [1e9, 0.8]], "efficiency.matrix_by_flops.point 0", "at most 2"),
    ("overhead in us", "overhead.kernel_launch_s.value", 3.0, "kernel_launch_s", "seconds"),
    ("idle above tdp", "power.idle_w.value", 900.0, "power.idle_w", "below power.tdp_w"),
    ("jitter cv", "serving.jitter_cv.value", 1.5, "serving.jitter_cv", "<= 1"),
    ("multi-device without link", "interconnect.topology", "none", "interconnect", "max_devices"),
    ("evidence too long", "meta.evidence.obtained", "x" * 1501, "meta.evidence.obtained", "at most 1500"),
    ("evidence not text", "meta.evidence.checked", 42, "meta.evidence.checked", "a string"),
    ("evidence two lines", "meta.evidence.checked", "one\ntwo", "meta.evidence.checked", "line breaks"),
    ("evidence bidi", "meta.evidence.obtained", "ok\u202ekcehc", "meta.evidence.obtained", "control characters"),
    ("evidence blank", "meta.evidence.obtained", "   ", "meta.evidence.obtained", "say something"),
    ("evidence half", "meta.evidence.checked", _DELETE, "meta.evidence.checked", "missing"),
    ("evidence extra", "meta.evidence.by", "me", "meta.evidence.by", "not a known field"),
]


@pytest.mark.parametrize("label, dotted, value, field, phrase", BAD, ids=[case[0] for case in BAD])
def test_bad_value_gives_one_line_naming_the_field(label, dotted, value, field, phrase):
    tree = copy.deepcopy(load_hardware("h100-sxm").to_dict())
    _set(tree, dotted, value)
    with pytest.raises(MapperError) as info:
        load_hardware(tree)
    message = str(info.value)
    assert "\n" not in message
    assert field in message and phrase in message, message


def test_energy_needed_for_every_peak_dtype():
    tree = load_hardware("h100-sxm").to_dict()
    del tree["power"]["energy_per_flop_j"]["fp8"]
    with pytest.raises(MapperError, match=r"energy_per_flop_j lacks fp8"):
        load_hardware(tree)


# ---- efficiency curves --------------------------------------------------------------------------


def test_efficiency_curve_interpolates_linearly_in_log10_and_clamps():
    curve = EfficiencyCurve(((1e2, 0.2), (1e4, 0.6), (1e6, 0.8)))
    assert curve.at(1e3) == pytest.approx(0.4)  # halfway in log10 between 1e2 and 1e4
    assert curve.at(1e5) == pytest.approx(0.7)
    assert curve.at(10**2.5) == pytest.approx(0.3)
    assert curve.at(1.0) == 0.2 and curve.at(0.0) == 0.2  # clamped below, zero-size kernels too
    assert curve.at(1e9) == 0.8  # clamped above
    np.testing.assert_allclose(curve.at_array(np.array([1e2, 1e3, 1e5, 1e7])), [0.2, 0.4, 0.7, 0.8])


# ---- files and uploads --------------------------------------------------------------------------


def test_user_toml_file_loads(tmp_path):
    text = (hardware_dir() / "l4.toml").read_text().replace('name = "l4"', 'name = "my-l4"', 1)
    path = tmp_path / "my-l4.toml"
    path.write_text(text)
    mine = load_hardware(path)
    assert mine.name == "my-l4" and mine.dram_bandwidth_bytes_per_s == load_hardware("l4").dram_bandwidth_bytes_per_s
    assert load_hardware(str(path)) == mine
    assert load_hardware(text.encode()) == mine  # uploaded bytes


def test_user_json_file_loads(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(load_hardware("mi300x").to_dict()))
    assert load_hardware(path) == load_hardware("mi300x")


@pytest.mark.parametrize(
    "filename, content, phrase",
    [
        ("big.toml", b"#" * (2 << 20), "1 MiB"),
        ("dev.txt", b"x = 1", "unknown file type"),
        ("bad.toml", b"[meta\nname=", "not valid TOML"),
        ("bad.json", b'{"meta": ', "not valid JSON"),
        ("list.json", b"[1, 2]", "top level"),
    ],
)
def test_bad_user_file_is_refused_with_one_line(tmp_path, filename, content, phrase):
    path = tmp_path / filename
    path.write_bytes(content)
    with pytest.raises(MapperError, match=phrase) as info:
        load_hardware(path)
    assert "\n" not in str(info.value) and filename in str(info.value)


def test_unknown_name_lists_the_builtins():
    with pytest.raises(MapperError, match=r"not a built-in profile \(a100-sxm-80gb, .*h100-sxm"):
        load_hardware("h100")


def test_yaml_without_pyyaml_says_use_toml_or_json(tmp_path):
    path = tmp_path / "dev.yaml"
    path.write_text("meta: {}\n")
    try:
        import yaml  # noqa: F401
    except ImportError:
        with pytest.raises(MapperError, match="TOML or JSON"):
            load_hardware(path)
    else:
        with pytest.raises(MapperError, match="meta.name"):
            load_hardware(path)


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_says_how_its_figures_were_obtained_and_checked(name):
    evidence = load_hardware(name).evidence
    assert evidence is not None and evidence.obtained.strip() and evidence.checked.strip()


def test_evidence_round_trips_and_stays_out_of_the_hash():
    """The note travels with the profile (to_dict, a file) but the hash is the figures': rewording how far a
    profile was checked moves no recorded mapping."""
    tree = load_hardware("mi300x").to_dict()
    assert "bench/devices_without_tables.py" in tree["meta"]["evidence"]["checked"]
    tree["meta"]["evidence"]["checked"] = "<b>checked</b> *twice*"
    reworded = load_hardware(tree)
    assert reworded.evidence is not None and reworded.evidence.checked == "<b>checked</b> *twice*"
    assert reworded.sha256 == load_hardware("mi300x").sha256
    del tree["meta"]["evidence"]
    assert load_hardware(tree).evidence is None
    assert load_hardware(tree).sha256 == reworded.sha256


def test_an_edited_profile_says_its_edits_are_unchecked():
    from mapper.hardware.load import edit_profile

    edited = edit_profile(load_hardware("mi300x"), {"memory.dram_bandwidth_bytes_per_s": 5.0e12})
    assert edited.evidence is not None
    assert "mi300x with 1 value(s) edited" in edited.evidence.obtained
    assert edited.evidence.checked == "the edited values are not checked"
    unchanged = edit_profile(load_hardware("mi300x"), {})
    assert unchanged.evidence == load_hardware("mi300x").evidence
