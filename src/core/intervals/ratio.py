"""The ratio of two cells' numbers with its 95 % interval, and what it says: same, faster or slower.

Delta method on the log scale: each side's standard error of ln x is read off its own interval,
(ln hi − ln lo) / (2 × 1.96), and the two add in quadrature (the cells are independent runs), so
ln(new / base) ± 1.96 × √(se_base² + se_new²). Near 1 this is Fieller's interval to first order; it needs
both ends of both intervals (a p99 of too few values has no upper bound: no interval, the fixed rule decides).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infermatrix.core.intervals.batches import Interval
from infermatrix.core.intervals.tdist import Z95

__all__ = ["Verdict", "ratio_of", "verdict_of", "SAME_WITHIN"]

SAME_WITHIN = 0.02  # the fixed rule where a side has no interval: a ratio within ±2 % is the same


@dataclass(frozen=True)
class Verdict:
    """new ÷ base, its interval (None: a side had none), and the word: same, faster or slower."""

    ratio: float
    lo: float | None
    hi: float | None
    verdict: str
    method: str  # "intervals" or "fixed 2 % rule"


def _log_se(iv: Interval) -> float | None:
    if iv.lo is None or iv.hi is None or iv.lo <= 0 or iv.hi <= 0 or iv.value <= 0:
        return None
    return (math.log(iv.hi) - math.log(iv.lo)) / (2 * Z95)


def ratio_of(base: Interval | float, new: Interval | float) -> tuple[float, float | None, float | None]:
    """(new / base, lo, hi); lo / hi None unless both are Intervals with both ends."""
    bv = base.value if isinstance(base, Interval) else base
    nv = new.value if isinstance(new, Interval) else new
    ratio = nv / bv
    if not (isinstance(base, Interval) and isinstance(new, Interval)):
        return ratio, None, None
    sb, sn = _log_se(base), _log_se(new)
    if sb is None or sn is None:
        return ratio, None, None
    half = Z95 * math.hypot(sb, sn)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)


def verdict_of(base: Interval | float, new: Interval | float, higher_is_better: bool) -> Verdict:
    """The comparison of one number: from the ratio's interval, else by the fixed ±2 % rule."""
    ratio, lo, hi = ratio_of(base, new)
    if lo is None or hi is None:
        lo_s, hi_s, method = 1 - SAME_WITHIN, 1 + SAME_WITHIN, "fixed 2 % rule"
        above, below = ratio > hi_s, ratio < lo_s
    else:
        method = "intervals"
        above, below = lo > 1, hi < 1
    better = above if higher_is_better else below
    worse = below if higher_is_better else above
    return Verdict(ratio, lo, hi, "faster" if better else ("slower" if worse else "same"), method)
