"""Another host's clock, measured against ours: offset, drift and their uncertainty (docs/distributed.md).

A client worker on another host stamps its requests with its own ``monotonic_ns``; to put those stamps on
the coordinator's time line we estimate the other clock from ping exchanges (Cristian's method): the
coordinator notes ``t0``, the worker answers with its clock ``w``, the coordinator notes ``t1``. If the
answer was taken at the exchange's midpoint, ``offset = w − (t0 + t1)/2``; wherever inside the round trip
it was really taken, the error is at most ``(t1 − t0)/2``. So of many exchanges the one with the shortest
round trip bounds the offset most tightly, and that bound is stated, not hidden.

Over a run a clock also drifts (tens of ppm for common crystals): exchanges repeated through the run give
one offset estimate each, and a line fitted through them gives offset(t) = offset₀ + drift·t. Pure
functions: the pings themselves are the transport's business.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Exchange", "OffsetEstimate", "ClockModel", "estimate_offset", "fit_clock"]


@dataclass(frozen=True)
class Exchange:
    """One ping: coordinator send ``t0``, worker's clock ``worker`` when it answered, coordinator receive ``t1``."""

    t0: float
    worker: float
    t1: float

    @property
    def rtt(self) -> float:
        return self.t1 - self.t0


@dataclass(frozen=True)
class OffsetEstimate:
    at: float  # coordinator time the estimate holds for (the chosen exchange's midpoint)
    offset: float  # worker clock − coordinator clock, seconds
    uncertainty: float  # ± seconds: half the chosen exchange's round trip
    rtt: float
    exchanges: int


def estimate_offset(exchanges: list[Exchange]) -> OffsetEstimate:
    """The minimum-round-trip exchange's offset, ± half its round trip."""
    valid = [e for e in exchanges if e.rtt >= 0]
    if not valid:
        raise ValueError("no usable ping exchange (each needs t1 ≥ t0)")
    best = min(valid, key=lambda e: e.rtt)
    mid = (best.t0 + best.t1) / 2
    return OffsetEstimate(at=mid, offset=best.worker - mid, uncertainty=best.rtt / 2, rtt=best.rtt, exchanges=len(valid))


@dataclass(frozen=True)
class ClockModel:
    """worker = coordinator + offset0 + drift·coordinator, good to ± ``uncertainty`` over the fitted span."""

    offset0: float
    drift: float  # dimensionless (seconds per second); ×1e6 for ppm
    uncertainty: float

    @property
    def drift_ppm(self) -> float:
        return self.drift * 1e6

    def offset_at(self, t: float) -> float:
        return self.offset0 + self.drift * t

    def to_coordinator(self, worker_t: float) -> float:
        return (worker_t - self.offset0) / (1 + self.drift)

    def to_worker(self, coordinator_t: float) -> float:
        return coordinator_t + self.offset_at(coordinator_t)


def fit_clock(estimates: list[OffsetEstimate]) -> ClockModel:
    """A line through the estimates, each weighted by 1/uncertainty² (a tight ping counts more).

    One estimate gives no drift (0) and its own uncertainty. With several, the model's uncertainty is
    the largest of each estimate's own bound plus its distance from the line: a pessimistic, honest
    bound rather than a standard error that assumes the errors are independent and centred.
    """
    if not estimates:
        raise ValueError("no offset estimate to fit a clock to")
    if len(estimates) == 1 or max(e.at for e in estimates) == min(e.at for e in estimates):
        best = min(estimates, key=lambda e: e.uncertainty)
        return ClockModel(offset0=best.offset, drift=0.0, uncertainty=best.uncertainty)
    weights = [1 / max(e.uncertainty, 1e-9) ** 2 for e in estimates]
    sw = sum(weights)
    mx = sum(w * e.at for w, e in zip(weights, estimates)) / sw
    my = sum(w * e.offset for w, e in zip(weights, estimates)) / sw
    sxx = sum(w * (e.at - mx) ** 2 for w, e in zip(weights, estimates))
    sxy = sum(w * (e.at - mx) * (e.offset - my) for w, e in zip(weights, estimates))
    drift = sxy / sxx
    offset0 = my - drift * mx
    worst = max(e.uncertainty + abs(e.offset - (offset0 + drift * e.at)) for e in estimates)
    return ClockModel(offset0=offset0, drift=drift, uncertainty=worst)
