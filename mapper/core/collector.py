"""Python's cyclic garbage collector, paused while the engine builds one result.

A cold mapping of Llama-2-70B allocates some 10^5 long-lived records (nodes, work, kernels) and no
reference cycle: the collector's automatic passes find nothing to free, yet its full passes walk the
whole heap (numpy, onnx and the caches included) and took 0.04-0.1 s of a 0.35 s decode step (gc
callbacks, bench/bench_mapping.py --decode). The engine pauses it for the call, as mypy raises its
thresholds for a build; reference counting still frees everything as usual, and a cycle made during the
call waits for the collector's next pass once it is enabled again. Nested and concurrent calls (Streamlit's
threads) share one count: the collector comes back when the last of them returns, and only if it was on.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False}  # the pause's count, not a cache: nothing computed is kept


def collector_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` with the cyclic collector paused for its call (see the module's docstring)."""

    @functools.wraps(fn)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with _lock:
            if _state["depth"] == 0:
                _state["was_enabled"] = gc.isenabled()
                gc.disable()
            _state["depth"] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with _lock:
                _state["depth"] -= 1
                if _state["depth"] == 0 and _state["was_enabled"]:
                    gc.enable()

    return paused
