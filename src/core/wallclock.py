"""Where a run's wall time goes: every second from the run's start to its end, attributed to a phase group.

The run already names its phases (``Phase``: ``describe``, ``prompts``, ``warm-up k/N``, ``ramp``,
``measure`` …); :class:`PhaseClock` is told each name as it starts and adds the time since the last one
to that one's group, on a monotonic clock, so the groups always add up to the wall time it has seen.
:func:`wall_split` is the one definition of *measurement*, *warm-up* and *harness overhead*
(docs/metrics.md, "Harness overhead"): the report's header and ``scripts/bench_client.py --matrix``
both use it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["GROUPS", "MEASUREMENT", "WARMUP", "PhaseClock", "WallSplit", "group_of", "wall_split", "add_totals"]

# The groups, in run order. Names a phase may have -> group: exact names first, then prefixes.
GROUPS = ("engine", "prompts", "prefill", "warm-up", "ramp", "measure", "drain", "verdict", "between", "other")
MEASUREMENT = ("prefill", "measure")  # decode windows and the prefill probe requests whose TTFTs are kept
WARMUP = ("warm-up", "ramp")  # warm-up requests (and prefill throwaways), the ramp and the steady-state wait

_EXACT = {
    # start-up and the engine's life: launch, ready, describe, capacity, tokenizer, gauges; recovery; stop
    "start-up": "engine", "launch": "engine", "ready": "engine", "describe": "engine", "capacity": "engine",
    "tokenizer": "engine", "gauges": "engine", "recover": "engine", "stop": "engine",
    "prompts": "prompts",
    "prefill (throwaway)": "warm-up",  # a length's first request pays one-time work; its TTFT is not kept
    "ramp": "ramp", "steady": "ramp",
    "measure": "measure",
    "drain": "drain",  # after the window: first tokens of requests sent inside it, closing streams, the engine's counters
    "verdict": "verdict", "save": "verdict",
    "health": "between", "metrics": "between", "round trip": "between",
}
_PREFIXES = (("warm-up", "warm-up"), ("prefill", "prefill"))


def group_of(phase: str) -> str:
    """The group a phase name belongs to (``other`` for a name this table does not know)."""
    if phase in _EXACT:
        return _EXACT[phase]
    for prefix, group in _PREFIXES:
        if phase.startswith(prefix):
            return group
    return "other"


class PhaseClock:
    """Adds wall time to the current phase's group; ``clock`` is injectable (tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, phase: str = "start-up") -> None:
        self.clock = clock
        self.started = clock()
        self.phase = phase
        self._since = self.started
        self._totals: dict[str, float] = {}

    def enter(self, phase: str) -> None:
        """``phase`` starts now: the time since the last call goes to the previous phase's group."""
        now = self.clock()
        group = group_of(self.phase)
        self._totals[group] = self._totals.get(group, 0.0) + (now - self._since)
        self.phase, self._since = phase, now

    def totals(self) -> dict[str, float]:
        """Seconds per group up to now (the current phase counted so far), in :data:`GROUPS` order."""
        self.enter(self.phase)
        return {g: self._totals[g] for g in GROUPS if self._totals.get(g)}

    def since(self, before: Mapping[str, float]) -> dict[str, float]:
        """Seconds per group since ``before`` (an earlier :meth:`totals`), rounded: a cell's ``phases_s``."""
        now = self.totals()
        return {g: round(s - before.get(g, 0.0), 3) for g, s in now.items() if s - before.get(g, 0.0) > 0.0005}


def add_totals(a: Mapping[str, Any] | None, b: Mapping[str, float]) -> dict[str, float]:
    """Two sessions' totals added (a resumed run keeps the time of every session)."""
    out = {g: float(v) for g, v in (a or {}).items() if isinstance(v, (int, float))}
    for g, s in b.items():
        out[g] = round(out.get(g, 0.0) + s, 3)
    return out


@dataclass(frozen=True)
class WallSplit:
    wall_s: float
    measurement_s: float
    warmup_s: float

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.wall_s - self.measurement_s - self.warmup_s)

    @property
    def overhead_share(self) -> float:
        return self.overhead_s / self.wall_s if self.wall_s > 0 else 0.0

    def line(self) -> str:
        """One short line for the report header."""
        w = self.wall_s or 1.0
        return (f"{100 * self.measurement_s / w:.0f} % measuring, {100 * self.warmup_s / w:.0f} % warm-up, "
                f"{100 * self.overhead_share:.1f} % harness overhead (of {self.wall_s:,.0f} s)")  # fmt: skip


def wall_split(phase_seconds: Mapping[str, Any] | None) -> WallSplit | None:
    """Measurement, warm-up and harness overhead of a run's ``phase_seconds`` (docs/metrics.md); None without them."""
    if not phase_seconds:
        return None
    s = {g: float(v) for g, v in phase_seconds.items() if isinstance(v, (int, float))}
    wall = sum(s.values())
    if wall <= 0:
        return None
    return WallSplit(wall_s=wall, measurement_s=sum(s.get(g, 0.0) for g in MEASUREMENT), warmup_s=sum(s.get(g, 0.0) for g in WARMUP))
