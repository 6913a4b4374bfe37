"""Is the client keeping up? Event-loop lag and CPU use sampled while a cell's window is open.

A Python client parsing thousands of chunks a second can become the bottleneck; when it does, the
numbers describe the client, not the engine, and the cell says so (status ``client_bound``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import anyio
import psutil

__all__ = ["ClientMonitor", "ClientLoad", "LAG_P99_LIMIT_MS", "CPU_LIMIT_PCT"]

LAG_P99_LIMIT_MS = 5.0
CPU_LIMIT_PCT = 90.0
_TICK_S = 0.01


@dataclass
class ClientLoad:
    lag_p99_ms: float | None
    lag_max_ms: float | None
    cpu_pct: float | None  # mean CPU of this process over the window, % of one core
    samples: int = 0
    bound: bool = False
    why: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"lag_p99_ms": self.lag_p99_ms, "lag_max_ms": self.lag_max_ms, "cpu_pct": self.cpu_pct,
                "samples": self.samples, "client_bound": self.bound, "why": self.why}  # fmt: skip


class ClientMonitor:
    """Run ``sample()`` in a task for the length of the window, then read ``result()``."""

    def __init__(self) -> None:
        self.lags: list[float] = []
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
                await anyio.sleep(_TICK_S)
                self.lags.append(max(0.0, time.monotonic() - t0 - _TICK_S))
        finally:
            self.t_end, self.cpu_end = time.monotonic(), self._cpu()

    def result(self) -> ClientLoad:
        if not self.lags or self.t_start is None or self.t_end is None or self.cpu_start is None or self.cpu_end is None:
            return ClientLoad(None, None, None)
        lags = sorted(self.lags)
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000
        elapsed = self.t_end - self.t_start
        cpu = 100.0 * (self.cpu_end - self.cpu_start) / elapsed if elapsed > 0 else None
        why = []
        if p99 > LAG_P99_LIMIT_MS:
            why.append(f"event-loop lag p99 {p99:.1f} ms > {LAG_P99_LIMIT_MS:g} ms")
        if cpu is not None and cpu > CPU_LIMIT_PCT:
            why.append(f"client CPU {cpu:.0f} % > {CPU_LIMIT_PCT:g} %")
        return ClientLoad(lag_p99_ms=p99, lag_max_ms=lags[-1] * 1000, cpu_pct=cpu, samples=len(lags), bound=bool(why), why=why)
