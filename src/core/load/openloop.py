"""The open-loop sender: each request launched at its scheduled time, never waiting on earlier ones.

A closed loop sends the next request when one ends, so a slow engine slows the load it is given
(coordinated omission). Here the send times are drawn ahead (``arrivals.schedule``) and the dispatcher
only sleeps until the next one is due; each request then runs as its own task. An optional in-flight
cap makes a FIFO queue: a request that finds the cap full waits in it, the wait is stored
(``queue_ms``) and counts as schedule lag, and its latency is still charged from the *scheduled* time
(as MLPerf's loadgen does), never from when the queue let it go (docs/load.md).

The clock is injected so the dispatch rule is tested without real time (tests/core/test_openloop.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol

import anyio

from infermatrix.core.arrival_spec import Arrival
from infermatrix.core.load.arrivals import ScheduleCheck, check_schedule
from infermatrix.core.quantiles import percentile  # re-exported: the one nearest-rank rule (docs/metrics.md)

__all__ = ["Clock", "MonotonicClock", "Sent", "SendPlan", "percentile", "send_schedule", "lag_bound_ms", "judge_point", "LAG_FLOOR_MS", "LAG_GAP_SHARE"]

# A point is client_bound when its schedule lag p99 exceeds max(LAG_FLOOR_MS, LAG_GAP_SHARE × mean gap)
# (docs/load.md, "The lag bound"): a lag under a tenth of the mean gap moves each arrival by less than a
# tenth of the typical spacing; the floor is the send path's own p99 on a busy shared host (httpx, event
# loop, timer: 22 ms measured at 20/s on 2 cores at load 5), below which a fixed figure would judge the host.
LAG_FLOOR_MS = 25.0
LAG_GAP_SHARE = 0.1


class Clock(Protocol):
    def now(self) -> float: ...
    async def sleep_until(self, t: float) -> None: ...


class MonotonicClock:
    """``time.monotonic()`` — the clock every RequestRecord and the sim's truth use."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            await anyio.sleep(delay)


@dataclass
class Sent:
    """One request of a point: when it was due and when it went (``clock`` seconds)."""

    index: int
    scheduled: float  # absolute: the point's origin + its drawn offset
    released: float | None = None  # when the dispatcher let it go (after any wait for the in-flight cap)
    queue_s: float = 0.0  # time spent waiting for the in-flight cap


@dataclass
class SendPlan:
    offsets: list[float]
    origin: float
    sent: list[Sent] = field(default_factory=list)
    max_queue: int = 0  # the most requests waiting for the cap at once


async def send_schedule(
    offsets: list[float], launch: Callable[[int], Awaitable[None]], *, clock: Clock,
    max_in_flight: int | None = None, lead_s: float = 0.05, plan: SendPlan | None = None,
) -> SendPlan:
    """Launch ``launch(i)`` for every offset at ``origin + offsets[i]`` (origin = now + ``lead_s``);
    returns when every launched request has finished. ``launch`` does the request; the dispatcher never
    waits on it, only on the clock (and, with a cap, a request's own task waits for a free slot).
    ``plan``, when given, is filled in place: what was sent is there even if the sending is cancelled."""
    if plan is None:
        plan = SendPlan(offsets=offsets, origin=0.0)
    plan.offsets, plan.origin = offsets, clock.now() + lead_s
    slots = anyio.Semaphore(max_in_flight) if max_in_flight else None
    waiting = 0

    async def one(s: Sent) -> None:
        nonlocal waiting
        if slots is None:
            s.released = clock.now()
            await launch(s.index)
            return
        waiting += 1
        plan.max_queue = max(plan.max_queue, waiting)
        async with slots:  # FIFO: anyio's semaphore wakes waiters in order
            waiting -= 1
            s.released = clock.now()
            s.queue_s = max(0.0, s.released - s.scheduled)
            await launch(s.index)

    async with anyio.create_task_group() as tg:
        for i, off in enumerate(offsets):
            s = Sent(index=i, scheduled=plan.origin + off)
            plan.sent.append(s)
            await clock.sleep_until(s.scheduled)
            tg.start_soon(one, s)
    return plan


def lag_bound_ms(rate: float) -> float:
    """The schedule-lag p99 a point may have and still be ``valid``."""
    return max(LAG_FLOOR_MS, LAG_GAP_SHARE * 1000.0 / rate)


def judge_point(
    arrival: Arrival, rate: float, duration_s: float, scheduled: list[float], actual: list[float],
    *, max_in_flight: int | None = None, queued: int = 0,
) -> tuple[ScheduleCheck, str, str | None]:
    """(check, status, reason): ``valid``, or ``client_bound`` when the lag p99 exceeds the bound or the
    delivered gaps fail the fit. Offsets are seconds from the point's origin.

    The achieved rate divides the sends by the longer of the duration and the last send's offset: a client
    that falls behind and sends its backlog late delivers a lower rate, not the requested one."""
    span = max(duration_s, max(actual, default=0.0))
    check = check_schedule(arrival, rate, span, scheduled, actual)
    bound = lag_bound_ms(rate)
    why: list[str] = []
    if check.lag_p99_ms > bound:
        cap = f"; {queued} requests waited for the in-flight cap of {max_in_flight}" if queued else ""
        why.append(f"schedule lag p99 {check.lag_p99_ms:.1f} ms > bound {bound:.1f} ms{cap}")
    if check.fit_rejected and check.ks_p is not None:
        why.append(f"delivered gaps fail the {arrival} fit (KS D {check.ks_d:.3f}, p {check.ks_p:.2g} < 0.01)")
    if not actual:
        why.append("no request was sent")
    if why:
        return check, "client_bound", "; ".join(why)
    return check, "valid", None


