"""Run the CLI on a hostile input in a child process under an address-space limit (issue 31).

A test that a hostile input is refused before anything is built runs the real command, `python -m mapper ...`,
with RLIMIT_AS set just above the bound the threat-model page states. A refusal that comes only after the
graph (or a table) was built runs out of address space first, and the test fails on the child's MemoryError
traceback or its signal instead of the one line it expects.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# What `python -m mapper` needs to refuse a config with one thread a library (numpy, onnx, pandas and the rest
# imported): ~440 MiB of address space here, most of it shared libraries, little of it touched; with headroom for
# another machine's libraries. A case's own bound is added to it.
BASELINE_ADDRESS_BYTES = 768 << 20
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # arenas per thread
TIMEOUT_S = 120  # wall clock of one child: a bounded refusal takes seconds even on a slow CI machine


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _limited(address_bytes: int):
    def prologue() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_bytes, address_bytes))

    return prologue


def run_cli(args: list[str], *, extra_bytes: int, cwd: str | Path | None = None, env: dict | None = None) -> Outcome:
    """`mapper ARGS` in a child whose address space is BASELINE_ADDRESS_BYTES + extra_bytes."""
    child_env = {**os.environ, "PYTHONHASHSEED": "0", **ONE_THREAD, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "mapper", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=cwd,
        env=child_env,
        preexec_fn=_limited(BASELINE_ADDRESS_BYTES + extra_bytes),
        check=False,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line(outcome: Outcome, *needles: str) -> str:
    """Exit 2 and one line on stderr beginning `error: `, no traceback, naming each needle; the line."""
    assert "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
    assert outcome.returncode == 2, (outcome.returncode, outcome.stderr[-2000:])
    assert len(outcome.lines) == 1, outcome.stderr[-2000:]
    line = outcome.lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, line
    return line
