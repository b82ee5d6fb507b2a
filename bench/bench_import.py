"""Import + work model time and peak memory, side by side with onnx-tool's profiling of the same file.

    .venv/bin/python bench/bench_import.py

Models: the onnx package's light ResNet-50, and the built-in BERT-base and Llama-2-70B-shaped
graphs saved to a temporary folder (graph only; their external weights file does not exist).
A third column times the floor under any Python importer: parsing the file and reading each node's
fields into tuples, with no analysis at all. Each tool runs in its own child process so peak memory (ru_maxrss) is that tool's alone; each
figure is the best of five runs, the mapper's with its caches cleared before each (a cold import).
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
CHILD = r"""
import json, resource, sys, time, io, contextlib
path, tool, dims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
times = []
for _ in range(int(sys.argv[4])):
    if tool == "mapper":
        from mapper.pipeline import clear_plan_caches
        clear_plan_caches()  # cold every run: nothing kept from the previous import of the same file
    t = time.perf_counter()
    if tool == "mapper":
        import mapper
        w = mapper.load_workload(path, dims or None)
        flops = w.flops
    elif tool == "floor":  # parse and read every node's fields into tuples, nothing else
        import onnx
        m = onnx.load(path, load_external_data=False)
        rows = [(n.name, n.op_type, n.domain, tuple(n.input), tuple(n.output), list(n.attribute)) for n in m.graph.node]
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
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), tool, json.dumps(dims), str(RUNS)], check=False,
                          capture_output=True, text=True, timeout=900)
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
        cases = [("light ResNet-50", (light, light), {}),
                 ("BERT-base (seq 128)", concrete_copy("bert-base", {"batch": 1, "seq": 128}, Path(tmp)), {}),
                 ("Llama-2-70B (80 layers, seq 128)",
                  concrete_copy("llama2-70b", {"batch": 1, "seq": 128, "past": 0}, Path(tmp)), {})]
        print(f"{'model':34s} {'mapper s':>9s} {'MB':>6s} {'onnx-tool s':>12s} {'MB':>6s} {'ratio':>7s}"
              f" {'read floor s':>13s} {'ratio':>7s}")
        for label, (path, peer_path), dims in cases:
            ours, peer = run("mapper", path, dims), run("onnx_tool", peer_path, dims)
            floor = run("floor", path, dims)
            ratio = f"{peer['best_s'] / ours['best_s']:.1f}x" if "best_s" in peer and "best_s" in ours else "n/a"
            floor_ratio = f"{peer['best_s'] / floor['best_s']:.1f}x" if "best_s" in peer else "n/a"
            peer_s = f"{peer['best_s']:.3f}" if "best_s" in peer else peer.get("error", "")[:12]
            peer_mb = f"{peer['peak_rss_mb']:.0f}" if "peak_rss_mb" in peer else ""
            print(f"{label:34s} {ours['best_s']:9.3f} {ours['peak_rss_mb']:6.0f} {peer_s:>12s} {peer_mb:>6s} {ratio:>7s}"
                  f" {floor['best_s']:13.4f} {floor_ratio:>7s}")
            if "error" in peer:
                print(f"  onnx-tool: {peer['error']}")
        print("read floor: parsing the file and reading every node's fields into Python tuples, no analysis;"
              " 'ratio' beside it is onnx-tool's time over it, the most any Python importer could reach")


if __name__ == "__main__":
    main()
