"""The child process that runs an uploaded model on ONNX Runtime for `measure_model` (evidence/measure.py).

mapper.model.sandbox.run_child runs this file's text as `python -I -c` after a prologue that sets its limits, in an
empty scratch directory that is its working directory; it imports nothing of mapper (under -I it would find
an installed copy, not this checkout). stdin: one JSON line (threads, providers, warm-up, timed and profiled
runs, feed names, the model's length), the model's bytes (a copy that names no file), the feeds as an .npz
(read without pickles). It leaves latencies.json, profile.json (ORT's profile) and optimized.onnx (ORT's
optimized graph, for node matching) in its directory; on failure, one line "measure-child: ..." on stderr.
"""

import io
import json
import os
import re
import sys
import time

import numpy as np
import onnxruntime as ort


def session(model: bytes, spec: dict, profiled: bool):
    so = ort.SessionOptions()
    so.intra_op_num_threads = spec["threads"]
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if profiled:  # the timed session has no profiler: no profiling overhead in the wall times
        so.enable_profiling = True
        so.profile_file_prefix = "ort"
        so.optimized_model_filepath = "optimized.onnx"
        # keep big weights out of the saved optimized graph: only its node names and tensor names are read back
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    return ort.InferenceSession(model, so, providers=spec["providers"])


def main() -> None:
    stdin = sys.stdin.buffer
    spec = json.loads(stdin.readline())
    model = stdin.read(spec["model_bytes"])
    with np.load(io.BytesIO(stdin.read()), allow_pickle=False) as z:
        feeds = {name: z[f"f{i}"] for i, name in enumerate(spec["feeds"])}
    sess = session(model, spec, profiled=False)
    for _ in range(spec["warmup"]):
        sess.run(None, feeds)
    latencies = []
    for _ in range(spec["runs"]):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        latencies.append(time.perf_counter() - t0)
    del sess
    sess = session(model, spec, profiled=True)
    for _ in range(spec["warmup"] + spec["profiled_runs"]):
        sess.run(None, feeds)
    os.replace(sess.end_profiling(), "profile.json")
    with open("latencies.json", "w") as f:
        json.dump(latencies, f)


if __name__ == "__main__":  # as `python -c` runs it; importing this file runs nothing
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types (Fail, InvalidArgument...), MemoryError at RLIMIT_AS
        text = " ".join(str(exc).split())
        # ORT at RLIMIT_AS: Fail "... running ConstantOfShape node ... Failed to allocate memory for requested
        # buffer of size 1073741824", its reason at the end of a long line: said as a MemoryError, with the node
        failed = re.search(r"[Ff]ailed to allocate memory[^.]*|bad_alloc", text)
        if isinstance(exc, MemoryError) or failed:
            node = re.search(r"running (\w+) node", text)
            said = "; ".join(m.group(0) for m in (node, failed) if m) or text[:200]
            sys.stderr.write(f"\nmeasure-child: MemoryError: {said[:200]}\n")
        else:
            sys.stderr.write(f"\nmeasure-child: {type(exc).__name__}: {text[:200]}\n")
        sys.exit(3)
