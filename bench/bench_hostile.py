"""Time and peak memory of refusing issue 31's item 1 inputs, and of mapping graphs right at the import limits.

    .venv/bin/python bench/bench_hostile.py [--cases refused|limits|all] [--scale 1.0]

Each case is a fresh `python -m mapper map` process on a file written beforehand; its figures are the process's
wall seconds and peak resident set (wait4's ru_maxrss), beside the same command on a 2-layer BERT config (the
process itself: interpreter, numpy, onnx, pandas). Nothing here asserts a time: docs/threat-model.md quotes the
figures, and tests/security/test_config_bounds.py runs the same inputs under an address-space limit.

  refused  the hostile configs and ONNX files of bench/hostile_inputs.py: one line and exit 2 each
  limits   graphs right under the import limits, mapped: MAX_NODES Relus, MAX_EDGES as 30 Sums of MAX_NODE_INPUTS
           inputs, MAX_TENSORS one-element initializers, MAX_VALUE_INFOS value_info entries; their peak over the
           file's bytes is the importer's factor
`--scale` shrinks the limit cases (the test suite runs 0.001).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.hostile_inputs import (
    BERT,
    HOSTILE_CONFIGS,
    HOSTILE_ONNX,
    initializers,
    relu_chain,
    value_infos,
    wide_sum,
)
from mapper.core import limits


@dataclass(frozen=True)
class Figure:
    case: str
    file_bytes: int
    exit_code: int
    wall_s: float
    peak_bytes: int
    line: str


BINDINGS = ["--dim", "batch=1", "--dim", "seq=128"]  # the baseline encoder's (a refused file never reaches them)


# A child's ru_maxrss counts the pages of the process it was forked from (Linux keeps the high-water mark across
# exec), so each command starts from this launcher, a fresh interpreter of ~10 MB that imports nothing else, and
# reports the command's own figures.
LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
last = err.strip().splitlines()[-1] if err.strip() else ""
print(json.dumps([os.waitstatus_to_exitcode(status), time.perf_counter() - start, usage.ru_maxrss * 1024, last]))
"""


def run(case: str, path: Path) -> Figure:
    bindings = BINDINGS if path.suffix == ".json" else []
    command = [sys.executable, "-m", "mapper", "map", "--hw", "h100-sxm", *bindings, "--", str(path)]
    out = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        check=True,
    )
    code, wall, peak, line = json.loads(out.stdout)
    return Figure(case, path.stat().st_size, code, wall, peak, line[:110])


def limit_cases(scale: float) -> dict[str, Callable[[], bytes]]:
    n = max(1, int(limits.MAX_NODES * scale) - 1)
    sums = max(1, int(limits.MAX_EDGES * scale) // limits.MAX_NODE_INPUTS)
    tensors = max(1, int(limits.MAX_TENSORS * scale) - 1)
    infos = max(1, int(limits.MAX_VALUE_INFOS * scale) - 2)  # the graph's input and output are two
    return {
        f"{n:,} Relus (MAX_NODES)": lambda: relu_chain(n),
        f"{sums} Sums of {limits.MAX_NODE_INPUTS:,} inputs (MAX_EDGES)": lambda: wide_sum(limits.MAX_NODE_INPUTS, sums),
        f"{tensors:,} initializers (MAX_TENSORS)": lambda: initializers(tensors),
        f"{infos:,} value infos (MAX_VALUE_INFOS)": lambda: value_infos(infos),
    }


def cases(which: str, scale: float) -> dict[str, tuple[Callable[[], bytes], str]]:
    """name -> (the file's bytes, its suffix)."""
    out: dict[str, tuple[Callable[[], bytes], str]] = {
        "baseline: BERT config, 2 layers": (lambda: json.dumps({**BERT, "num_hidden_layers": 2}).encode(), ".json")
    }
    if which in ("refused", "all"):
        for name, (config, _) in HOSTILE_CONFIGS.items():
            out[f"config: {name}"] = (lambda c=config: json.dumps(c).encode(), ".json")
        for name, (build, _) in HOSTILE_ONNX.items():
            out[f"onnx: {name}"] = (build, ".onnx")
    if which in ("limits", "all"):
        for name, build in limit_cases(scale).items():
            out[f"at limit: {name}"] = (build, ".onnx")
    return out


def main(argv: list[str] | None = None) -> list[Figure]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", choices=("refused", "limits", "all"), default="all")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each limit the limit cases reach")
    args = parser.parse_args(argv)
    figures = []
    print(f"{'case':<58} {'file':>10} {'exit':>4} {'wall s':>7} {'peak MB':>8}  line")
    with tempfile.TemporaryDirectory() as folder:
        for name, (build, suffix) in cases(args.cases, args.scale).items():
            path = Path(folder) / f"case{suffix}"
            path.write_bytes(build())
            f = run(name, path)
            figures.append(f)
            print(
                f"{name:<58} {f.file_bytes / 1e6:>8.2f}MB {f.exit_code:>4} {f.wall_s:>7.2f}"
                f" {f.peak_bytes / 1e6:>8.0f}  {f.line}",
                flush=True,
            )
    return figures


if __name__ == "__main__":
    main()
