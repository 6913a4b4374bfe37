"""A thread that calls a read function at a fixed cadence and measures what the reads cost.

Telemetry reads (an HTTP GET of ``/metrics``, NVML calls) run here, never on the client's event loop, so a slow
read can delay the next read but never a stream. The cadence is fixed (``start + k x interval``): a slow read
does not stretch the period; reads that fall far behind are skipped, not bunched.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

__all__ = ["Ticker", "RowBuffer"]


class RowBuffer:
    """What a reader on a telemetry thread keeps for the run: rows its reads made, taken by ``drain()`` between the
    run's steps; reads that failed (``failures``) and the last one's error, said once in the run's output."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()
        self.failures = 0
        self.last_error: str | None = None

    def keep(self, rows: list[tuple[Any, ...]]) -> None:
        with self.lock:
            self.rows.extend(rows)

    def drain(self) -> list[tuple[Any, ...]]:
        with self.lock:
            rows, self.rows = self.rows, []
        return rows


class Ticker:
    """Calls ``read()`` every ``interval_s`` seconds on a daemon thread between ``start()`` and ``stop()``.

    ``reads``: calls made; ``cpu_s``: the thread's own CPU time over all reads (``time.thread_time``: what the
    telemetry took from the machine the client runs on); ``wall_s``: the reads' wall time summed."""

    def __init__(self, name: str, interval_s: float, read: Callable[[], None]):
        self.name, self.interval_s, self.read = name, interval_s, read
        self.reads = 0
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"infermatrix-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        start = time.monotonic()
        k = 0
        while not self._stop.is_set():
            c0, w0 = time.thread_time(), time.monotonic()
            try:
                self.read()
            except Exception:  # a read must never end the thread: the reader notes its own failures
                pass
            self.cpu_s += time.thread_time() - c0
            self.wall_s += time.monotonic() - w0
            self.reads += 1
            k = max(k + 1, int((time.monotonic() - start) / self.interval_s))  # behind: skip, don't bunch
            self._stop.wait(max(0.0, start + k * self.interval_s - time.monotonic()))
