"""Did the client's own event loop hold a point's timing? The bound of the read-stall checks of the points that time
requests one by one (docs/metrics.md, "Client check"), and the interference point's reading of the stall.

A loop that stalls L ms reads every chunk that arrived meanwhile L ms late. Where L exceeds max(``LAG_FLOOR_MS``,
``LAG_GAP_SHARE`` × the latency it may lengthen) — the same floor and share as a rate point's schedule lag
(core/load/openloop.py) — the point is ``client_bound``: the client, not the engine, set that number. What L is
depends on what the point reports: an interference point's decoder gaps run through the whole time a prompt is in the
engine, so any stall overlapping it counts (:func:`stalled`); a burst's numbers are stamps (first token, end), so only
a stall that held one counts (``burst_point.burst_stall``, with the cell verdict's ``held_at_ms``). The loop is
sampled by the 10 ms sleeper every reading process runs (core/stream/loop_lag.py); ``ticks`` are its (tick end,
oversleep) pairs.
"""

from __future__ import annotations

from infermatrix.core.load.openloop import LAG_FLOOR_MS, LAG_GAP_SHARE
from infermatrix.core.stream.loop_lag import TICK_S

__all__ = ["stall_ms", "stall_bound_ms", "stalled"]


def stall_ms(ticks: list[tuple[float, float]], start: float, stop: float) -> float:
    """The longest oversleep, in ms, of a tick that overlapped (``start``, ``stop``): a tick ending at ``end`` with lag
    ``lag`` slept from ``end - TICK_S - lag``, and the loop could run nothing else from ``end - lag`` to ``end``."""
    return max((lag * 1000 for end, lag in ticks if end > start and end - lag - TICK_S < stop), default=0.0)


def stall_bound_ms(latency_ms: float) -> float:
    """The longest stall a latency of ``latency_ms`` may overlap and still be the engine's."""
    return max(LAG_FLOOR_MS, LAG_GAP_SHARE * latency_ms)


def stalled(ticks: list[tuple[float, float]], start: float, stop: float) -> tuple[float, float, float] | None:
    """(stall, latency, bound) in ms when a stall over (``start``, ``stop``) exceeds the latency's bound, else None."""
    latency = (stop - start) * 1000
    lag, bound = stall_ms(ticks, start, stop), stall_bound_ms(latency)
    return (lag, latency, bound) if lag > bound else None
