"""Red team, issue 31 item 3: measuring is bounded by what it does, not by what its shapes say.

A row count computed from the input (ConstantOfShape of it, then a 2048 x 2048 MatMul) passes the gate, which
cannot see its shape; it runs under the memory, CPU and wall-clock limits set at start (MAPPER_MEASURE_*), and
hitting one is one line naming it, exit 2. At most MEASURE_CONCURRENT measure children run at once across sessions
and processes; the rest wait their turn, told their place, or are refused in one line. A 256 MB profile that will
be refused is refused in seconds. Each CLI case runs `python -m mapper` under an address-space limit
(tests/security/bounded.py); bench/bench_measure_bounds.py prints each case's time and peak memory.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import mapper
from bench.bench_measure_bounds import PROFILES, computed_rows_model, main, profile_bytes, tiny_model, write_profile
from mapper.core import limits
from mapper.core.settings import setting, setting_text
from mapper.evidence import measure_slots
from mapper.evidence.measure_slots import measure_slot
from tests.security.bounded import assert_one_line, run_cli

GIB = 1 << 30
# What the CLI process itself holds of a 16 MiB model while its child runs it (the file, the parsed copy, the
# serialized copy handed to the child): well under this. The child's own limit is the MAPPER_MEASURE_* setting.
PARENT_BYTES = 256 << 20
PROFILE_BYTES = 256 << 20  # the upload limit (.streamlit/config.toml server.maxUploadSize)
# MAX_TRACE_BYTES' stated bound: a profile is held as bytes while it is decoded, peak under ~1.5x the file
PROFILE_PEAK_BYTES = PROFILE_BYTES * 3 // 2


@pytest.fixture
def slots(tmp_path, monkeypatch):
    """A private slot directory and one slot, for this test and the CLI processes it starts."""
    env = {"MAPPER_MEASURE_SLOTS": str(tmp_path / "slots"), "MAPPER_MEASURE_CONCURRENT": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def _measure(tmp_path, model: bytes, env: dict, *extra: str):
    path = tmp_path / "model.onnx"
    path.write_bytes(model)
    return run_cli(["measure", str(path), "--runs", "1", "--hw", "cpu-x86", *extra], extra_bytes=PARENT_BYTES, env=env)


# ---- the computed-row MatMul: each limit of the child stops it in one line ---------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "rows, setting_env, needle",
    [
        # 2^17 rows x 2048 floats: 1 GiB for the ConstantOfShape alone, past a 1 GiB address space at once
        (1 << 17, {"MAPPER_MEASURE_MEMORY_BYTES": str(GIB)}, "MEASURE_MEMORY_BYTES=1073741824"),
        # 2^15 rows: ~3 s of one core a run, 9 runs; stopped at 2 s of CPU (the wall clock far off)
        (1 << 15, {"MAPPER_MEASURE_CPU_SECONDS": "2", "MAPPER_MEASURE_WALL_SECONDS": "120"}, "MEASURE_CPU_SECONDS=2"),
        # and at 3 s of wall clock (the CPU limit far off)
        (1 << 15, {"MAPPER_MEASURE_WALL_SECONDS": "3", "MAPPER_MEASURE_CPU_SECONDS": "120"}, "MEASURE_WALL_SECONDS=3"),
    ],
    ids=["address-space", "cpu", "wall-clock"],
)
def test_computed_rows_stop_at_the_limit_in_force(tmp_path, slots, rows, setting_env, needle):
    outcome = _measure(tmp_path, computed_rows_model(rows), {**slots, **setting_env})
    line = assert_one_line(outcome, needle, "computed_rows")
    assert f"(MAPPER_{needle.split('=')[0]})" in line  # where the value came from


def test_the_gate_cannot_see_the_computed_rows():
    """Why the limits must hold: the estimate rates a run at a few hundred MB and 1 FLOP, whatever `rows` is."""
    from mapper.evidence.measure import _onnx_model
    from mapper.evidence.measure_gate import estimate_run

    handle = mapper.open_model(computed_rows_model(1 << 20))  # 8 GiB a tensor when it runs
    estimate = estimate_run(handle.bind(None), _onnx_model(handle))
    assert estimate.memory_bytes < GIB and estimate.flops < 1e6


@pytest.mark.slow
@pytest.mark.parametrize("value", ["abc", "0", "9" * 50])
def test_a_bad_setting_is_one_line_naming_its_variable(tmp_path, slots, value):
    outcome = _measure(tmp_path, tiny_model(), {**slots, "MAPPER_MEASURE_WALL_SECONDS": value})
    assert_one_line(outcome, "MAPPER_MEASURE_WALL_SECONDS", "whole number")


def test_settings_default_to_limits_and_name_their_source(monkeypatch):
    monkeypatch.delenv("MAPPER_MEASURE_WALL_SECONDS", raising=False)
    assert setting("MEASURE_WALL_SECONDS") == limits.MEASURE_WALL_SECONDS
    assert setting_text("MEASURE_WALL_SECONDS") == limits.limit_text("MEASURE_WALL_SECONDS")
    monkeypatch.setenv("MAPPER_MEASURE_WALL_SECONDS", "7")
    assert (setting("MEASURE_WALL_SECONDS"), setting_text("MEASURE_WALL_SECONDS")) == (
        7,
        "MEASURE_WALL_SECONDS=7 (MAPPER_MEASURE_WALL_SECONDS)",
    )
    assert setting("ORT_SHAPES_SECONDS") == limits.ORT_SHAPES_SECONDS  # not a setting: the limit itself
    monkeypatch.delenv("MAPPER_MEASURE_CONCURRENT", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert setting("MEASURE_CONCURRENT") == 16 // limits.MEASURE_CORES_PER_RUN
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert setting("MEASURE_CONCURRENT") == 1


# ---- turns: at most MEASURE_CONCURRENT children at once, the rest in line -------------------------------------


def test_a_measurement_past_the_slots_is_refused_in_one_line(tmp_path, slots):
    """Every slot taken (by this test, as another session would), no wait allowed: refused at once, in one line."""
    with measure_slot("holder"):
        t0 = time.monotonic()
        outcome = _measure(tmp_path, tiny_model(), {**slots, "MAPPER_MEASURE_QUEUE_SECONDS": "0"})
    assert_one_line(outcome, "1st in line", "MEASURE_CONCURRENT=1", "MEASURE_QUEUE_SECONDS=0")
    assert time.monotonic() - t0 < 60  # a guard against a wait, not a timing


HOLD_SLOT = """
import sys, time
from mapper.evidence.measure_slots import measure_slot
with measure_slot("holder"):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


@pytest.mark.slow
def test_the_cli_waits_its_turn_and_says_its_place(tmp_path, slots):
    """Another process holds the one slot for 4 s: the CLI says its place on stderr, then runs."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SLOT, "4"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    outcome = _measure(tmp_path, tiny_model(), {**slots, "MAPPER_MEASURE_QUEUE_SECONDS": "60"})
    assert holder.wait(60) == 0
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "waiting for a turn to run, 1st in line" in outcome.stderr and "tiny on ONNX Runtime" in outcome.stdout


def test_sessions_of_one_server_take_turns_in_order(slots, monkeypatch):
    """Threads of one process (a server's sessions) wait as processes do: places 1 and 2 told, served in order."""
    monkeypatch.setattr(measure_slots, "POLL_S", 0.02)
    places, served = {"a": [], "b": []}, []

    def session(name: str):
        with measure_slot(name, on_wait=places[name].append):
            served.append(name)

    with measure_slot("holder"):
        a = threading.Thread(target=session, args=("a",))
        a.start()
        while not places["a"]:
            time.sleep(0.01)
        b = threading.Thread(target=session, args=("b",))
        b.start()
        while not places["b"]:
            time.sleep(0.01)
    a.join(30)
    b.join(30)
    assert served == ["a", "b"]
    assert places["a"] == [1] and places["b"][0] == 2


def test_a_dead_waiters_place_is_cleared(slots, tmp_path, monkeypatch):
    """A ticket left by a process that died (no lock on it) neither holds anyone back nor stays."""
    monkeypatch.setenv("MAPPER_MEASURE_QUEUE_SECONDS", "0")
    line = measure_slots.slots_dir() / "line"
    (line / f"{0:020d}-1-1").write_bytes(b"")
    with measure_slot("after a dead one"):
        pass
    assert list(line.iterdir()) == []


def test_a_slot_directory_planted_writable_by_others_is_refused(tmp_path, monkeypatch):
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    monkeypatch.setenv("MAPPER_MEASURE_SLOTS", str(planted))
    with pytest.raises(mapper.MapperError, match="MAPPER_MEASURE_SLOTS"), measure_slot("x"):
        pass


# ---- a 256 MB profile that will be refused is refused in seconds ----------------------------------------------


REFUSED = [name for name in PROFILES if PROFILES[name][-1]]


@pytest.mark.slow
@pytest.mark.parametrize("name", REFUSED)
def test_a_256_mb_profile_is_refused_in_one_line(tmp_path, name):
    """Under an address space of the file x1.5 (MAX_TRACE_BYTES' bound) above the CLI's own: `1,` over and over
    (132 s here before the scan and MAX_TRACE_EVENTS), the same behind one node event, node events cut short, and
    events none of which is a node's kernel time (all decoded before, to be refused at the end)."""
    model, profile = tmp_path / "tiny.onnx", tmp_path / "profile.json"
    model.write_bytes(tiny_model())
    write_profile(profile, name, PROFILE_BYTES)
    outcome = run_cli(
        ["measure", str(model), "--profile", str(profile), "--hw", "cpu-x86"], extra_bytes=PROFILE_PEAK_BYTES
    )
    assert_one_line(outcome, PROFILES[name][-1])


@pytest.mark.parametrize("name", REFUSED)
def test_each_profile_refusal_small(name, monkeypatch):
    """The same files at 4 MB, in this process (MAX_TRACE_EVENTS scaled down with them)."""
    monkeypatch.setattr(limits, "MAX_TRACE_EVENTS", 100_000)
    with pytest.raises(mapper.MapperError, match=PROFILES[name][-1]):
        mapper.load_profile(profile_bytes(name, 4 << 20))


def test_an_escaped_flood_of_complete_events_is_counted_by_the_scan(monkeypatch):
    """ "ph": "\\u0058" is "X": counted by the byte scan too, so writing it escaped does not buy a decode."""
    monkeypatch.setattr(limits, "MAX_TRACE_EVENTS", 10_000)
    event = b'{"ph":"\\u0058","cat":"Node","name":"a_kernel_time","dur":1},'
    raw = b"[" + event * 40_000 + event[:-1] + b"]"
    with pytest.raises(mapper.MapperError, match="MAX_TRACE_EVENTS"):
        mapper.load_profile(raw)


def test_a_valid_large_profile_still_loads():
    times = mapper.load_profile(profile_bytes("valid", 4 << 20))
    assert [n.name for n in times.nodes] == ["relu"]


# ---- the bench stays runnable ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_bench_runs_on_a_tiny_setting(capsys):
    outcomes = {o.case: o for o in main(["--rows", "64", "--runs", "1", "--profile-mb", "2", "--queue-rows", "64"])}
    assert outcomes["computed-rows 64"].returncode == 0 and outcomes["profile valid"].returncode == 0
    assert outcomes["profile ones"].returncode == 2
    assert outcomes["queue: first of two"].returncode == outcomes["queue: second of two"].returncode == 0
    assert "peak MB" in capsys.readouterr().out
