"""Distribution-free intervals of a percentile: order statistics of the sorted sample.

For the q-quantile ξ of n independent values, the number of values below ξ is Binomial(n, q), so
P(X_(l) ≤ ξ ≤ X_(u)) = P(l ≤ K ≤ u − 1). The ranks are the widest-inside equal tails: l − 1 the largest k with
P(K ≤ k) ≤ 2.5 %, u the smallest with P(K ≥ u) ≤ 2.5 % — coverage at least 95 %, whatever the distribution. Where
no such rank exists (p99 of fewer than ~300 values has no upper one) that side is None: the data do not bound it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from infermatrix.core.intervals.batches import Interval

__all__ = ["quantile_interval", "binomial_cdf"]

_TAIL = 0.025


def binomial_cdf(n: int, q: float) -> list[float]:
    """P(K ≤ k) for k = 0 … n, K ~ Binomial(n, q), summed in log space (no overflow at large n)."""
    if q <= 0 or q >= 1:
        return [1.0 if (q <= 0 or k == n) else 0.0 for k in range(n + 1)]
    lq, lp = math.log(q), math.log1p(-q)
    out, acc = [], 0.0
    for k in range(n + 1):
        acc += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * lp)
        out.append(min(acc, 1.0))
    return out


def quantile_interval(values: Sequence[float], q: float, value: float) -> Interval | None:
    """The interval of the q-quantile (0.5, 0.99) of ``values``; ``value`` is the cell's own figure for it."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None
    cdf = binomial_cdf(n, q)
    low_k = max((k for k in range(n + 1) if cdf[k] <= _TAIL), default=None)  # l - 1
    high_u = min((u for u in range(1, n + 1) if 1.0 - cdf[u - 1] <= _TAIL), default=None)
    lo = None if low_k is None or low_k + 1 > n else xs[low_k]  # rank l = low_k + 1, 0-based index low_k
    hi = None if high_u is None else xs[high_u - 1]
    return Interval(value, lo, hi, "order statistics", n)
