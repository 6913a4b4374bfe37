"""Warm-up sizing: bounded in flight, timeouts from the measured prefill rate (core/measure/warmup.py)."""

import pytest

from infermatrix.core.measure.warmup import TIMEOUT_MARGIN, WARM_TOKENS_IN_FLIGHT, PrefillRates, plan_warmup


def test_long_prompts_warm_one_at_a_time_with_a_timeout_from_the_rate():
    # 128K × 32 at 15k tok/s: ~8.7 s each; all at once was ~4M tokens behind one 120 s read timeout.
    p = plan_warmup(131_072, 32, 15_000.0, 120.0)
    assert p.concurrency == 1
    assert p.timeout_s == 120.0  # 3 × 8.7 s + 10 s is below the floor
    assert p.expected_s == pytest.approx(32 * 131_072 / 15_000.0)
    slow = plan_warmup(131_072, 32, 500.0, 120.0)  # a slow engine: each request may wait much longer
    assert slow.timeout_s == pytest.approx(TIMEOUT_MARGIN * 131_072 / 500.0 + 10.0)


def test_short_prompts_warm_many_at_once_but_never_more_than_n():
    assert plan_warmup(1024, 8, 20_000.0, 120.0).concurrency == 8
    assert plan_warmup(1024, 256, 20_000.0, 120.0).concurrency == WARM_TOKENS_IN_FLIGHT // 1024
    assert plan_warmup(1024, 256, None, 120.0, concurrency=4).concurrency == 4


def test_unknown_rate_keeps_the_idle_timeout():
    assert plan_warmup(8192, 4, None, 60.0).timeout_s == 60.0


def test_rates_by_nearest_context():
    r = PrefillRates()
    assert r.rate_for(4096) is None
    r.add(1024, 1024, 0.05)
    r.add(65_536, 65_536, 4.0)
    assert r.rate_for(2048) == pytest.approx(1024 / 0.05)
    assert r.rate_for(40_000) == pytest.approx(65_536 / 4.0)
