"""The client's own count of requests in flight, at the moments the engine's gauges were read.

Needed to tell whose shortfall it is when the engine never ran N at once (``admission.py``): the engine's
running + waiting can only count what the client has sent. A request is *in flight* from when it was handed
to its connection (``RequestRecord.sent`` with ``written``; a request still waiting for a pooled connection has
sent nothing) until the client saw its end (``ended``); of those, *awaiting a first token* until its
first output chunk was read.

Counted after the cell from the requests' own stamps rather than by a live counter: every client
process (the worker processes too) stamps with the host's one monotonic clock and hands its records to the
parent, so the counts at a read's moment are exact, with no message between processes racing the read.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from infermatrix.core.types import RequestRecord

__all__ = ["InFlight", "ClientCounts"]

_NEVER = float("inf")


@dataclass(frozen=True)
class InFlight:
    """The client's count around one gauge read, which took from ``t − took/2`` to ``t + took/2``
    (the engine rendered its page somewhere in between)."""

    at: int  # in flight at the read's midpoint
    least: int  # the fewest at any moment of the read
    most: int  # the most at any moment of the read
    awaiting_first: int  # of ``at``: no first token read yet


class ClientCounts:
    """The stamps of a cell's written requests, sorted once: counts at any moment by bisection."""

    def __init__(self, records: list[RequestRecord]):
        spans = []
        for r in records:
            if not r.written:
                continue  # never sent a byte: the server cannot have counted it
            end = r.ended if r.ended is not None else _NEVER
            first = r.first_token if r.first_token is not None else end
            spans.append((r.sent, min(first, end), end))
        self.sends = sorted(s for s, _, _ in spans)
        self.firsts = sorted(f for _, f, _ in spans)
        self.ends = sorted(e for _, _, e in spans)

    def at(self, t: float) -> int:
        """Sent at or before ``t`` and not ended by then (a request's end never precedes its send)."""
        return bisect_right(self.sends, t) - bisect_right(self.ends, t)

    def awaiting_first(self, t: float) -> int:
        return bisect_right(self.sends, t) - bisect_right(self.firsts, t)

    def read(self, t: float, took_s: float = 0.0) -> InFlight:
        """The counts for a gauge read stamped ``t`` that took ``took_s``."""
        a, b = t - took_s / 2, t + took_s / 2
        # The count only rises at a send and only falls at an end: its extremes over [a, b] are at a, b or those points.
        inside = [*self.sends[bisect_right(self.sends, a) : bisect_left(self.sends, b)],
                  *self.ends[bisect_right(self.ends, a) : bisect_left(self.ends, b)]]  # fmt: skip
        counts = [self.at(p) for p in (a, b, *inside)]
        return InFlight(at=self.at(t), least=min(counts), most=max(counts), awaiting_first=self.awaiting_first(t))
