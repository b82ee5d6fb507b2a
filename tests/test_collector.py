"""The engine pauses Python's cyclic collector for one call and gives it back as it found it."""

from __future__ import annotations

import gc
import threading

import pytest

import mapper
from mapper.core.collector import collector_paused
from mapper.core.errors import MapperError


@collector_paused
def _inside(seen: list, inner: bool = False, fail: bool = False) -> None:
    seen.append(gc.isenabled())
    if inner:
        _inside(seen)
        seen.append(gc.isenabled())  # the inner call's return does not end the outer call's pause
    if fail:
        raise MapperError("bad input")


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_during_the_call_and_back_after(collector_on):
    seen: list = []
    _inside(seen, inner=True)
    assert seen == [False, False, False] and gc.isenabled()


def test_back_after_an_error(collector_on):
    with pytest.raises(MapperError):
        _inside([], fail=True)
    assert gc.isenabled()


def test_left_off_when_the_caller_had_it_off(collector_on):
    gc.disable()
    _inside([])
    assert not gc.isenabled()


def test_concurrent_calls_give_it_back_once_the_last_returns(collector_on):
    started, release = threading.Barrier(2), threading.Event()

    @collector_paused
    def held() -> None:
        started.wait()
        release.wait()

    thread = threading.Thread(target=held)
    thread.start()
    started.wait()
    _inside([])  # returns while the other call is still inside
    assert not gc.isenabled()
    release.set()
    thread.join()
    assert gc.isenabled()


def test_a_mapping_gives_it_back():
    was = gc.isenabled()
    gc.enable()
    try:
        model = mapper.open_model("resnet50")
        mapper.map_workload(model.bind({"batch": 2}), mapper.load_hardware("h100-sxm"))
        assert gc.isenabled()
    finally:
        if not was:
            gc.disable()
