"""Was the machine ours? The CPU it spent outside a test's own processes over a stretch, from the kernel.

A test whose claim is about an idle machine ("the verdict never disowns a one-stream cell at idle") holds it only
where the machine was idle, and that is measured here, not read from the product: the kernel's busy time for all
CPUs (``/proc/stat``) less what this process, its waited-for children (a CLI run) and the processes named (a launched
sim) used. A CPU burner beside the suite shows as about a core; the suite's own workers waiting at the solo lock as
nothing. What the kernel spends on the test's own loopback traffic (softirq time outside the processes) counts as
foreign too: a few ms a second for one stream.
"""

from __future__ import annotations

import os
import resource
import time
from types import TracebackType

import psutil

__all__ = ["ForeignLoad"]

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """CPU-seconds every CPU spent busy since boot: user, nice, system, irq, softirq, steal (guest is in user)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) * _TICK_S


def _own_s(procs: list[psutil.Process]) -> float:
    mine = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = mine.ru_utime + mine.ru_stime + kids.ru_utime + kids.ru_stime
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:  # gone: what it used is not known any more (the stretch's own end says so)
            continue
        total += t.user + t.system
    return total


class ForeignLoad:
    """``with ForeignLoad(sim_pid) as load: …`` then ``load.cores``: the mean number of cores busy outside this
    process, its waited-for children and ``pids`` over the block."""

    def __init__(self, *pids: int) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.cores: float | None = None

    def __enter__(self) -> ForeignLoad:
        self._t0, self._busy0, self._own0 = time.monotonic(), _machine_busy_s(), _own_s(self.procs)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        wall = time.monotonic() - self._t0
        foreign = (_machine_busy_s() - self._busy0) - (_own_s(self.procs) - self._own0)
        self.cores = max(foreign, 0.0) / wall if wall > 0 else None
