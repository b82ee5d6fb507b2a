"""Results kept for reuse across mappings of one model (sweeps re-bind and re-target it many times).

Each cache is keyed by what its value really depends on (the model's content hash, bindings, plan
choices), holds a bounded number of entries (oldest out first) and can be cleared for cold timings.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

_CACHES: list[BoundedCache] = []


class BoundedCache:
    def __init__(self, size: int):
        self.size = size
        self.entries: dict[Hashable, Any] = {}
        _CACHES.append(self)

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        value = self.entries.get(key)
        if value is None:
            if len(self.entries) >= self.size:
                self.entries.pop(next(iter(self.entries)))
            value = self.entries[key] = make()
        return value


def per_object(cache: BoundedCache, obj: Any, key: Hashable, make: Callable[[], Any]) -> Any:
    """`make()` once per live object (and key): the entry holds the object, so its id cannot be reused
    by another while the entry is kept; a stale id (a different object) is computed afresh."""
    held, value = cache.get((id(obj), key), lambda: (obj, make()))
    return value if held is obj else make()


def clear_all() -> None:
    """Forget everything kept (benchmarks that time a cold mapping call this between runs)."""
    for cache in _CACHES:
        cache.entries.clear()
