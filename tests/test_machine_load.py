"""tests/machine_load.py: the kernel's busy time less the test's own processes. Each check compares readings over
the same stretch, so other load on the machine (a burner, other workers) only adds to both sides."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from machine_load import ForeignLoad, _machine_busy_s

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
TICKS_S = 0.05  # /proc/stat counts in 10 ms ticks per CPU, psutil's times too: a few ticks either way

pytestmark = pytest.mark.slow  # starts processes


def test_a_busy_process_outside_the_test_is_foreign_and_one_named_is_not():
    child = subprocess.Popen([sys.executable, "-c", BUSY + "time.sleep(30)"])
    try:
        proc = psutil.Process(child.pid)
        with ForeignLoad() as outside, ForeignLoad(child.pid) as named:
            t0, cpu0 = time.monotonic(), sum(proc.cpu_times()[:2])
            while sum(proc.cpu_times()[:2]) - cpu0 < 0.5:
                time.sleep(0.05)
            used = sum(proc.cpu_times()[:2]) - cpu0
        wall = time.monotonic() - t0
    finally:
        child.kill()
        child.wait()
    assert outside.cores is not None and named.cores is not None
    assert outside.cores * wall >= used - TICKS_S, (outside.cores, used, wall)  # the kernel counted the child's CPU
    assert (outside.cores - named.cores) * wall >= used - TICKS_S, (outside.cores, named.cores, used)  # naming it took it out


def test_a_waited_for_child_is_the_tests_own():
    busy0 = _machine_busy_s()
    with ForeignLoad() as load:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", BUSY], check=True)
        wall = time.monotonic() - t0
    busy = _machine_busy_s() - busy0
    assert load.cores is not None
    assert busy - load.cores * wall >= 0.6 - TICKS_S, (busy, load.cores, wall)  # the CLI-like child counted as the test's
