"""Which phase of a run the client is in, as the sim sees it from the requests it gets.

Fault rules with a ``phase`` (faults.py) hit requests of that phase, so a test can make the engine
fail *during* warm-up, the steady-state wait, the drain … without timing anything. The phases are
read from what arrives: the path, and infermatrix's ``X-Request-Id``
(``{run}-{kind}-{context}-{n}-s{stream}-r{seq}``, kind ``warm`` | ``decode`` | ``prefill``):

==========  ==========================================================================================
phase       the requests it covers
==========  ==========================================================================================
describe    ``GET /version`` (asked once, while the run describes the engine)
tokenize    ``POST /tokenize`` (the tokenizer check, prompt building, recounts)
metrics     ``GET /metrics`` (any read: capacity, gauges, steady state, window, reconciliation)
prefill     a prefill probe's request
warmup      a cell's warm-up requests
ramp        each stream's first decode request of a cell
steady      ``GET /metrics`` after the cell's first decode request, until a read shows all N running
            and none waiting (the read that ends the client's steady-state wait)
window      decode requests and ``GET /metrics`` after that read, until the client closes a stream
drain       from the first decode stream the client closes while the sim still generates it (the
            window's end, when outputs are long enough to be in flight then) until the next cell;
            an ``exit`` rule fires at that moment
between     after a drain, the client's ``GET /health`` (infermatrix checks the engine before each
            cell), or the server idle for ``IDLE_S``: the run is between cells. An ``exit`` rule
            fires then; other rules hit the next request
==========  ==========================================================================================

A request can be in several phases (a ``GET /metrics`` in the window is ``metrics`` and ``window``).
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["PHASES", "IDLE_S", "PhaseTracker"]

PHASES = ("describe", "tokenize", "metrics", "prefill", "warmup", "ramp", "steady", "window", "drain", "between")

# Quiet time after a drain that counts as "between cells". Short: the client's bookkeeping between
# cells sends nothing, and the next cell's first request ends it anyway.
IDLE_S = 0.2

_REQUEST_ID = re.compile(r"-(warm|decode|prefill)-(\d+)-(\d+)-s(\d+)-r(\d+)$")


class PhaseTracker:
    """Follows the client through cells; ``tags`` says which phases an arriving request is in."""

    def __init__(self, on_enter: Callable[[str], None] | None = None):
        self.stage = "start"  # start | warmup | ramp | steady | window | drain | between | prefill
        self.cell: tuple[int, int] | None = None  # (context, n) of the cell in progress
        self.in_flight = 0
        self.arrivals = 0  # requests seen: a timer armed at the drain's end checks nothing arrived since
        self.on_enter = on_enter  # called with "drain" / "between" as the run enters them (exit rules fire there)

    def tags(self, method: str, path: str, request_id: str | None) -> set[str]:
        """The phases of a request as it arrives (and the stage it moves the tracker to)."""
        out: set[str] = set()
        if self.stage == "between":
            out.add("between")
            self.stage = "idle"
        if method == "GET" and path == "/version":
            out.add("describe")
        elif method == "POST" and path == "/tokenize":
            out.add("tokenize")
            if self.stage == "drain":
                out.add("drain")
        elif method == "GET" and path == "/metrics":
            out.add("metrics")
            if self.stage == "ramp":
                self.stage = "steady"  # the ramp itself reads no metrics: this is the steady-state wait
            if self.stage in ("steady", "window", "drain"):
                out.add(self.stage)
        elif method == "POST" and path.startswith("/v1/") and request_id:
            m = _REQUEST_ID.search(request_id)
            if m is not None:
                kind, cell, seq = m.group(1), (int(m.group(2)), int(m.group(3))), int(m.group(5))
                if kind == "prefill":
                    out.add("prefill")
                    self.stage, self.cell = "prefill", None
                elif kind == "warm":
                    out.add("warmup")
                    self.stage, self.cell = "warmup", cell
                elif cell != self.cell or self.stage not in ("ramp", "steady", "window"):
                    if self.stage == "drain" and cell == self.cell:
                        out.add("drain")  # a request of the closing cell, late
                    else:
                        self.stage, self.cell = "ramp", cell
                        out.add("ramp")
                elif seq == 0:
                    out.add("ramp")
                elif self.stage == "window":
                    out.add("window")
        return out

    def metrics_answered(self, running: float, waiting: float) -> None:
        """A ``/metrics`` answer went out: all N running and none waiting ends the client's steady wait."""
        if self.stage == "steady" and self.cell is not None and running >= self.cell[1] and not waiting:
            self.stage = "window"

    def stream_closed_by_client(self) -> None:
        """A decode stream ended because the client closed it: in a cell, that is the window's end."""
        if self.stage in ("ramp", "steady", "window"):
            self.stage = "drain"
            if self.on_enter is not None:
                self.on_enter("drain")

    def health_asked(self) -> None:
        """``GET /health``: after a drain, the client checking the engine before its next cell."""
        self._between()

    def _between(self) -> None:
        if self.stage == "drain":
            self.stage = "between"
            if self.on_enter is not None:
                self.on_enter("between")

    def request_started(self) -> None:
        self.in_flight += 1
        self.arrivals += 1

    def request_ended(self, later: Callable[[float, Callable[[], None]], object]) -> None:
        """A request finished; after a drain, an idle server is "between cells" ``IDLE_S`` later."""
        self.in_flight -= 1
        if self.stage == "drain" and self.in_flight == 0:
            seen = self.arrivals

            def check() -> None:
                if self.in_flight == 0 and self.arrivals == seen:
                    self._between()

            later(IDLE_S, check)
