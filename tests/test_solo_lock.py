"""tests/solo.py's lock (issue 28 item 7): shared tests run side by side, a solo test runs alone, and a solo test
that waits is not overtaken by shared tests that come after it. Threads stand in for xdist workers: each opens the
lock files itself, and flock locks belong to the open file, so they exclude each other as processes would."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import solo
from solo import LONG_FIRST, SOLO_NICE, done_mark, run_order, wait_for_solo_phase, _enter_solo, _hold_module_locks, _leave_solo, _release_module_locks, machine

WAIT = 5.0  # only a bound on a wait that must end; the order is judged by events, not by time


def _hold(d, solo, entered, release, log, name):
    with machine(d, solo):
        log.append(f"{name} in")
        entered.set()
        assert release.wait(WAIT)
        log.append(f"{name} out")


def _start(d, solo, log, name):
    entered, release = threading.Event(), threading.Event()
    t = threading.Thread(target=_hold, args=(d, solo, entered, release, log, name), daemon=True)
    t.start()
    return t, entered, release


def _free(path) -> bool:
    """Nobody holds ``path``'s lock (a non-blocking try succeeds)."""
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def _wait_until_held(path) -> bool:
    """True once someone holds ``path``'s lock, polled: the waiter gives no event."""
    end = time.monotonic() + WAIT
    while time.monotonic() < end:
        if not _free(path):
            return True
        time.sleep(0.01)
    return False


def test_shared_tests_run_side_by_side(tmp_path):
    log: list[str] = []
    a, a_in, a_go = _start(tmp_path, False, log, "a")
    b, b_in, b_go = _start(tmp_path, False, log, "b")
    assert a_in.wait(WAIT) and b_in.wait(WAIT)  # both inside at once
    a_go.set(), b_go.set()
    a.join(WAIT), b.join(WAIT)
    assert sorted(log[:2]) == ["a in", "b in"]


def test_a_solo_test_waits_for_the_running_one_and_goes_before_later_shared_ones(tmp_path):
    log: list[str] = []
    a, a_in, a_go = _start(tmp_path, False, log, "a")  # a shared test is running
    assert a_in.wait(WAIT)
    s, s_in, s_go = _start(tmp_path, True, log, "solo")  # a solo test arrives: it must wait for a
    assert _wait_until_held(tmp_path / "turnstile")  # ... holding the turnstile while it waits
    assert not s_in.wait(0.3)
    c, c_in, c_go = _start(tmp_path, False, log, "c")  # a shared test after it: must wait for the solo one
    assert not c_in.wait(0.3)
    a_go.set()
    assert s_in.wait(WAIT)  # a left: the solo test runs, alone
    assert not c_in.wait(0.3)
    s_go.set()
    assert c_in.wait(WAIT)
    c_go.set()
    for t in (a, s, c):
        t.join(WAIT)
    assert log == ["a in", "a out", "solo in", "solo out", "c in", "c out"]


class _Item:
    """What the module locks read of a pytest item: its holds marks and its module."""

    def __init__(self, module: object, *names: str, solo: bool = False, nodeid: str = "tests/x.py::t") -> None:
        self.module, self.names, self.solo, self.nodeid = module, names, solo, nodeid

    def iter_markers(self, name: str):
        return [pytest.mark.holds(n).mark for n in self.names] if name == "holds" else []

    def get_closest_marker(self, name: str):
        return pytest.mark.solo.mark if name == "solo" and self.solo else None


def test_a_holds_lock_lasts_from_the_modules_first_test_to_its_last(tmp_path):
    ray_a, ray_b, other = object(), object(), object()
    first, last = _Item(ray_a, "ray"), _Item(ray_a, "ray")
    _hold_module_locks(tmp_path, first)
    assert not _free(tmp_path / "holds-ray")  # another worker's Ray module would wait
    _release_module_locks(first, nextitem=last)  # the module goes on: its cluster is still up
    assert not _free(tmp_path / "holds-ray")
    _hold_module_locks(tmp_path, last)
    _release_module_locks(last, nextitem=_Item(other))  # the module ended
    assert _free(tmp_path / "holds-ray")
    # two Ray modules back to back on one worker: released between them (the first's cluster is gone)
    _hold_module_locks(tmp_path, _Item(ray_a, "ray"))
    _release_module_locks(_Item(ray_a, "ray"), nextitem=_Item(ray_b, "ray"))
    assert _free(tmp_path / "holds-ray")


def test_a_solo_module_holds_the_machine_from_its_first_test_to_its_last(tmp_path):
    """One drain of the other workers per solo module: between two of its tests no shared test gets in."""
    mod, other = object(), object()
    first, second = _Item(mod, solo=True), _Item(mod, solo=True)
    assert _enter_solo(tmp_path, first)
    try:
        log: list[str] = []
        t, shared_in, shared_go = _start(tmp_path, False, log, "shared")  # another worker's shared test arrives
        assert not shared_in.wait(0.3)
        _leave_solo(tmp_path, first, nextitem=second)  # the module goes on: still held
        assert not shared_in.wait(0.3)
        assert _enter_solo(tmp_path, second)  # already held: no second acquire (it would deadlock on the turnstile)
        _leave_solo(tmp_path, second, nextitem=_Item(other))  # the module ended
        assert shared_in.wait(WAIT)
        assert done_mark(tmp_path, "tests/x.py").exists()  # the module's end, for the solo phase
        shared_go.set()
        t.join(WAIT)
        assert not _enter_solo(tmp_path, _Item(other))  # a shared test holds nothing exclusively
    finally:
        if solo._solo_hold is not None:
            solo._solo_hold.close()
            solo._solo_hold = None


def test_solo_modules_go_first_then_the_long_ones_each_module_whole():
    root = Path(__file__).resolve().parents[1]
    assert all((root / p).is_file() for p in LONG_FIRST), [p for p in LONG_FIRST if not (root / p).is_file()]  # no stale name
    def item(path: str, name: str, solo_: bool = False) -> _Item:
        return _Item(path, solo=solo_, nodeid=f"{path}::{name}")
    items = [item("tests/a.py", "1"), item(LONG_FIRST[1], "1"), item("tests/s.py", "1", True), item("tests/a.py", "2"),
             item(LONG_FIRST[0], "1"), item(LONG_FIRST[1], "2"), item("tests/s.py", "2", True)]  # fmt: skip
    order = [i.nodeid for i in sorted(items, key=run_order)]
    assert order == ["tests/s.py::1", "tests/s.py::2", f"{LONG_FIRST[0]}::1", f"{LONG_FIRST[1]}::1", f"{LONG_FIRST[1]}::2",
                     "tests/a.py::1", "tests/a.py::2"]  # fmt: skip
    # the order only holds if xdist hands the files out as sorted: its default re-sorts them by their number of tests
    assert "--no-loadscope-reorder" in (root / "pyproject.toml").read_text()


def test_shared_tests_wait_for_every_solo_module_to_end(tmp_path):
    """The solo phase: a worker done with its solo modules does not start a shared one while another worker's solo
    module is still to run (it would make that module wait for a drain, and every worker behind the turnstile idle)."""
    modules = frozenset({"tests/s1.py", "tests/s2.py"})
    passed = threading.Event()
    t = threading.Thread(target=lambda: wait_for_solo_phase(tmp_path, modules, max_s=WAIT, poll_s=0.01) and passed.set(), daemon=True)
    t.start()
    s1, s2 = object(), object()
    assert _enter_solo(tmp_path, _Item(s1, solo=True, nodeid="tests/s1.py::a"))
    _leave_solo(tmp_path, _Item(s1, solo=True, nodeid="tests/s1.py::a"), nextitem=_Item(s2, solo=True, nodeid="tests/s2.py::a"))
    assert not passed.wait(0.3)  # one of two ended: still waiting
    assert _enter_solo(tmp_path, _Item(s2, solo=True, nodeid="tests/s2.py::a"))
    _leave_solo(tmp_path, _Item(s2, solo=True, nodeid="tests/s2.py::a"), nextitem=None)
    assert passed.wait(WAIT)
    t.join(WAIT)
    assert wait_for_solo_phase(tmp_path, frozenset())  # a run without solo modules waits for nothing
    assert not wait_for_solo_phase(tmp_path, frozenset({"tests/never.py"}), max_s=0.05, poll_s=0.01)  # bounded: a lost module


def _child_nice(*code: str) -> str:
    return subprocess.run([sys.executable, "-c", "import os; " + "; ".join(code)], capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.slow  # starts a process: the child that inherits the priority
def test_a_solo_module_and_what_it_starts_run_at_the_solo_nice(tmp_path):
    """While a solo module holds the machine its worker, and so the engine and client it starts, run at SOLO_NICE (a CPU
    burner at nice 0 beside the suite slowed vLLM's front end 2-3 times over); after the module, the worker's own nice."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    may = _child_nice(f"os.setpriority(os.PRIO_PROCESS, 0, {SOLO_NICE})", "print('yes')") == "yes"  # root or CAP_SYS_NICE
    mod, other = object(), object()
    item = _Item(mod, solo=True)
    assert _enter_solo(tmp_path, item)
    try:
        assert os.getpriority(os.PRIO_PROCESS, 0) == (SOLO_NICE if may else before)
        assert _child_nice("print(os.getpriority(os.PRIO_PROCESS, 0))") == str(SOLO_NICE if may else before)
    finally:
        _leave_solo(tmp_path, item, nextitem=_Item(other))
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    assert not _enter_solo(tmp_path, _Item(other))  # a shared test: nothing raised
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
