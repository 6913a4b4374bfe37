"""Batch means over a window's sub-windows: the interval of a rate measured in a closed loop.

A closed loop's token stream is autocorrelated (a slow step delays every stream, a restart gap empties a slot
for a while), so single chunks are not independent samples. The window is cut into ``BATCHES`` equal
sub-windows and the rate is taken in each; batch means of sub-windows long against the correlation are nearly
independent. That is checked, not assumed: while the lag-1 autocorrelation of the batch means is above
``2 / √B`` (significant at about 5 % for B independent values), adjacent batches are merged in pairs (each twice
as long), down to ``MIN_BATCHES``. The interval is mean ± t_{B−1} × sd / √B over the final B batches.

A count has a resolution, and batch means alone do not see it: tokens arrive in whole engine steps, so where every
sub-window happens to hold the same number of steps (a steady engine whose step divides the sub-window) the batch
values do not vary at all and sd is 0 — yet the window's edges cut a step at an unknown phase, so its total is known
only to about a step's tokens at each edge. ``count_sd`` (the caller's: the standard deviation of Σ nums from that
resolution alone) is a floor under the standard error of the sum: se = max(batch-means se, count_sd ÷ Σ dens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from infermatrix.core.intervals.tdist import t_quantile

__all__ = ["BATCHES", "MIN_BATCHES", "Interval", "batch_mean_interval", "ratio_interval", "lag1"]

BATCHES = 20  # sub-windows a cell's window is cut into at first
MIN_BATCHES = 5  # merging stops here: fewer batches would make t_{B-1} (2.78 at 4 df) the interval's whole story


@dataclass(frozen=True)
class Interval:
    """A number with its 95 % interval. ``lo`` / ``hi`` None: that side has no bound from this much data."""

    value: float
    lo: float | None
    hi: float | None
    method: str  # how the interval was made, in words a report can print (e.g. "batch means, B=20, lag1=0.05")
    n: int  # the independent units it rests on: batches, or sample values for an order statistic

    def inverted(self, scale: float = 1.0) -> Interval:
        """``scale / x`` of a positive number: its interval's ends swap (a rate's interval to a time's)."""
        return Interval(scale / self.value, None if self.hi is None else scale / self.hi, None if self.lo is None else scale / self.lo,
                        self.method, self.n)  # fmt: skip

    def contains(self, x: float) -> bool:
        return (self.lo is None or self.lo <= x) and (self.hi is None or x <= self.hi)


def lag1(values: Sequence[float]) -> float:
    """The lag-1 autocorrelation of ``values`` (0 when they do not vary)."""
    n = len(values)
    mean = sum(values) / n
    dev = [v - mean for v in values]
    denom = sum(d * d for d in dev)
    return 0.0 if denom <= 0 else sum(a * b for a, b in zip(dev, dev[1:])) / denom


def _merged(nums: list[float], dens: list[float]) -> tuple[list[float], list[float]]:
    """Adjacent batches summed in pairs (an odd last one joins the pair before it)."""
    k = len(nums) // 2
    n2 = [nums[2 * i] + nums[2 * i + 1] for i in range(k)]
    d2 = [dens[2 * i] + dens[2 * i + 1] for i in range(k)]
    if len(nums) % 2:
        n2[-1] += nums[-1]
        d2[-1] += dens[-1]
    return n2, d2


def ratio_interval(nums: Sequence[float], dens: Sequence[float], count_sd: float = 0.0) -> Interval | None:
    """Σ nums ÷ Σ dens with its batch interval; batch b holds (nums[b], dens[b]) (tokens, seconds).

    The estimate is a ratio of sums, so its standard error is the ratio estimator's (delta method):
    sd(nums_b − R dens_b) / (√B × mean dens_b). With equal dens (a rate over equal sub-windows) this is the
    plain batch-means interval of the sub-windows' rates. ``count_sd``: the resolution floor of the module's
    docstring (the method then says so where it binds). None without two batches or with no time.
    """
    ns, ds = [float(x) for x in nums], [float(x) for x in dens]
    if len(ns) < 2 or sum(ds) <= 0:
        return None
    value = sum(ns) / sum(ds)
    while True:
        resid = [a - value * b for a, b in zip(ns, ds)]
        r1 = lag1(resid)
        if r1 <= 2 / math.sqrt(len(ns)) or len(ns) // 2 < MIN_BATCHES:
            break
        ns, ds = _merged(ns, ds)
    b = len(ns)
    mean_d = sum(ds) / b
    if mean_d <= 0:
        return None
    mean_r = sum(resid) / b
    sd = math.sqrt(sum((e - mean_r) ** 2 for e in resid) / (b - 1))
    se, floor = sd / (math.sqrt(b) * mean_d), count_sd / sum(ds)
    method = f"batch means, B={b}, lag1={r1:.2f}" + (", count resolution floor" if floor > se else "")
    half = t_quantile(b - 1) * max(se, floor)
    return Interval(value, value - half, value + half, method, b)


def batch_mean_interval(values: Sequence[float]) -> Interval | None:
    """The mean of equal-weight batch values with its batch-means interval (merging as above)."""
    return ratio_interval(values, [1.0] * len(values))
