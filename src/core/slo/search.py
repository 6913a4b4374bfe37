"""The search for the highest load that meets an SLO, as a pure state machine (docs/load.md, "Search").

The runner (core/load/search.py) asks :meth:`Bisection.next_step` what to probe, measures it, and tells the
verdict with :meth:`Bisection.record`; this module never measures, so the order of probes is tested without
an engine (tests/slo/test_slo_search_algo.py).

Double from the start until a probe fails (or the stated maximum passes); if the start itself fails, halve
until one passes (or the floor is reached); then bisect the interval (highest pass, lowest fail) until it is
within the resolution. Concurrency is an integer: its midpoints are rounded down and an interval of 1 is
always final.

A probe counts at the load it *delivered* when that differs from the one asked for (a rate probe's achieved rate:
a Poisson draw of 16/s over a few seconds may hold 13/s of requests, and that is what the engine saw). The bounds
are delivered loads, and the next load is asked from them. A probe that cannot narrow the interval (it delivered
a load outside it) ends the search with what it has, saying why (``note``), instead of asking the same load again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from infermatrix.core.config import ConfigError

__all__ = ["Resolution", "parse_resolution", "Bisection", "DEFAULT_RESOLUTION", "MAX_PROBES", "HALVINGS"]

DEFAULT_RESOLUTION = {"rate": "10%", "concurrency": "1"}
# A search that keeps going past this many probes has a resolution too fine for its noise: it stops, saying so.
MAX_PROBES = 40
# A failing start is halved at most this many times (1/64 of it) before the search says no load meets the SLO.
HALVINGS = 6


@dataclass(frozen=True)
class Resolution:
    """How narrow the final interval must be: ``hi - lo <= value`` (absolute) or ``<= value × lo`` (relative)."""

    value: float
    relative: bool

    def met(self, lo: float, hi: float) -> bool:
        gap = hi - lo
        return gap <= (self.value * lo if self.relative else self.value) * (1 + 1e-9)

    def text(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


def parse_resolution(text: str | None, over: str) -> Resolution:
    """``"10%"`` (relative to the highest passing load) or ``"0.5"`` (absolute, in the load's unit)."""
    raw = (text or DEFAULT_RESOLUTION[over]).strip()
    relative = raw.endswith("%")
    try:
        value = float(raw[:-1] if relative else raw)
    except ValueError:
        raise ConfigError(f"--resolution {raw}: expected a number (absolute, e.g. 0.5) or a share (e.g. 10%)") from None
    if not value > 0 or math.isinf(value):
        raise ConfigError(f"--resolution {raw}: must be greater than 0")
    if relative:
        value /= 100.0
    if over == "concurrency" and not relative and value < 1:
        raise ConfigError(f"--resolution {raw}: a concurrency search resolves to whole requests (1 or more)")
    return Resolution(value, relative)


@dataclass
class Bisection:
    """Where the search stands: the highest passing load, the lowest failing one, and what to try next."""

    start: float
    resolution: Resolution
    over: str  # rate | concurrency
    max_load: float | None = None
    lo: float | None = None  # highest load that met the SLO
    hi: float | None = None  # lowest load that did not
    outcome: str | None = None  # found | max_reached | none_passed | too_many_probes | stopped (None: still searching)
    probes: list[tuple[float, bool, str]] = field(default_factory=list)  # (load counted: the delivered one, passed, step)
    note: str | None = None  # why the search ended short of its resolution (a probe that could not narrow it, crossed verdicts)
    _max_passed: bool = field(default=False, init=False, repr=False)
    _stuck: bool = field(default=False, init=False, repr=False)

    def unit(self, x: float) -> str:
        return f"{x:.4g}/s" if self.over == "rate" else f"N = {x:g}"

    def _load(self, x: float) -> float:
        if self.over == "concurrency":
            return float(max(1, int(x)))
        return float(f"{x:.6g}")  # a stored, printable figure: 6 significant digits

    def next_step(self) -> tuple[float, str] | None:
        """(load, step) to probe next — step: start | double | halve | bisect | max — or None when done."""
        if self.outcome is not None:
            return None
        if self._stuck:  # the last probe moved neither bound: asking again would ask the same load
            self.outcome = "found" if self.lo is not None and self.hi is not None else "stopped"
            return None
        if len(self.probes) >= MAX_PROBES:
            self.outcome = "too_many_probes"
            return None
        if not self.probes:
            return self._load(min(self.start, self.max_load) if self.max_load else self.start), "start"
        lo, hi = self.lo, self.hi
        if hi is None:  # every probe passed so far: double (up to the maximum)
            assert lo is not None
            nxt = self._load(lo * 2)
            if self.max_load is not None and nxt >= self.max_load:
                if self._max_passed or lo >= self.max_load:
                    self.outcome = "max_reached"
                    return None
                return self._load(self.max_load), "max"
            return nxt, "double"
        if lo is None:  # every probe failed so far: halve
            nxt = self._load(hi / 2)
            if nxt >= hi or hi <= self.start / 2**HALVINGS:
                self.outcome = "none_passed"
                return None
            return nxt, "halve"
        if self.resolution.met(lo, hi) or (self.over == "concurrency" and hi - lo <= 1):
            self.outcome = "found"
            return None
        mid = self._load((lo + hi) / 2)
        if mid <= lo or mid >= hi:  # nothing left between them at this load's granularity
            self.outcome = "found"
            return None
        return mid, "bisect"

    def record(self, load: float, passed: bool, step: str, delivered: float | None = None) -> None:
        """The verdict of the probe asked at ``load``, counted at ``delivered`` when given (what the probe sent)."""
        at = load if delivered is None else delivered
        before = (self.lo, self.hi)
        self.probes.append((at, passed, step))
        self._max_passed |= passed and step == "max"
        if passed:
            self.lo = at if self.lo is None else max(self.lo, at)
        else:
            self.hi = at if self.hi is None else min(self.hi, at)
        word = "passed" if passed else "failed"
        if self.lo is not None and self.hi is not None and self.lo >= self.hi:
            self.note = (f"the verdicts cross: a pass at {self.unit(self.lo)} is not below a fail at {self.unit(self.hi)} (the SLO's boundary "
                         "lies within the probes' noise)")  # fmt: skip
        elif (self.lo, self.hi) == before and not self._max_passed:
            self._stuck = True
            self.note = (
                f"the probe asked at {self.unit(load)} delivered {self.unit(at)} and {word}, which narrows nothing: the interval is as "
                "narrow as probes of this length can make it (a longer probe duration or constant arrivals go finer)"
            )
