"""The engine's running count over a cell's window, beside the client's own in-flight count.

The client's count is what it *thinks* is running: a request is in flight from its send (handed to its connection) until the
client reads its end. A client that reads late still counts requests the engine finished long ago (issue 17: 256
"in flight" while the engine ran 2–4), so the two are stored side by side (``cells.flags.batch``) and the report
shows both where they differ by more than :data:`BATCH_DIFFER`. The engine's side is its running gauge (and
waiting gauge), read at most once a second inside the window plus at both edges (``steady.py``); each read is
paired with the client's count at the read's stamp (``inflight.py``).

``behind`` is the client verdict's input (``selfcheck.py``): requests the client counted in flight *with a first
token* that the engine no longer held — a lower bound on the ends the client had not read yet (a request still
awaiting its first token may be in the server's intake, which no gauge counts, so those are left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infermatrix.core.measure.inflight import ClientCounts
from infermatrix.core.measure.steady import GaugeSample, in_window

__all__ = ["BATCH_DIFFER", "WindowBatch", "window_batch"]

BATCH_DIFFER = 0.02  # the report shows the engine's and the client's counts when they differ by more than 2 %


@dataclass(frozen=True)
class WindowBatch:
    reads: int
    engine_running_mean: float
    engine_waiting_mean: float | None  # None: the engine has no waiting gauge
    client_in_flight_mean: float  # at the same reads
    client_awaiting_first_mean: float

    @property
    def held_mean(self) -> float:
        """What the engine held: running plus its queue."""
        return self.engine_running_mean + (self.engine_waiting_mean or 0.0)

    @property
    def behind(self) -> float:
        """Requests the client counted in flight with a first token that the engine no longer held, on average."""
        return max(0.0, self.client_in_flight_mean - self.client_awaiting_first_mean - self.held_mean)

    @property
    def differ(self) -> bool:
        c = self.client_in_flight_mean
        return abs(self.engine_running_mean - c) > BATCH_DIFFER * c if c > 0 else self.engine_running_mean > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "reads": self.reads, "engine_running_mean": round(self.engine_running_mean, 3),
            "engine_waiting_mean": None if self.engine_waiting_mean is None else round(self.engine_waiting_mean, 3),
            "client_in_flight_mean": round(self.client_in_flight_mean, 3),
            "client_awaiting_first_mean": round(self.client_awaiting_first_mean, 3),
            "behind": round(self.behind, 3), "differ": self.differ, "source": "gauge",
        }  # fmt: skip


def window_batch(reads: list[GaugeSample], counts: ClientCounts, ws: float, we: float) -> WindowBatch | None:
    """Over the window's reads (``steady.in_window``: the end edge's read too); None without any."""
    inside = [s for s in reads if s.gauges.running is not None and in_window(s, ws, we)]
    if not inside:
        return None
    client = [counts.read(s.t, s.took_s) for s in inside]
    waits = [s.gauges.waiting for s in inside if s.gauges.waiting is not None]
    k = len(inside)
    return WindowBatch(
        reads=k, engine_running_mean=sum(float(s.gauges.running or 0.0) for s in inside) / k,
        engine_waiting_mean=sum(waits) / len(waits) if waits else None,
        client_in_flight_mean=sum(c.at for c in client) / k, client_awaiting_first_mean=sum(c.awaiting_first for c in client) / k,
    )  # fmt: skip
