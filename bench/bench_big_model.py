"""Import of a ~2 GB model with its weights inside the file: mapper against onnx.load and onnx-tool.

    PYTHONPATH=$PWD python bench/bench_big_model.py [--dir /tmp/bigmodel] [--gb 1.96]

Writes (once; reused on reruns) a Llama-shaped decoder (GraphBuilder, 8 layers x 2048) whose ~490 M
float32 weights are random values stored in the file, as exporters write any model under 2 GB, then
times each reader in its own process (peak RSS from ru_maxrss):
  mapper     open_model(path).bind(dims): the wire filter over a memory map (weights left on disk), then
             the import to shapes at batch 1, seq 16, past 16
  onnx.load  onnx.load(path): the whole protobuf parsed, nothing inferred
  onnx-tool  onnx_tool.Model(path), shape_infer and profile at the same shapes (pip install onnx-tool)
Prints one line per reader and the ratios. Not in CI (2 GB on disk, ~20 s).

`light_graph_only` and `write_with_weights` are shared with tests/test_wire.py, which makes VGG-19 and
ZFNet-512 with their weights inside from onnx's light models.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from mapper.model.wire import LEN, field_key, varint_bytes

CHUNK_ELEMENTS = 1 << 22  # weights are written 16 MB at a time: the writer never holds a whole tensor


def light_graph_only(model: onnx.ModelProto, location: str) -> onnx.ModelProto:
    """An onnx "light" model (each weight a ConstantOfShape of an initializer shape) with every such weight
    turned into a shape-only external-data initializer (dims and type, no data): its graph-only twin."""
    graph = model.graph
    shapes = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    made, kept = [], []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in shapes:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            dtype = value.data_type if value is not None else TensorProto.FLOAT
            t = TensorProto(name=node.output[0], data_type=dtype, dims=[int(d) for d in shapes[node.input[0]]])
            t.data_location = TensorProto.EXTERNAL
            entry = t.external_data.add()
            entry.key, entry.value = "location", location
            made.append(t)
        else:
            kept.append(node)
    used = {i for n in kept for i in n.input}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    initializers = [t for t in out.graph.initializer if t.name in used or t.name not in shapes] + made
    del out.graph.initializer[:]
    out.graph.initializer.extend(initializers)
    if out.ir_version < 4:  # IR 3 lists every initializer among the graph inputs
        out.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in made)
    return out


def write_with_weights(model: onnx.ModelProto, path: Path, seed: int = 0) -> int:
    """Write `model` to `path` with every external-data initializer of its graph given random float32 values
    inside the file (raw_data), streamed a chunk at a time. Returns the file's size in bytes.

    The file is what protobuf would write for the materialized model, except that the weights follow the
    graph's other fields (protobuf merges a message's fields in any order)."""
    rng = np.random.default_rng(seed)
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    weights = [t for t in graph.initializer if t.data_location == TensorProto.EXTERNAL]
    rest = [t for t in graph.initializer if t.data_location != TensorProto.EXTERNAL]
    del graph.initializer[:]
    graph.initializer.extend(rest)
    heads = []
    for t in weights:
        if t.data_type != TensorProto.FLOAT:
            raise ValueError(f"{t.name}: only float32 weights are written")
        head = TensorProto(name=t.name, data_type=t.data_type, dims=t.dims).SerializeToString()
        data_bytes = 4 * int(np.prod(t.dims, dtype=np.int64))
        heads.append((head + field_key(9, LEN) + varint_bytes(data_bytes), data_bytes))
    body = graph.SerializeToString()
    graph_bytes = len(body) + sum(len(field_key(5, LEN)) + len(varint_bytes(len(h) + n)) + len(h) + n for h, n in heads)
    shell = onnx.ModelProto()
    shell.CopyFrom(model)
    shell.ClearField("graph")
    with open(path, "wb") as f:
        f.write(shell.SerializeToString() + field_key(7, LEN) + varint_bytes(graph_bytes) + body)
        for head, data_bytes in heads:
            f.write(field_key(5, LEN) + varint_bytes(len(head) + data_bytes) + head)
            left = data_bytes // 4
            while left:
                n = min(left, CHUNK_ELEMENTS)
                f.write((rng.standard_normal(n, dtype=np.float32) * 0.02).tobytes())
                left -= n
    return path.stat().st_size


def big_decoder(path: Path, layers: int) -> int:
    """A Llama-shaped decoder (hidden 2048, 16 heads, 4 KV heads, FFN 5632: TinyLlama's widths) with its
    weights inside: ~70 M parameters a layer plus 131 M of embeddings and head."""
    from mapper.zoo.llama import LlamaConfig, build_llama

    config = LlamaConfig(layers=layers, hidden=2048, heads=16, kv_heads=4, ffn=5632)
    return write_with_weights(build_llama(config, "big-decoder"), path)


DIMS = {"batch": 1, "seq": 16, "past": 16}
READERS = {  # (imports, not timed; the read, timed): each binds the decoder at DIMS (onnx.load only reads)
    "mapper": ("import mapper", f"g = mapper.open_model(path).bind({DIMS}).graph"),
    "onnx.load": ("import onnx", "m = onnx.load(path)"),
    "onnx-tool": (
        "import contextlib, io, numpy, onnx_tool",
        (
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    m = onnx_tool.Model(path)\n"
            "    feed = {'input_ids': numpy.zeros((1, 16), 'int64')}\n"
            "    names = [getattr(i, 'name', i) for i in m.graph.input]\n"
            "    feed |= {n: numpy.zeros((1, 4, 16, 128), 'float32') for n in names if n.startswith('past')}\n"
            "    m.graph.shape_infer(feed)\n"
            "    m.graph.profile()\n"
        ),
    ),
}


def time_reader(name: str, path: Path) -> dict | None:
    """Seconds and peak RSS of one reader, alone in a fresh interpreter (its imports not timed)."""
    setup, work = READERS[name]
    script = (
        f"import json, resource, sys, time\n{setup}\n"
        f"path = {str(path)!r}\n"
        "t0 = time.perf_counter()\n"
        f"exec({work!r})\n"
        "print(json.dumps({'s': time.perf_counter() - t0,"
        " 'rss': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    if run.returncode != 0:
        print(f"{name}: failed ({run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode})")
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/mapper-bigmodel")
    parser.add_argument("--layers", type=int, default=8, help="8 layers: 1.97 GB (9 is past protobuf's 2 GiB)")
    args = parser.parse_args()
    path = Path(args.dir) / f"decoder-{args.layers}l.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        t0 = time.perf_counter()
        size = big_decoder(path, args.layers)
        print(f"wrote {path} ({size / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s")
    print(
        f"{path.name}: {path.stat().st_size / 1e9:.2f} GB; resident set of this process: "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )
    figures = {name: time_reader(name, path) for name in READERS}
    for name, f in figures.items():
        if f:
            print(f"{name:10s} {f['s']:7.3f} s  peak RSS {f['rss'] / 1e6:7.0f} MB")
    ours = figures["mapper"]
    for name, f in figures.items():
        if f and ours and name != "mapper":
            print(f"{name} / mapper: {f['s'] / ours['s']:.0f}x the time, {f['rss'] / ours['rss']:.1f}x the peak RSS")


if __name__ == "__main__":
    main()
