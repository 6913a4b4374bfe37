"""The statistics of infermatrix.core.intervals (issue 30): pure functions checked against known answers."""

from __future__ import annotations

import math
import random

from infermatrix.core.intervals import Interval, batch_mean_interval, median_interval, quantile_interval, ratio_interval, t_quantile, verdict_of
from infermatrix.core.intervals.batches import lag1
from infermatrix.core.intervals.order_stats import binomial_cdf


def test_t_quantile_matches_the_table_and_the_normal_limit():
    assert t_quantile(1) == 12.706 and t_quantile(19) == 2.093
    assert abs(t_quantile(31) - 2.0395) < 1e-3 and abs(t_quantile(120) - 1.9799) < 1e-3


def test_batch_means_interval_of_iid_batches_covers_the_mean_in_about_95_percent():
    rng = random.Random(7)
    covered = sum(batch_mean_interval([rng.gauss(10, 2) for _ in range(20)]).contains(10) for _ in range(2000))  # type: ignore[union-attr]
    assert 1860 <= covered <= 1940  # 95 % ± 3.3 sd of a binomial(2000, 0.95)


def test_correlated_batches_are_merged_until_nearly_independent():
    rng = random.Random(3)
    x, values = 0.0, []
    for _ in range(20):
        x = 0.9 * x + rng.gauss(0, 1)  # an AR(1): neighbouring batches strongly alike
        values.append(10 + x)
    assert lag1(values) > 2 / 20**0.5
    iv = batch_mean_interval(values)
    assert iv is not None and iv.n < 20 and "B=" in iv.method


def test_ratio_interval_of_a_rate_over_spans_is_sum_over_sum():
    iv = ratio_interval([10, 12, 11, 9], [1.0, 1.1, 1.0, 0.9])
    assert iv is not None and abs(iv.value - 42 / 4.0) < 1e-12 and iv.lo < iv.value < iv.hi  # type: ignore[operator]


def test_order_statistic_interval_of_the_median_and_an_unbounded_p99():
    assert abs(binomial_cdf(10, 0.5)[4] - 386 / 1024) < 1e-12
    xs = list(range(1, 101))
    med = quantile_interval(xs, 0.5, 50.5)
    assert med is not None and (med.lo, med.hi) == (40, 61)  # ranks 40 and 61 of 100: the textbook pair
    p99 = quantile_interval(xs, 0.99, 99)
    assert p99 is not None and p99.hi is None and p99.lo is not None


def test_verdict_from_intervals_and_the_fixed_rule_without_them():
    base = Interval(100.0, 98.0, 102.0, "m", 20)
    assert verdict_of(base, Interval(101.0, 99.0, 103.0, "m", 20), True).verdict == "same"
    assert verdict_of(base, Interval(94.0, 92.0, 96.0, "m", 20), True).verdict == "slower"
    assert verdict_of(base, Interval(94.0, 92.0, 96.0, "m", 20), False).verdict == "faster"  # a latency 6 % lower
    fixed = verdict_of(100.0, 97.0, True)
    assert fixed.verdict == "slower" and fixed.method == "fixed 2 % rule" and fixed.lo is None


def test_median_interval_of_a_few_probes_is_t_on_logs_and_holds_every_value():
    one = median_interval([50.0], 50.0)
    assert (one.lo, one.hi, one.n) == (None, None, 1) and "too few" in one.method
    xs = [50.0, 52.0, 61.0]
    iv = median_interval(xs, 52.0)
    logs = [math.log(x) for x in xs]
    mean = sum(logs) / 3
    sd = (sum((v - mean) ** 2 for v in logs) / 2) ** 0.5
    assert abs(iv.hi - math.exp(mean + 4.303 * sd / 3**0.5)) < 1e-9 and "ln" in iv.method  # type: ignore[operator]
    for n in (2, 3, 4, 5):  # the point's median is always inside, however the values fall (median.py's docstring)
        rng = random.Random(n)
        for _ in range(500):
            vals = [rng.lognormvariate(0, 1) * (rng.random() < 0.3 and 9 or 1) for _ in range(n)]
            med = sorted(vals)[n // 2] if n % 2 else sum(sorted(vals)[n // 2 - 1 : n // 2 + 1]) / 2
            got = median_interval(vals, med)
            assert got.lo is not None and got.hi is not None and got.lo <= med <= got.hi, (vals, got)
    six = median_interval([5.0, 1.0, 3.0, 4.0, 2.0, 6.0], 3.5)
    assert (six.lo, six.hi, six.method) == (1.0, 6.0, "order statistics")  # [min, max] of 6 holds the median 96.9 %


def test_median_interval_of_three_log_normal_probes_covers_the_median_in_about_95_percent():
    rng = random.Random(11)
    covered = 0
    for _ in range(2000):
        xs = [rng.lognormvariate(4.0, 0.1) for _ in range(3)]  # true median e⁴
        covered += median_interval(xs, sorted(xs)[1]).contains(math.exp(4.0))
    assert 1860 <= covered <= 1940  # 95 % ± 3.3 sd of a binomial(2000, 0.95); [min, max] would cover 75 %
