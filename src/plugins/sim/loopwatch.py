"""The sim's record of its own lateness: a 10 ms sleeper on its event loop.

A request's ``received`` stamp is taken when the sim's loop reads its body. A sim process that was busy or waiting for
a core reads it late, and a client's TTFT (from its send) holds that wait while the sim's ``first_token − received``
does not — on a real engine it would be the engine's time. The sleeper says when that happened: a tick that woke
``lag`` past its due time means the loop could not run from then to its wake-up, so a stamp taken in that stretch
(or just after: the read may run right after the tick) may have waited up to ``lag``. ``/debug/truth`` gives each
request's ``received_held_s``; a test comparing the client's stamps with the sim's allows it on the client's side.
It is the client's own method turned on the server (``core/stream/loop_lag.py``, ``selfcheck.held_at_ms``).
"""

from __future__ import annotations

import asyncio
import bisect
import time

__all__ = ["LoopWatch", "TICK_S", "KEEP_LAG_S"]

TICK_S = 0.010
KEEP_LAG_S = 0.002  # an idle loop oversleeps ~1.1 ms (the selector waits in whole ms): only later ticks are kept
_AFTER_S = 0.002  # a stamp this soon after a late tick's wake-up ran in the same catch-up, after the tick's callback


class LoopWatch:
    """Late ticks, in order: ``(due, woke)`` for each tick that woke more than :data:`KEEP_LAG_S` past its due time."""

    def __init__(self) -> None:
        self.late: list[tuple[float, float]] = []

    async def run(self) -> None:
        """Tick until cancelled."""
        due = time.monotonic() + TICK_S
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            woke = time.monotonic()
            if woke - due > KEEP_LAG_S:
                self.late.append((due, woke))
            due = woke + TICK_S

    def held_s(self, t: float | None) -> float:
        """How long the loop's lateness may have held a stamp taken at ``t``: the lag of the late tick whose stretch
        (due time to wake-up, plus :data:`_AFTER_S`) holds ``t``; 0 when none does (or ``t`` is None)."""
        if t is None:
            return 0.0
        i = bisect.bisect_right(self.late, (t, float("inf"))) - 1
        if i < 0:
            return 0.0
        due, woke = self.late[i]
        return woke - due if t <= woke + _AFTER_S else 0.0

    def clear(self) -> None:
        self.late.clear()
