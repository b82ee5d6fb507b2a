"""A review packet rebuilds alone: unzipped in an empty folder (with the model file beside reproduce.sh where the
model came as a file or an upload), its reproduce.sh checks the model's sha256, runs the CLI and rewrites every
member byte for byte; and no member names a folder of the machine that wrote it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import mapper

pytestmark = pytest.mark.slow  # each packet rebuilt by its own reproduce.sh in a child process, ~3 s each

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "models"
DECODER = MODELS / "optimum_gpt2_tiny_with_past.onnx"  # a real export (Optimum), 83 kB, symbolic dims
ENCODER = MODELS / "hf_bert_tiny.onnx"  # a real export (torch dynamo), 117 kB
DECODE_STEP = {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 64}


def _request(source: str, folder: Path) -> mapper.ReviewRequest:
    """The review of each source, in a folder under the test's temp dir (the path a packet must not carry). The file
    source takes fp8 as its fix: a fix with a quality check, whose fallback names the baseline plan in the matrix."""
    hw = mapper.load_hardware("h100-sxm")
    if source == "file":
        model = folder / "gpt2 export.onnx"  # a space: the script quotes the name
        shutil.copy(DECODER, model)
        return mapper.ReviewRequest(str(model), DECODE_STEP, hw, fix="dtype=fp8", note="it's a file")
    if source == "upload":
        return mapper.ReviewRequest(ENCODER.read_bytes(), {"batch": 2, "seq": 16}, hw, file_name="bert.onnx")
    if source == "upload-unnamed":
        return mapper.ReviewRequest(DECODER.read_bytes(), DECODE_STEP, hw)
    if source == "upload-precision":
        return mapper.ReviewRequest(DECODER.read_bytes(), DECODE_STEP, hw, fix="dtype=fp8", file_name="gpt2.onnx")
    return mapper.ReviewRequest("bert-base", {"batch": 1, "seq": 32}, hw, mapper.PlanOptions(dtype="bf16"))


def _texts(name: str, data: bytes):
    """Each member's bytes, a workbook's own members unpacked (its XML is deflated inside the packet)."""
    yield name, data
    if name.endswith(".xlsx"):
        with zipfile.ZipFile(io.BytesIO(data)) as book:
            for inner in book.namelist():
                yield f"{name}:{inner}", book.read(inner)


def _run(folder: Path, **env: str) -> subprocess.CompletedProcess:
    """reproduce.sh run from another folder (it moves to its own), the CLI as `python -m mapper`."""
    env = dict(os.environ, MAPPER=f"{sys.executable} -m mapper", PYTHON=sys.executable, PYTHONPATH=str(ROOT)) | env
    return subprocess.run(
        ["sh", str(folder / "reproduce.sh")],
        check=False,
        cwd=folder.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _unzip(data: bytes, folder: Path) -> dict[str, bytes]:
    folder.mkdir()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        z.extractall(folder)
        return {n: z.read(n) for n in z.namelist()}


@pytest.mark.parametrize(
    "source",
    [
        "file",
        "upload",
        "upload-unnamed",
        "builtin",
        "upload-precision",  # the matrix's fallback names the plan the same from the upload and from its file
    ],
)
def test_packet_rebuilds_byte_for_byte_in_an_empty_folder(source, tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    request = _request(source, origin)
    data = mapper.packet_bytes(mapper.run_review(request))
    files = _unzip(data, tmp_path / "rebuilt")
    doc = json.loads(files["review.json"])
    machine = {str(tmp_path), str(Path.home()), str(ROOT), os.getcwd()}  # the folders of the writing machine
    for name, content in files.items():
        for part, text in _texts(name, content):
            assert not [m for m in machine if m.encode() in text], part
    model = doc["model_file"]
    if source == "builtin":
        assert model is None and "no file needed" in files["README.md"].decode()
    else:
        given = request.model if isinstance(request.model, bytes) else Path(request.model).read_bytes()
        assert model["sha256"] == hashlib.sha256(given).hexdigest()
        assert model["name"] == {
            "file": "gpt2 export.onnx",
            "upload": "bert.onnx",
            "upload-precision": "gpt2.onnx",
        }.get(source, "upload.onnx")
        readme = files["README.md"].decode()
        assert f"named `{model['name']}`" in readme and model["sha256"] in readme and "sha256sum" in readme
        (tmp_path / "rebuilt" / model["name"]).write_bytes(given)
    done = _run(tmp_path / "rebuilt")
    assert done.returncode == 0, done.stdout + done.stderr
    for name, content in files.items():
        assert (tmp_path / "rebuilt" / name).read_bytes() == content, name
    left = {str(p.relative_to(tmp_path / "rebuilt")) for p in (tmp_path / "rebuilt").rglob("*") if p.is_file()}
    assert left == set(files) | ({model["name"]} if model else set())  # packet.zip unpacked and removed


def test_reproduce_sh_stops_on_a_missing_or_different_model_file(tmp_path):
    """Before it runs anything: no file is one line naming where it goes; another file is one line with both
    hashes. Neither runs mapper (MAPPER points nowhere that works)."""
    request = _request("upload", tmp_path)
    files = _unzip(mapper.packet_bytes(mapper.run_review(request)), tmp_path / "packet")
    missing = _run(tmp_path / "packet")
    assert missing.returncode == 2 and "model file bert.onnx not found: put it beside reproduce.sh" in missing.stderr
    (tmp_path / "packet" / "bert.onnx").write_bytes(DECODER.read_bytes())
    other = _run(tmp_path / "packet")
    assert other.returncode == 2 and "not the model of this packet" in other.stderr
    assert hashlib.sha256(DECODER.read_bytes()).hexdigest() in other.stderr
    no_mapper = _run(tmp_path / "packet", MAPPER="no-such-mapper-command")
    assert no_mapper.returncode == 2 and "no command no-such-mapper-command" in no_mapper.stderr
    assert (tmp_path / "packet" / "review.json").read_bytes() == files["review.json"]


@pytest.mark.parametrize("given", ["path", "upload"])
def test_a_trace_is_the_proving_artifact_and_rebuilds_beside_reproduce_sh(given, tmp_path):
    """A run of the slice attached to the review: step 3's measured evidence and verdict, the trace's name, sha256 and
    summary in review.json, and reproduce.sh that stops without the trace and rebuilds every file with it."""
    trace = ROOT / "data" / "evidence" / "torch_cpu" / "resnet50.json.gz"
    if given == "path":
        copy = tmp_path / "a folder" / "run.json.gz"  # its folder stays out of the packet
        copy.parent.mkdir()
        shutil.copy(trace, copy)
        attached = {"trace": str(copy)}
    else:
        attached = {"trace": trace.read_bytes(), "trace_name": "run.json.gz"}
    hw = mapper.load_hardware("cpu-x86")
    review = mapper.run_review(mapper.ReviewRequest("resnet50", {"batch": 1}, hw, **attached))
    files = _unzip(mapper.packet_bytes(review), tmp_path / "rebuilt")
    doc = json.loads(files["review.json"])
    record = doc["trace_file"]
    assert record["name"] == "run.json.gz" and record["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert record["summary"]["matched_share"] == 1.0 and record["summary"]["runs"] == 2
    verdict = doc["proving_artifact"]["measured_verdict"]
    assert verdict["class"] == review.dominant and verdict["verdict"] in ("proves", "refutes")
    assert verdict["measured_s"] > 0 and 0 < verdict["achieved_flops_per_s"] < verdict["peak_flops_per_s"]
    assert doc["proving_artifact"]["measured"]["model"]["measured_p50_s"] > 0
    assert str(tmp_path).encode() not in b"".join(files.values())
    missing = _run(tmp_path / "rebuilt")
    assert missing.returncode == 2 and "trace file run.json.gz not found" in missing.stderr
    (tmp_path / "rebuilt" / "run.json.gz").write_bytes(trace.read_bytes())
    done = _run(tmp_path / "rebuilt")
    assert done.returncode == 0, done.stdout + done.stderr
    for name, content in files.items():
        assert (tmp_path / "rebuilt" / name).read_bytes() == content, name
