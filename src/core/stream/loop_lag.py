"""How late this process could stamp what it read: the event loop's lag, sampled by a 10 ms sleeper through a
period (ramp, window), and the process's CPU over it (:class:`ClientMonitor` -> :class:`ClientLoad`).

It belongs to the streaming client: every process that reads streams runs one (the cell's own process, each
worker process and Ray actor, core/distributed/), and the client verdict (core/measure/selfcheck.py) judges
the readings (docs/metrics.md, "Client verdict").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio
import psutil

__all__ = ["ClientLoad", "ClientMonitor", "worst", "round_or_none", "TICK_S"]

TICK_S = 0.01  # the sleeper's period: its oversleep is the loop's lag


@dataclass
class ClientLoad:
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    cpu_pct: float | None  # mean CPU of this process over the period, % of one core
    samples: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"lag_p50_ms": round_or_none(self.lag_p50_ms), "lag_p99_ms": round_or_none(self.lag_p99_ms), "lag_max_ms": round_or_none(self.lag_max_ms),
                "cpu_pct": round_or_none(self.cpu_pct, 1), "samples": self.samples}  # fmt: skip


def round_or_none(v: float | None, nd: int = 2) -> float | None:
    """A stored flag's number: rounded to ``nd`` places, None kept."""
    return None if v is None else round(v, nd)


class ClientMonitor:
    """Run ``sample()`` in a task for the length of a period (ramp, window), then read ``result()``."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.ticks: list[tuple[float, float]] = []  # (when the tick ended, its oversleep), for the lag at the window's edges
        self.proc = psutil.Process()
        self.cpu_start: float | None = None
        self.t_start: float | None = None
        self.t_end: float | None = None
        self.cpu_end: float | None = None

    def _cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    async def sample(self) -> None:
        self.t_start, self.cpu_start = time.monotonic(), self._cpu()
        try:
            while True:
                t0 = time.monotonic()
                await anyio.sleep(TICK_S)
                t1 = time.monotonic()
                lag = max(0.0, t1 - t0 - TICK_S)
                self.lags.append(lag)
                self.ticks.append((t1, lag))
        finally:
            self.t_end, self.cpu_end = time.monotonic(), self._cpu()

    def result(self) -> ClientLoad:
        if not self.lags or self.t_start is None or self.t_end is None or self.cpu_start is None or self.cpu_end is None:
            return ClientLoad(None, None, None, None)
        lags = sorted(self.lags)
        elapsed = self.t_end - self.t_start
        cpu = 100.0 * (self.cpu_end - self.cpu_start) / elapsed if elapsed > 0 else None
        return ClientLoad(lag_p50_ms=lags[len(lags) // 2] * 1000, lag_p99_ms=lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000,
                          lag_max_ms=lags[-1] * 1000, cpu_pct=cpu, samples=len(lags))  # fmt: skip


def worst(loads: list[ClientLoad]) -> ClientLoad:
    """The worst of several processes' readings (the parent's and its workers'), field by field."""

    def top(vals: list[float | None]) -> float | None:
        known = [v for v in vals if v is not None]
        return max(known) if known else None

    return ClientLoad(top([x.lag_p50_ms for x in loads]), top([x.lag_p99_ms for x in loads]), top([x.lag_max_ms for x in loads]),
                      top([x.cpu_pct for x in loads]), sum(x.samples for x in loads))  # fmt: skip
