"""The root-cause packet unzips, and its reproduce.sh rebuilds every file in it byte for byte."""

import io
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import mapper

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_packet_unzips_and_reproduce_sh_rebuilds_every_file_byte_identically(tmp_path):
    hw = mapper.load_hardware("h100-sxm")
    request = mapper.ReviewRequest(
        "resnet50", {"batch": 1}, hw, mapper.PlanOptions(dtype="bf16"), note="a 'quoted' note"
    )
    data = mapper.packet_bytes(mapper.run_review(request))
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        files = {n: z.read(n) for n in z.namelist()}
        z.extractall(tmp_path / "packet")
    expected = {
        "review.json",
        "README.md",
        "reproduce.sh",
        "profiles/h100-sxm.json",
        "baseline.xlsx",
        "baseline.html",
        "fix.xlsx",
        "fix.html",
        "validation_matrix.csv",
        "validation_verdicts.csv",
        "rollback_boundary.csv",
    }
    assert set(files) == expected
    doc = json.loads(files["review.json"])
    for key in ("slice", "kpis", "first_failure", "chosen_fix", "owner", "note", "expected_gain", "rollback_boundary"):
        assert key in doc
    assert doc["note"] == "a 'quoted' note" and doc["first_failing_slice"]["sentence"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "mapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mapper "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    rebuilt = tmp_path / "rebuilt"
    rebuilt.mkdir()
    (rebuilt / "reproduce.sh").write_bytes(files["reproduce.sh"])
    (rebuilt / "profiles").mkdir()
    (rebuilt / "profiles/h100-sxm.json").write_bytes(files["profiles/h100-sxm.json"])
    env = dict(os.environ, PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    subprocess.run(["sh", "reproduce.sh"], cwd=rebuilt, env=env, check=True, capture_output=True, timeout=600)
    for name, content in files.items():
        assert (rebuilt / name).read_bytes() == content, name
