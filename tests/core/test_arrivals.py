"""Arrival schedules and their check (docs/load.md), against closed forms and seeded draws."""

import math
import random

import pytest

from infermatrix.core.arrival_spec import Arrival, parse_arrival
from infermatrix.core.load.arrivals import (
    check_schedule,
    gap_cdf,
    ks_test,
    regularized_gamma_p,
    schedule,
)


@pytest.mark.parametrize("x", [0.01, 0.3, 1.0, 2.5, 7.0, 30.0])
def test_incomplete_gamma_closed_forms(x):
    # P(1, x) = 1 − e^−x; P(1/2, x) = erf(√x); P(2, x) = 1 − e^−x (1 + x).
    assert regularized_gamma_p(1.0, x) == pytest.approx(1 - math.exp(-x), abs=1e-12)
    assert regularized_gamma_p(0.5, x) == pytest.approx(math.erf(math.sqrt(x)), abs=1e-12)
    assert regularized_gamma_p(2.0, x) == pytest.approx(1 - math.exp(-x) * (1 + x), abs=1e-12)


def test_parse_arrival():
    assert parse_arrival("Poisson") == Arrival("poisson")
    assert parse_arrival("constant") == Arrival("constant")
    assert parse_arrival("gamma:0.25") == Arrival("gamma", 0.25)
    assert str(parse_arrival("gamma:0.25")) == "gamma:0.25"
    for bad in ("gamma", "gamma:0", "gamma:-1", "gamma:x", "uniform", ""):
        with pytest.raises(ValueError, match="expected poisson, constant or gamma:K"):
            parse_arrival(bad)


def test_constant_schedule_is_exact():
    # R·duration requests, the last at the end (the docstring's count; a half-open interval sent 7)
    assert schedule(Arrival("constant"), 4.0, 2.0, seed=1) == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0])
    assert len(schedule(Arrival("constant"), 3.0, 10.0, seed=1)) == 30  # 1/3 s gaps: rounding does not lose the last


def test_schedule_is_seeded_and_has_the_requested_mean_rate():
    a = schedule(Arrival("poisson"), 50.0, 200.0, seed=7)
    assert a == schedule(Arrival("poisson"), 50.0, 200.0, seed=7)
    assert a != schedule(Arrival("poisson"), 50.0, 200.0, seed=8)
    assert all(0 <= t < 200.0 for t in a) and a == sorted(a)
    # 10,000 expected arrivals: the count's standard deviation is 100 (1 %); 4 σ.
    assert len(a) == pytest.approx(10_000, abs=400)


def test_gamma_gaps_have_the_requested_burstiness():
    times = schedule(Arrival("gamma", 0.25), 20.0, 500.0, seed=3)
    gaps = [b - a for a, b in zip(times, times[1:])]
    mean = sum(gaps) / len(gaps)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    assert mean == pytest.approx(1 / 20.0, rel=0.1)
    assert cv == pytest.approx(2.0, rel=0.15)  # 1/√K


def test_ks_accepts_the_right_process_and_rejects_the_wrong_one():
    poisson = schedule(Arrival("poisson"), 10.0, 200.0, seed=11)
    bursty = schedule(Arrival("gamma", 0.25), 10.0, 200.0, seed=11)
    gaps = lambda ts: [b - a for a, b in zip(ts, ts[1:])]  # noqa: E731
    _, p = ks_test(gaps(poisson), gap_cdf(Arrival("poisson"), 10.0))
    assert p > 0.01
    _, p = ks_test(gaps(bursty), gap_cdf(Arrival("gamma", 0.25), 10.0))
    assert p > 0.01
    _, p = ks_test(gaps(bursty), gap_cdf(Arrival("poisson"), 10.0))
    assert p < 1e-6
    # Poisson at the wrong rate is rejected too: the test is fully specified, not fitted.
    _, p = ks_test(gaps(poisson), gap_cdf(Arrival("poisson"), 13.0))
    assert p < 0.01


def test_ks_statistic_by_hand():
    # Uniform(0,1) CDF, samples 0.1, 0.4, 0.9: D = max(1/3−0.1, 2/3−0.4, 1−0.9, 0.1, 0.4−1/3, 0.9−2/3).
    d, _ = ks_test([0.9, 0.1, 0.4], lambda x: min(max(x, 0.0), 1.0))
    assert d == pytest.approx(max(1 / 3 - 0.1, 2 / 3 - 0.4, 0.1, 0.9 - 2 / 3))


def test_check_schedule_delivered_on_time():
    arrival = Arrival("poisson")
    plan = schedule(arrival, 20.0, 100.0, seed=5)
    rng = random.Random(0)
    sent = [t + rng.uniform(0, 0.0005) for t in plan]
    check = check_schedule(arrival, 20.0, 100.0, plan, sent)
    assert check.sent == len(plan)
    assert check.achieved_rate == pytest.approx(len(plan) / 100.0)
    assert check.lag_max_ms <= 0.5 and check.lag_p99_ms <= check.lag_max_ms
    assert check.ks_p is not None and not check.fit_rejected


def test_check_schedule_catches_a_client_that_sends_in_bursts():
    # A client that wakes every 0.5 s and sends what is due: the rate is right, the process is not.
    arrival = Arrival("poisson")
    plan = schedule(arrival, 20.0, 100.0, seed=5)
    sent = [math.ceil(t / 0.5) * 0.5 for t in plan]
    check = check_schedule(arrival, 20.0, 100.0, plan, sent)
    assert check.achieved_rate == pytest.approx(20.0, rel=0.05)
    assert check.fit_rejected
    assert 400 < check.lag_p99_ms <= 500


def test_check_schedule_constant_is_judged_by_lag_alone():
    plan = schedule(Arrival("constant"), 2.0, 5.0, seed=0)
    check = check_schedule(Arrival("constant"), 2.0, 5.0, plan, [t + 0.01 for t in plan])
    assert check.ks_d is None and not check.fit_rejected
    assert check.lag_p50_ms == pytest.approx(10.0)


def test_check_schedule_rejects_mismatched_lists():
    with pytest.raises(ValueError, match="2 scheduled sends but 1 actual"):
        check_schedule(Arrival("poisson"), 1.0, 1.0, [0.1, 0.2], [0.1])
