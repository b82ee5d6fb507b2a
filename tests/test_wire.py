"""Models with their weights inside the file: the importer reads the structure, never the weights.

VGG-19 (574 MB) and ZFNet-512 (350 MB) are made here from onnx's light models (each weight a
ConstantOfShape) by writing random float32 weights into the file; their graph-only twins carry the same
weights as shape-only external references. Both must map to the same kernels, FLOPs and times.
"""

from __future__ import annotations

import json
import mmap
import sys
from pathlib import Path

import onnx
import onnx.backend.test
import pytest

import mapper
from bench.bench_big_model import light_graph_only, write_with_weights
from mapper.cli.main import main as cli_main
from mapper.core import limits
from mapper.model import wire
from mapper.model.wire import read_structure

LIGHT = Path(onnx.backend.test.__file__).parent / "data" / "light"
H100 = mapper.load_hardware("h100-sxm")
MIB = 1 << 20


@pytest.fixture(scope="module", params=["vgg19", "zfnet512"])
def embedded(request, tmp_path_factory) -> tuple[Path, Path]:
    """(the model with its weights inside, its graph-only twin), in two folders under one file name."""
    name = request.param
    twin = light_graph_only(onnx.load(LIGHT / f"light_{name}.onnx"), f"{name}.weights.bin")
    root = tmp_path_factory.mktemp(name)
    (root / "full").mkdir()
    (root / "graph").mkdir()
    full, graph = root / "full" / f"{name}.onnx", root / "graph" / f"{name}.onnx"
    write_with_weights(twin, full)
    graph.write_bytes(twin.SerializeToString())
    yield full, graph
    full.unlink()


def mapped(path: Path) -> mapper.MappingResult:
    return mapper.map_workload(mapper.open_model(str(path)).bind(), H100)


@pytest.mark.slow
def test_embedded_weights_map_as_the_graph_only_twin(embedded):
    full, graph = embedded
    assert full.stat().st_size > 300 * 1_000_000  # the real thing: over the old 256 MiB file limit
    a, b = mapped(full), mapped(graph)
    assert [(k.kernel.name, k.kernel.flops, k.time_s) for k in a.kernels] == [
        (k.kernel.name, k.kernel.flops, k.time_s) for k in b.kernels
    ]
    assert a.totals == b.totals
    assert a.memory.per_device_bytes == b.memory.per_device_bytes  # weights sized from dims alone
    assert a.totals.flops > 1e9  # VGG-19: 19.6 GFLOPs, ZFNet-512: 1.2 (a real network, not an empty one)


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_reading_a_large_model_touches_only_its_structure(embedded):
    """Every byte the importer looks at goes through the buffer it is handed: a wrapper over the memory map
    counts them. The audit hook shows the file opened once and nothing else opened. What this proves: the
    reader's own accesses; the page cache may read ahead around them (the benchmark measures RSS)."""
    full, _ = embedded

    class Counted:
        def __init__(self, mm):
            self.mm, self.bytes = mm, 0

        def __len__(self):
            return len(self.mm)

        def __getitem__(self, key):
            value = self.mm[key]
            self.bytes += len(value) if isinstance(key, slice) else 1
            return value

    opened = []

    def hook(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].endswith(".onnx"):
            opened.append(args[0])

    sys.addaudithook(hook)  # hooks cannot be removed: this one only records .onnx opens
    before = len(opened)
    mapper.open_model(str(full))
    assert opened[before:] == [str(full)]
    with open(full, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        counted = Counted(mm)
        structure = read_structure(counted)
    assert counted.bytes <= structure.read_bytes < 300 * 1024  # of a 350-574 MB file
    assert counted.bytes < full.stat().st_size / 1000
    assert structure.stripped >= 8


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_structure_parses_as_shape_only_weights(embedded):
    full, graph = embedded
    model = onnx.ModelProto.FromString(read_structure(full.read_bytes()).data)
    twin = onnx.load(graph, load_external_data=False)
    dims = {t.name: list(t.dims) for t in twin.graph.initializer}
    got = {t.name: list(t.dims) for t in model.graph.initializer}
    assert got == dims
    stripped = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert stripped and all(not t.raw_data and t.external_data[0].value == wire.STRIPPED_LOCATION for t in stripped)


def test_strip_writes_the_graph_only_twin_byte_identical_on_reruns(embedded, tmp_path, capsys):
    full, _ = embedded
    out = tmp_path / "graph.onnx"
    assert cli_main(["strip", str(full), "-o", str(out)]) == 0
    first = out.read_bytes()
    assert cli_main(["strip", str(full), "-o", str(out)]) == 0
    assert out.read_bytes() == first
    assert len(first) < 100 * 1024
    assert "stripped" in capsys.readouterr().out
    a, b = mapped(out), mapped(full)
    assert json.dumps(mapper.mapping_document(a)["totals"]) == json.dumps(mapper.mapping_document(b)["totals"])


def test_an_unchanged_file_reads_back_byte_for_byte():
    for name in ("gpt2-small", "resnet50"):
        data = mapper.zoo_model_bytes(name)
        assert read_structure(data).data == data
    light = (LIGHT / "light_densenet121.onnx").read_bytes()
    assert read_structure(light).data == light


def test_small_constants_keep_their_data_and_subgraph_weights_are_stripped():
    big = onnx.numpy_helper.from_array(__import__("numpy").ones((64, 64), "float32"), "w")
    small = onnx.numpy_helper.from_array(__import__("numpy").array([1, -1], "int64"), "shape")
    then = onnx.helper.make_graph(
        [onnx.helper.make_node("Constant", [], ["c"], value=big)],
        "then",
        [],
        [onnx.helper.make_tensor_value_info("c", 1, None)],
    )
    node = onnx.helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=then)
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
        [onnx.helper.make_tensor_value_info("y", 1, None)],
        initializer=[big, small],
    )
    model = onnx.helper.make_model(graph)
    out = onnx.ModelProto.FromString(read_structure(model.SerializeToString()).data)
    inits = {t.name: t for t in out.graph.initializer}
    assert inits["shape"].raw_data == small.raw_data and inits["w"].data_location == onnx.TensorProto.EXTERNAL
    for branch in out.graph.node[0].attribute:
        value = branch.g.node[0].attribute[0].t
        assert list(value.dims) == [64, 64] and not value.raw_data and value.data_location == onnx.TensorProto.EXTERNAL


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"\x08", "bad varint"),
        (b"\x3a\x10abc", "runs past"),
        (b"\x0b\x0c", "groups are not ONNX"),
    ],
)
def test_bad_wire_data_is_one_line(data, said):
    with pytest.raises(mapper.MapperError, match=said):
        mapper.open_model(data)


def test_limits_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_STRUCTURE_BYTES", 1000)
    with pytest.raises(mapper.MapperError, match="MAX_STRUCTURE_BYTES=1000"):
        read_structure(mapper.zoo_model_bytes("resnet50"))
    monkeypatch.setattr(limits, "MAX_MODEL_FILE_BYTES", 10)
    path = tmp_path / "m.onnx"
    path.write_bytes(mapper.zoo_model_bytes("resnet50"))
    with pytest.raises(mapper.MapperError, match="MAX_MODEL_FILE_BYTES=10 .*mapper strip"):
        mapper.open_model(str(path))


def test_nesting_past_protobufs_limit_is_refused():
    """Written on the wire by hand: protobuf itself will not build a message this deep."""

    def field(number: int, body: bytes) -> bytes:
        return wire.field_key(number, wire.LEN) + wire.varint_bytes(len(body)) + body

    graph = b""
    for _ in range(40):  # graph.node -> node.attribute -> attribute.g: three messages a level
        graph = field(1, field(5, field(6, graph)))
    with pytest.raises(mapper.MapperError, match="nested over"):
        read_structure(field(7, graph))
