"""The dashboard's models, shared by every session under one byte budget: each parsed model (its handle, the
workloads it keeps) and its mappings, keyed by content, charged by the engine's estimate (ModelHandle.footprint).

Each session holds the model it shows (the last it asked for). A model no session holds is released after
MODEL_IDLE_SECONDS; when the budget is full, the least recently used go first, models no session holds before
those some session shows (that session parses it again on its next run). A model whose estimate alone is over
the budget is refused, in one line. Thread-safe: Streamlit runs sessions on threads; a build runs outside the
table's lock, under its key's own lock, so two sessions opening one model parse it once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import mapper


@dataclass(eq=False)
class Entry:
    handle: mapper.ModelHandle
    footprint: object  # the handle's estimate (ModelHandle.footprint)
    mappings: OrderedDict = field(default_factory=OrderedDict)  # key -> (result, document), oldest first
    holders: set = field(default_factory=set)  # session ids showing this model
    idle_since: float | None = None  # monotonic time the last holder left

    @property
    def bytes(self) -> int:
        return self.footprint.total(self.handle.workloads_kept, len(self.mappings))


class HeldModels:
    """Parsed models and their mappings, keyed by content, within `budget_bytes`."""

    def __init__(
        self,
        budget_bytes: int,
        idle_s: float,
        mappings_each: int,
        alive: Callable[[str], bool] = lambda _: True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.budget_bytes, self.idle_s, self.mappings_each = budget_bytes, idle_s, mappings_each
        self._alive, self._clock = alive, clock  # whether a session still exists; the time
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()  # least recently used first
        self._held: dict[str, Hashable] = {}  # session id -> the key it holds
        self._building: dict[Hashable, threading.Lock] = {}

    # ---- reading ---------------------------------------------------------------------------------
    def model(self, key: Hashable, build: Callable[[], mapper.ModelHandle], holder: str | None) -> mapper.ModelHandle:
        """The model under `key` (built on a miss); `holder` (a session id) holds it from now on."""
        entry = self._get(key, holder)
        if entry is not None:
            return entry.handle
        with self._key_lock(key):
            try:
                entry = self._get(key, holder)  # another session built it while this one waited
                return entry.handle if entry is not None else self._build(key, build, holder)
            finally:
                self._forget_lock(key)

    def _build(self, key: Hashable, build: Callable[[], mapper.ModelHandle], holder: str | None) -> mapper.ModelHandle:
        handle = build()
        footprint = handle.footprint()
        if footprint.handle_bytes > self.budget_bytes:
            raise mapper.MapperError(
                f"this model would hold ~{mapper.format_bytes(footprint.handle_bytes)} of the server's memory,"
                f" over the {mapper.format_bytes(self.budget_bytes)} every session's models share"
                f" ({mapper.setting_text('MODEL_CACHE_BYTES')})"
            )
        with self._lock:
            self._entries[key] = Entry(handle, footprint)
            self._hold(key, holder)
            self._fit(keep=key)
        return handle

    def mapping(self, key: Hashable, mapping_key: Hashable, build: Callable[[], tuple], holder: str | None) -> tuple:
        """A mapping of the model under `key` (its entry must exist: `model` first), built on a miss and kept
        with the model, within MAPPINGS_PER_MODEL and the budget."""
        with self._lock:
            entry = self._entries.get(key)
            found = entry.mappings.get(mapping_key) if entry is not None else None
            if found is not None:
                entry.mappings.move_to_end(mapping_key)
                self._hold(key, holder)
                return found
        with self._key_lock((key, mapping_key)):
            try:
                with self._lock:
                    entry = self._entries.get(key)
                    found = entry.mappings.get(mapping_key) if entry is not None else None
                if found is not None:  # another session mapped it while this one waited
                    return found
                value = build()
                with self._lock:
                    entry = self._entries.get(key)
                    if entry is not None:  # else released meanwhile: the value is this run's alone
                        entry.mappings[mapping_key] = value
                        while len(entry.mappings) > self.mappings_each:
                            entry.mappings.popitem(last=False)
                        self._fit(keep=key)
                return value
            finally:
                self._forget_lock((key, mapping_key))

    def release(self, holder: str) -> None:
        """`holder` shows no model any more (its session ended)."""
        with self._lock:
            self._unhold(holder)

    def held_bytes(self) -> int:
        with self._lock:
            return sum(e.bytes for e in self._entries.values())

    def held_keys(self) -> list:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._held.clear()

    # ---- under the lock --------------------------------------------------------------------------
    def _get(self, key: Hashable, holder: str | None) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._hold(key, holder)
                self._fit(keep=key)  # the handle may have bound more workloads since it was charged
            return entry

    def _key_lock(self, key: Hashable) -> threading.Lock:
        with self._lock:
            return self._building.setdefault(key, threading.Lock())

    def _forget_lock(self, key: Hashable) -> None:
        """A build's lock goes once its build is over (a waiter holds its own reference): the table of locks
        stays as small as the builds under way, whatever keys sessions send."""
        with self._lock:
            self._building.pop(key, None)

    def _hold(self, key: Hashable, holder: str | None) -> None:
        if holder is None or self._held.get(holder) == key:
            return
        self._unhold(holder)
        self._held[holder] = key
        entry = self._entries[key]
        entry.holders.add(holder)
        entry.idle_since = None

    def _unhold(self, holder: str) -> None:
        key = self._held.pop(holder, None)
        entry = self._entries.get(key) if key is not None else None
        if entry is not None:
            entry.holders.discard(holder)
            if not entry.holders:
                entry.idle_since = self._clock()

    def _fit(self, keep: Hashable) -> None:
        """Forget ended sessions, release models idle too long, then evict until the budget holds (`keep`,
        the model in use now, last of all: never, while it alone fits)."""
        for holder in [h for h in self._held if not self._alive(h)]:
            self._unhold(holder)
        now = self._clock()
        for key in [
            k for k, e in self._entries.items() if e.idle_since is not None and now - e.idle_since >= self.idle_s
        ]:
            self._drop(key)
        total = sum(e.bytes for e in self._entries.values())
        order = [k for k, e in self._entries.items() if not e.holders] + [
            k for k, e in self._entries.items() if e.holders
        ]
        for key in order:
            if total <= self.budget_bytes:
                break
            if key != keep:
                total -= self._entries[key].bytes
                self._drop(key)
        entry = self._entries.get(keep)
        while total > self.budget_bytes and entry is not None and entry.mappings:  # its oldest mappings last
            entry.mappings.popitem(last=False)
            total = sum(e.bytes for e in self._entries.values())

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key)
        for holder in entry.holders:
            self._held.pop(holder, None)
