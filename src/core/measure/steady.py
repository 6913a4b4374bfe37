"""The engine's own view of a cell, from its metrics page: running, waiting, tokens generated.

Used to open the window only at steady state (N running, 0 waiting) and to reconcile token counts.
Which values exist, and under which names, the engine's plugin says (``EngineTraits.metrics``).
An engine without them is fine: the client's view decides, and the run says the engine's was not
checked. A read that fails (a timeout, a 5xx) or answers late is *unknown*, not *absent*: the next
read tries again, and an unknown engine never opens a window as if steady state were reached.

Polling is kept light because the page is rendered by the engine's own API server (in common engines), the usual
bottleneck at high N: inside a window at most once a second (:data:`WINDOW_POLL_S`), before it every
:data:`STEADY_POLL_S`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import httpx

from infermatrix.core.engine.prometheus import metric_samples, scan_values
from infermatrix.core.engine.traits import Gauges, MetricNames

__all__ = [
    "EngineGauges", "Gauges", "GaugeSample", "in_window", "EDGE_READ_S", "SteadyState", "parse_gauges", "METRICS_NOT_FOUND",
    "WINDOW_POLL_S", "STEADY_POLL_S", "SLOW_READ_S", "RAMP_END_READ_S", "RAMP_END_TRIES",
]  # fmt: skip

METRICS_NOT_FOUND = "engine metrics not found: steady state and engine-side token counts not checked"
WINDOW_POLL_S = 1.0  # at most one /metrics read a second while a window is open
STEADY_POLL_S = 0.25  # while waiting for steady state (before the window)
SLOW_READ_S = 1.0  # a read that took longer says little about "now": unknown, asked again
RAMP_END_READ_S = 5.0  # a ramp that gave up: each of RAMP_END_TRIES reads of the engine may take this long
RAMP_END_TRIES = 3


@dataclass
class GaugeSample:
    """One read, stamped at the middle of the request (the page was rendered somewhere in between)."""

    t: float  # monotonic seconds
    took_s: float
    gauges: Gauges


@dataclass
class SteadyState:
    reached: bool | None  # N running and none waiting (True also when the engine has no metrics); None: unknown (no read answered)
    achieved: float | None  # most requests the engine ran at once while we waited
    waited_s: float
    metrics: bool  # whether the engine reported the running gauge while we waited


def parse_gauges(page: str, names: MetricNames) -> Gauges:
    """The values ``names`` asks for, from a metrics page (``names.parse`` when the engine gives one)."""
    if names.parse is not None:
        return names.parse(page)
    wanted = names.names()
    if names.counted_at_request_end:  # counters that say nothing about a window (MetricNames)
        wanted = {f: n for f, n in wanted.items() if f in ("running", "waiting", "kv_usage")}
    per_pos = wanted.pop("spec_accepted_per_pos", None)  # labelled by position: not summed
    values = scan_values(page, wanted.values())
    g = Gauges()
    for f, n in wanted.items():
        setattr(g, f, values.get(n))
    if per_pos:
        found: dict[int, float] = {}
        for labels, value in metric_samples(page, per_pos):
            try:
                k = int(labels.get("position", ""))
            except ValueError:
                continue
            found[k] = found.get(k, 0.0) + value  # summed over the other labels (engines, ranks)
        g.spec_accepted_per_pos = found or None
    return g


EDGE_READ_S = 0.25  # a read that began this soon after a window's end is its end edge's read (edge_read)


def in_window(s: GaugeSample, ws: float, we: float) -> bool:
    """A read of the window ``[ws, we]``: stamped after it opened, begun before it closed or as its end edge's read."""
    return ws <= s.t and s.t - s.took_s / 2 <= we + EDGE_READ_S


class EngineGauges:
    """Reads the engine's gauges. ``state`` is ``"unknown"`` until a read answers, then ``"found"``,
    or ``"absent"`` when the engine declares none, has no metrics page, or serves none of the names."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, headers: dict[str, str], names: MetricNames | None):
        self.client, self.headers, self.names = client, headers, names
        self.url = f"{base_url}{names.path}" if names is not None else None
        self.state = "absent" if names is None or (not names.names() and names.parse is None) else "unknown"
        self.failures = 0  # reads that failed, or answered late or not at all within SLOW_READ_S (transient: retried)
        self.last_error: str | None = None
        self.last_sample: GaugeSample | None = None  # the latest read that answered, with its time

    @property
    def available(self) -> bool:
        return self.state != "absent"

    async def read(self) -> Gauges | None:
        if self.state == "absent" or self.url is None or self.names is None:
            return None
        t0 = time.monotonic()
        try:
            r = await self.client.get(self.url, headers=self.headers, timeout=5)
        except httpx.HTTPError as exc:
            self._failed(f"{type(exc).__name__}")
            return None
        except anyio.get_cancelled_exc_class():
            # Cut short with no answer after SLOW_READ_S (an edge read's bound, or a window that closed on it): late,
            # counted like a read that answered late — a window left without any read must say why
            # (cells.flags.engine_gauges). One cut sooner (a window closing as a read begins) is not late yet.
            if (waited := time.monotonic() - t0) >= SLOW_READ_S:
                self._failed(f"no answer in {waited:.1f} s (cut short)")
            raise
        if r.status_code in (404, 405, 501):
            self.state = "absent"  # no metrics endpoint: stop asking
            return None
        if r.status_code != 200:
            self._failed(f"{self.names.path} answered {r.status_code}")
            return None
        try:
            g = parse_gauges(r.text, self.names)
        except (ValueError, TypeError, KeyError) as exc:
            self._failed(f"unreadable {self.names.path}: {exc}")
            return None
        if g.empty():
            if self.state == "unknown":
                self.state = "absent"  # a page, but none of the names on it
            return None
        self.state = "found"
        t1 = time.monotonic()
        self.last_sample = GaugeSample((t0 + t1) / 2, t1 - t0, g)
        return g

    async def sample(self) -> GaugeSample | None:
        """One read with its time, or None when it failed or is unknown."""
        self.last_sample = None
        return self.last_sample if await self.read() is not None else None

    async def watch(self, into: list[GaugeSample], interval_s: float = WINDOW_POLL_S) -> None:
        """Append a sample every ``interval_s`` (from one read's start to the next) until cancelled.
        A failed read is skipped, not retried sooner: the interval is a promise to the engine."""
        while True:
            t0 = time.monotonic()
            s = await self.sample()
            if s is not None:
                into.append(s)
            elif self.state == "absent":
                return
            await anyio.sleep(max(0.0, interval_s - (time.monotonic() - t0)))

    async def edge_read(self, into: list[GaugeSample], bound_s: float = SLOW_READ_S, tries: int = 1) -> None:
        """One read at a window's edge, appended to ``into`` when it answered: the once-a-second reads inside the
        window need not fall on its end, and the engine's batch and counter there are what the window ends on.
        A window's edge waits at most ``SLOW_READ_S`` (a later answer says little about the edge, and the streams
        wait for it); a ramp that gave up waits longer and asks again (:data:`RAMP_END_READ_S`): nothing is timed
        there, and without the engine's answer nothing can tell whose the slow ramp was (ramp_check.py)."""
        for _ in range(tries):
            with anyio.move_on_after(bound_s):
                s = await self.sample()
                if s is not None:
                    into.append(s)
                    return
            if self.state == "absent":
                return

    async def probe(self, tries: int = 3, pause_s: float = 0.2) -> str:
        """Read until the engine's gauges are known to be there or not (at most ``tries`` reads)."""
        for i in range(tries):
            await self.read()
            if self.state != "unknown":
                break
            if i + 1 < tries:
                await anyio.sleep(pause_s)
        return self.state

    def _failed(self, why: str) -> None:
        self.failures += 1
        self.last_error = why

    async def wait_steady(self, n: int, timeout_s: float, into: list[GaugeSample] | None = None) -> SteadyState:
        """Wait until the engine runs ``n`` requests with none waiting, at most ``timeout_s``; every read that
        answered in time is appended to ``into`` (the client's in-flight count is compared with them).

        Reads that fail, or answer later than :data:`SLOW_READ_S`, are unknown and retried until the
        timeout; only an engine with no running gauge at all ends the wait at once (``metrics=False``).
        No answer at all within the timeout is ``reached=None``: unknown, never taken for steady."""
        t0 = time.monotonic()
        best: float | None = None
        while True:
            r0 = time.monotonic()
            g = await self.read()
            slow = time.monotonic() - r0 > SLOW_READ_S
            if self.state == "absent" or (g is not None and g.running is None):
                return SteadyState(reached=True, achieved=best, waited_s=time.monotonic() - t0, metrics=False)
            if g is not None and slow:
                self._failed(f"{self.names.path if self.names else 'metrics'} answered after {time.monotonic() - r0:.1f} s")
                g = None
            if g is not None and g.running is not None:
                best = g.running if best is None else max(best, g.running)
                if into is not None and self.last_sample is not None:
                    into.append(self.last_sample)
                if g.running >= n and not g.waiting:
                    return SteadyState(reached=True, achieved=g.running, waited_s=time.monotonic() - t0, metrics=True)
            if time.monotonic() - t0 >= timeout_s:
                # Not reached when the engine answered and never held N; unknown when it never answered.
                return SteadyState(reached=None if best is None else False, achieved=best, waited_s=time.monotonic() - t0, metrics=best is not None)
            await anyio.sleep(max(0.0, STEADY_POLL_S - (time.monotonic() - r0)))
