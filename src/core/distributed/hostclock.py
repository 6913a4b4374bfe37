"""A client host's stamps on the coordinator's time line, and the test knob that skews a host's clock.

Pure functions (no Ray here): distributed/ray_pool.py measures each actor's clock with clocks.py and converts its
records with :func:`convert_record`; tests inject a known offset and drift with :class:`ClockSkew`
(docs/distributed.md, "Testing clock offsets").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from infermatrix.core.distributed.clocks import ClockModel, OffsetEstimate
from infermatrix.core.types import RequestRecord

__all__ = ["SKEW_ENV", "ClockSkew", "skews_from_env", "convert_record", "convert_ticks", "window_bound", "drift_uncertainty_ppm"]

# Tests only: "ACTOR:OFFSET_NS:DRIFT_PPM[,ACTOR:...]" skews actor ACTOR's clock (docs/distributed.md).
SKEW_ENV = "INFERMATRIX_RAY_CLOCK_SKEW"


@dataclass(frozen=True)
class ClockSkew:
    """A host clock that reads ``t + offset_s + drift·(t − epoch)`` when the true monotonic clock reads ``t``."""

    offset_s: float = 0.0
    drift: float = 0.0  # seconds per second (ppm × 1e-6)
    epoch: float = 0.0  # the true monotonic time the drift counts from (the actor's start)

    def skewed(self, t: float) -> float:
        return t + self.offset_s + self.drift * (t - self.epoch)

    def true(self, t_skewed: float) -> float:
        return (t_skewed - self.offset_s + self.drift * self.epoch) / (1 + self.drift)

    def offset_at(self, t: float) -> float:
        """What a perfect estimate of this clock's offset reads at true time ``t``."""
        return self.offset_s + self.drift * (t - self.epoch)


def skews_from_env(environ: dict[str, str] | None = None) -> dict[int, tuple[float, float]]:
    """Actor index -> (offset_s, drift) from :data:`SKEW_ENV`; a malformed value is a one-line error."""
    raw = (os.environ if environ is None else environ).get(SKEW_ENV, "").strip()
    out: dict[int, tuple[float, float]] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        try:
            actor, offset_ns, ppm = part.split(":")
            out[int(actor)] = (int(offset_ns) / 1e9, float(ppm) * 1e-6)
        except ValueError:
            raise ValueError(f"{SKEW_ENV}: {part!r} is not ACTOR:OFFSET_NS:DRIFT_PPM") from None
    return out


def convert_record(rec: RequestRecord, to: Callable[[float], float]) -> None:
    """Every stamp of ``rec`` mapped through ``to`` in place (host clock -> coordinator clock, or back)."""
    rec.sent = to(rec.sent)
    if rec.first_token is not None:
        rec.first_token = to(rec.first_token)
    if rec.first_content is not None:
        rec.first_content = to(rec.first_content)
    if rec.ended is not None:
        rec.ended = to(rec.ended)
    if rec.opened is not None:
        rec.opened = to(rec.opened)
    rec.events = [(to(t), n) for t, n in rec.events]


def convert_ticks(ticks: list[tuple[float, float]], to: Callable[[float], float]) -> list[tuple[float, float]]:
    """Loop-lag ticks ``(end, lag_s)``: the end is a stamp, the lag a duration (unchanged)."""
    return [(to(t), lag) for t, lag in ticks]


def window_bound(model: ClockModel, coordinator_t: float) -> float:
    """A window bound in the host's own clock (what the coordinator sends it)."""
    return model.to_worker(coordinator_t)


def drift_uncertainty_ppm(estimates: list[OffsetEstimate]) -> float | None:
    """How well the estimates pin the drift: the first and last bounds over their span, in ppm (None: one estimate)."""
    if len(estimates) < 2:
        return None
    first, last = min(estimates, key=lambda e: e.at), max(estimates, key=lambda e: e.at)
    span = last.at - first.at
    return None if span <= 0 else (first.uncertainty + last.uncertainty) / span * 1e6
