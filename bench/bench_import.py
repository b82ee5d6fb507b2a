"""Import + work model time and peak memory, side by side with onnx-tool's profiling of the same file.

    .venv/bin/python bench/bench_import.py

Models: the onnx package's light ResNet-50, and the built-in BERT-base and Llama-2-70B-shaped
graphs saved to a temporary folder (graph only; their external weights file does not exist).
Beside them, three floors (bench/import_floors.py) that do strictly less than any real importer: reading
each node's fields; + attributes and a per-signature memo of shapes (no records, no rules); + the engine's
frozen per-node records (still no rules). onnx-tool's time over a floor is the most any Python importer
doing that much could reach. Each tool runs in its own child process so peak memory (ru_maxrss) is that
tool's alone; each figure is the best of five runs, the mapper's with its caches cleared before each (a
cold import).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

import mapper

RUNS = 5
FLOORS = ("read", "columnar", "records")  # bench/import_floors.py
CHILD = r"""
import json, resource, sys, time, io, contextlib
path, tool, dims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
times = []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter()
    if tool == "mapper":
        import mapper
        w = mapper.load_workload(path, dims or None)  # a fresh model handle: cold every run
        flops = w.flops
    elif tool in ("read", "columnar", "records"):  # lower bounds under any Python importer (import_floors.py)
        sys.path.insert(0, sys.argv[5])
        from import_floors import FLOORS
        FLOORS[tool](path)
    else:
        import onnx_tool
        with contextlib.redirect_stdout(io.StringIO()):
            m = onnx_tool.Model(path)
            m.graph.graph_reorder_nodes()
            m.graph.shape_infer()
            m.graph.profile()
    times.append(time.perf_counter() - t)
print(json.dumps({"best_s": min(times), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(tool: str, path: Path, dims: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), tool, json.dumps(dims), str(RUNS), str(Path(__file__).parent)],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:90]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def concrete_copy(name: str, dims: dict, folder: Path) -> tuple[Path, Path]:
    """The same graph with its dims written in (onnx-tool needs static shapes); for onnx-tool, which
    must load initializer data, a second copy turns the absent external weights into graph inputs of
    the same shapes (its profile counts the same MACs either way)."""
    model = mapper.build_zoo_model(name)
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in dims:
                d.dim_value = dims[d.dim_param]
    ours = folder / f"{name}.onnx"
    onnx.save(model, ours)
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    for t in external:
        model.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        model.graph.initializer.remove(t)
    peer = folder / f"{name}.peer.onnx"
    onnx.save(model, peer)
    return ours, peer


def main() -> None:
    light = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("light ResNet-50", (light, light), {}),
            ("BERT-base (seq 128)", concrete_copy("bert-base", {"batch": 1, "seq": 128}, Path(tmp)), {}),
            (
                "Llama-2-70B (80 layers, seq 128)",
                concrete_copy("llama2-70b", {"batch": 1, "seq": 128, "past": 0}, Path(tmp)),
                {},
            ),
        ]
        print(
            f"{'model':34s} {'mapper s':>9s} {'MB':>6s} {'onnx-tool s':>12s} {'MB':>6s} {'ratio':>7s}   floors:"
            + "".join(f" {floor + ' s':>11s} {'ratio':>6s}" for floor in FLOORS)
        )
        for label, (path, peer_path), dims in cases:
            ours, peer = run("mapper", path, dims), run("onnx_tool", peer_path, dims)
            peer_s = peer.get("best_s")
            ratio = f"{peer_s / ours['best_s']:.1f}x" if peer_s else "n/a"
            row = f"{label:34s} {ours['best_s']:9.3f} {ours['peak_rss_mb']:6.0f}"
            row += f" {peer_s:12.3f} {peer['peak_rss_mb']:6.0f}" if peer_s else f" {peer['error'][:12]:>12s} {'':>6s}"
            row += f" {ratio:>7s}          "
            for floor in FLOORS:
                floor_s = run(floor, path, dims)["best_s"]
                row += f" {floor_s:11.4f} {f'{peer_s / floor_s:.1f}x' if peer_s else 'n/a':>6s}"
            print(row)
            if "error" in peer:
                print(f"  onnx-tool: {peer['error']}")
        print(
            "floors (bench/import_floors.py), each doing less than any real importer, the ratio beside each being"
            " onnx-tool's time over it:\n  read: parse the file, read every node's fields into tuples;"
            "\n  columnar: + attributes and a per-signature memo of output shapes, no records, no rules;"
            "\n  records: + one frozen Node, TensorSpec and NodeWork per node (the engine's data model), no rules."
        )


if __name__ == "__main__":
    main()
