"""The dashboard's heap freeze (app_pages/cache.kept): what the server holds after a new mapping is out of the
cyclic collector's reach, and every UNFREEZE_EVERY-th new mapping hands it back, so a cycle frozen meanwhile
is still freed (a long-lived server's memory stays bounded)."""

import gc
import weakref

import pytest

from app_pages import cache


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self):
        self.me = self


def unfreezing_call() -> int:
    """Call kept() until a call unfreezes (nothing frozen after it); how many calls that took."""
    for calls in range(1, cache.UNFREEZE_EVERY + 1):
        cache.kept()
        if gc.get_freeze_count() == 0:
            return calls
    raise AssertionError(f"{cache.UNFREEZE_EVERY} new mappings and the heap was never handed back")


@pytest.mark.slow  # maps until the heap is handed back: ~6 s
def test_a_new_mapping_freezes_the_heap_and_a_frozen_cycle_is_freed_at_the_unfreeze():
    unfreezing_call()  # line up with the counter (other tests in this process may have mapped)
    cycle = Node()
    alive = weakref.ref(cycle)
    gc.collect()  # the cycle is promoted to the oldest generation, where kept()'s collect(1) does not look
    del cycle
    cache.kept()
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert alive() is not None, "a full pass freed a cycle kept() should have frozen"
    assert unfreezing_call() == cache.UNFREEZE_EVERY - 1
    assert alive() is None, "the cycle frozen meanwhile survived the unfreeze's full pass"
