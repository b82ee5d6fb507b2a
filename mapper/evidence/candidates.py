"""A fit's candidate profiles: a built-in profile with one value changed, mapped in its place by name.

The measured-truth harness (`validate`) maps each row on the profile its device names; a fit (bench/fit_matrix_dram.py,
bench/fit_masked_mha.py) builds a candidate with `with_value` and maps the rows on it inside `candidate_profile`.
A candidate is rebuilt from its tree, so its content hash is its own and no cache keyed on it returns the
profile's times.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

_CANDIDATES: dict = {}  # profile name -> a candidate HardwareProfile mapped in its place (candidate_profile)


def profile_named(name: str):
    """The profile a row's device names: a candidate inside `candidate_profile`, else the built-in."""
    return _CANDIDATES.get(name) or _built_in(name)


@cache
def _built_in(name: str):
    from mapper.hardware.load import load_hardware

    return load_hardware(name)


@contextmanager
def candidate_profile(hw) -> Iterator[None]:
    """Rows of the profile named `hw.name` are mapped on `hw` inside the block (a fit's candidate values)."""
    _CANDIDATES[hw.name] = hw
    try:
        yield
    finally:
        del _CANDIDATES[hw.name]


def with_value(hw, key: str, value):
    """`hw` with its profile value at `key` ("overhead.masked_mha_item_s") set to `value` (None: removed), rebuilt
    from its tree so that its content hash, which the engine's caches key on, is the candidate's."""
    from mapper.hardware.load import load_hardware

    section, name = key.split(".")
    tree = hw.to_dict()
    tree[section].pop(name, None)
    if value is not None:
        tree[section][name] = {"value": value, "source": "a fit's candidate"}
    return load_hardware(tree)
