"""Clock offset and drift (docs/distributed.md) recovered from simulated pings with a known truth."""

import random

import pytest

from infermatrix.core.distributed.clocks import ClockModel, Exchange, OffsetEstimate, estimate_offset, fit_clock

OFFSET_S = 0.040  # the worker's clock runs 40 ms ahead …
DRIFT = 50e-6  # … and gains 50 µs a second (50 ppm)


def worker_clock(c: float) -> float:
    return c + OFFSET_S + DRIFT * c


def pings(rng: random.Random, at: float, n: int) -> list[Exchange]:
    """n exchanges from coordinator time ``at``, each way's delay drawn independently (asymmetric paths)."""
    out = []
    t = at
    for _ in range(n):
        there, back = rng.uniform(0.0001, 0.003), rng.uniform(0.0001, 0.003)
        out.append(Exchange(t0=t, worker=worker_clock(t + there), t1=t + there + back))
        t += there + back + 0.001
    return out


def true_offset(c: float) -> float:
    return worker_clock(c) - c


def test_min_rtt_exchange_bounds_the_offset():
    rng = random.Random(4)
    ex = pings(rng, 10.0, 30)
    est = estimate_offset(ex)
    best = min(ex, key=lambda e: e.rtt)
    assert est.rtt == best.rtt and est.uncertainty == best.rtt / 2 and est.exchanges == 30
    assert abs(est.offset - true_offset(est.at)) <= est.uncertainty


def test_cristian_by_hand():
    # Sent at 1.000, answered 5.504 on the worker's clock, back at 1.010: offset 4.499 ± 0.005.
    est = estimate_offset([Exchange(1.000, 5.504, 1.010), Exchange(2.0, 6.6, 2.1)])
    assert est.offset == pytest.approx(4.499) and est.uncertainty == pytest.approx(0.005)


def test_offset_and_drift_recovered_over_a_run():
    rng = random.Random(9)
    estimates = [estimate_offset(pings(rng, at, 20)) for at in range(0, 301, 30)]
    model = fit_clock(estimates)
    assert model.drift_ppm == pytest.approx(50, abs=10)
    for c in (0.0, 75.0, 150.0, 300.0):
        assert abs(model.offset_at(c) - true_offset(c)) <= model.uncertainty
    assert model.uncertainty < 0.004  # well under one 30 s window's edge resolution of interest


def test_conversion_round_trips_and_matches_the_truth():
    model = ClockModel(offset0=OFFSET_S, drift=DRIFT, uncertainty=0.0)
    for c in (0.0, 12.5, 1000.0):
        assert model.to_worker(c) == pytest.approx(worker_clock(c), abs=1e-12)
        assert model.to_coordinator(worker_clock(c)) == pytest.approx(c, abs=1e-9)


def test_single_estimate_has_no_drift_and_bad_input_is_refused():
    one = OffsetEstimate(at=3.0, offset=0.1, uncertainty=0.002, rtt=0.004, exchanges=5)
    m = fit_clock([one])
    assert (m.offset0, m.drift, m.uncertainty) == (0.1, 0.0, 0.002)
    with pytest.raises(ValueError, match="no usable ping"):
        estimate_offset([Exchange(2.0, 1.0, 1.0)])
    with pytest.raises(ValueError, match="no offset estimate"):
        fit_clock([])
