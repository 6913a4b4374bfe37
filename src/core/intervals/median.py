"""The 95 % interval of a median of a few repeated measurements (a prefill point's cold probes).

A distribution-free interval for a median needs at least six values: [min, max] of n independent values covers the
median with probability 1 − 2 × 0.5ⁿ — 75 % at 3, 87.5 % at 4, 93.75 % at 5, 96.9 % at 6. So:

* n ≥ 6: order statistics (``quantile_interval``), at least 95 % whatever the distribution.
* 2 ≤ n ≤ 5: Student's t on the logarithms, exp(mean ln x ± t_{n−1} × sd(ln x) / √n). Exactly 95 % for the median
  if the values are independent and log-normal (positive, right-skewed, multiplicative noise: a latency's shape),
  where the median is exp(E ln x); an assumption, said in ``method``. It always holds the point's median: for
  n ≤ 4, t_{n−1} / √n ≥ (n − 1) / √n bounds every value's distance from the mean of n values in sample sds, and
  for n = 5 a median lies within one sd of the mean (t_4 / √5 = 1.24).
* n = 1 (or a value ≤ 0): no interval — lo and hi None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from infermatrix.core.intervals.batches import Interval
from infermatrix.core.intervals.order_stats import quantile_interval
from infermatrix.core.intervals.tdist import t_quantile

__all__ = ["median_interval", "MIN_DISTRIBUTION_FREE"]

MIN_DISTRIBUTION_FREE = 6  # the fewest values whose [min, max] covers the median in at least 95 % (96.9 %)


def median_interval(values: Sequence[float], value: float) -> Interval:
    """The interval of the median of ``values``; ``value`` is the point's own figure for it (their median)."""
    n = len(values)
    if n >= MIN_DISTRIBUTION_FREE:
        iv = quantile_interval(values, 0.5, value)
        assert iv is not None  # n > 0
        return iv
    if n < 2 or min(values) <= 0:
        return Interval(value, None, None, f"n={n}: too few values for an interval", n)
    logs = [math.log(v) for v in values]
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return Interval(value, math.exp(mean - half), math.exp(mean + half), f"t on ln values (log-normal assumed), n={n}", n)
