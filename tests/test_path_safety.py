"""Path safety: no path written inside an uploaded file is ever opened, at import or at mapping.

An audit hook (sys.addaudithook) records every 'open' while a model is loaded and mapped. External-data
locations with '..', absolute paths, symlinks to a secret, and paths in names, doc strings and
metadata must all stay unopened; only the model file itself (when given by path) is read.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

import mapper
from tests.conftest import make_model, tensor, weight

_RECORDING: list[list[str]] = []  # a stack: audit hooks cannot be removed, so one hook serves every test


def _audit(event, args):
    if _RECORDING and event in ("open", "os.listdir", "os.scandir", "shutil.copyfile") and args:
        target = args[0]
        if isinstance(target, (str, bytes, os.PathLike)):
            _RECORDING[-1].append(os.fsdecode(target))


sys.addaudithook(_audit)


def opened_while(fn) -> list[str]:
    """Paths opened while fn() runs, less the interpreter's own (modules imported lazily)."""
    _RECORDING.append([])
    try:
        fn()
    finally:
        seen = _RECORDING.pop()
    return [
        p
        for p in seen
        if not p.endswith((".py", ".pyc", ".so"))
        and "site-packages" not in p
        and "__pycache__" not in p
        and not p.startswith(sys.prefix)
        and not p.startswith(sys.base_prefix)
    ]


def hostile_model(tmp_path: Path) -> tuple[bytes, Path]:
    """Weights whose external data name a secret by absolute path, '..', a symlink and a plain name;
    and the same paths in node names, the doc string, metadata and a string attribute."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\1" * 4096)
    (tmp_path / "link.bin").symlink_to(secret)
    locations = (
        str(secret),
        "../../etc/passwd",
        "link.bin",
        "secret.bin",
        "/etc/shadow",
        "..\\..\\windows\\system32",
        "file:///etc/passwd",
    )
    nodes, inits = [], []
    for i, location in enumerate(locations):
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"], name=f"{location}#{i}"))
        t = weight(f"w{i}", (8, 4))
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", "0"), ("length", "128")):
            t.external_data.add(key=k, value=v)
        inits.append(t)
    nodes.append(helper.make_node("Identity", ["y0"], ["z"], name="/etc/passwd"))
    graph = helper.make_graph(
        nodes,
        str(secret),
        [tensor("x", [2, 8])],
        [tensor(f"y{i}", [2, 4]) for i in range(len(locations))] + [tensor("z", [2, 4])],
        initializer=inits,
        doc_string=str(secret),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], doc_string="../../etc/passwd")
    helper.set_model_props(model, {"external": str(secret), "path": "link.bin"})
    return model.SerializeToString(), secret


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative locations ('secret.bin', 'link.bin') resolve to real files here
    return tmp_path


def test_uploaded_bytes_open_nothing_at_import_or_mapping(in_tmp):
    data, _ = hostile_model(in_tmp)
    hw = mapper.load_hardware("h100-sxm")
    holder = {}
    assert opened_while(lambda: holder.update(w=mapper.load_workload(data))) == []
    assert opened_while(lambda: holder.update(r=mapper.map_workload(holder["w"], hw))) == []
    assert opened_while(lambda: mapper.mapping_document(holder["r"])) == []
    assert holder["w"].weight_bytes == 7 * 8 * 4 * 4  # the dims are enough: sizes known, data never read


def test_a_model_path_opens_only_that_file(in_tmp):
    data, _ = hostile_model(in_tmp)
    path = in_tmp / "model.onnx"
    path.write_bytes(data)
    hw = mapper.load_hardware("h100-sxm")  # the built-in profile folder is the engine's own, listed at load
    opened = opened_while(lambda: mapper.map_workload(mapper.load_workload(str(path)), hw))
    assert opened == [str(path)]


def test_a_symlinked_model_path_is_read_once_and_nothing_beside_it(in_tmp):
    data, secret = hostile_model(in_tmp)
    real = in_tmp / "real.onnx"
    real.write_bytes(data)
    (in_tmp / "alias.onnx").symlink_to(real)
    opened = opened_while(lambda: mapper.load_workload(str(in_tmp / "alias.onnx")))
    assert opened == [str(in_tmp / "alias.onnx")]
    assert str(secret) not in opened


def test_a_path_in_a_dim_binding_or_name_is_not_opened(in_tmp):
    """Dim names and values come from the user too: a name that is a path is only a name."""
    data = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", ["/etc/passwd", 4])], [tensor("y", ["/etc/passwd", 4])]
    )
    opened = opened_while(lambda: mapper.load_workload(data, {"/etc/passwd": 2}))
    assert opened == []
