"""A number measured in K repeats of a cell: the mean with its interval across repeats, and whether the repeats
spread more than their own windows' intervals say (docs/metrics.md, *Intervals*, "Repeats").

The across-repeat interval is mean ± t_{K−1} × sd / √K: each repeat is one independent value of the whole
measurement (warm-up, ramp and window), so it holds the run-to-run noise (the machine's drift, the engine's state
between windows) that one window's batch means cannot see. Whether that noise is there is tested, not assumed:
with each repeat's window interval read as a normal error (se_i = half-width / 1.96), Cochran's
Q = Σ (x_i − x̄_w)² / se_i² (x̄_w the inverse-variance mean) is χ²_{K−1} when the windows' intervals are the whole
story; Q above its 95 % point says the windows understate the noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import math

from infermatrix.core.intervals.batches import Interval
from infermatrix.core.intervals.tdist import Z95, mean_interval

__all__ = ["RepeatInterval", "across_repeats", "chi2_quantile"]

# χ²_{0.95, df} for df = 1 … 10 (standard tables); Wilson–Hilferty beyond (error < 0.5 % there).
_CHI2_95 = (3.841, 5.991, 7.815, 9.488, 11.070, 12.592, 14.067, 15.507, 16.919, 18.307)


def chi2_quantile(df: int) -> float:
    """The 95 % point of χ² with ``df`` ≥ 1 degrees of freedom."""
    if df < 1:
        raise ValueError("chi2_quantile needs at least one degree of freedom")
    if df <= len(_CHI2_95):
        return _CHI2_95[df - 1]
    z = 1.6448536269514722  # one-sided 95 % normal point
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


@dataclass(frozen=True)
class RepeatInterval:
    """The mean of K repeats with its across-repeat interval, the spread, and the windows' view of the same mean."""

    interval: Interval  # value: the mean; lo / hi: mean ± t_{K−1} sd / √K; n: K
    sd: float  # the repeats' sample standard deviation: the run-to-run spread
    window_lo: float | None  # the mean ± the windows' own error (√Σ half_i² / K): what one window's interval predicts
    window_hi: float | None
    noisier: bool | None  # Cochran's Q beyond its 95 % point; None: a repeat had no two-sided window interval


def across_repeats(values: Sequence[float], windows: Sequence[Interval | None]) -> RepeatInterval | None:
    """``values`` one per repeat (K ≥ 2), ``windows`` each repeat's own window interval (None: it had none)."""
    k = len(values)
    if k < 2:
        return None
    mean, lo, hi = mean_interval(values) or (values[0], values[0], values[0])  # k ≥ 2 here: never the fallback
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    iv = Interval(mean, lo, hi, f"t across repeats, K={k}", k)
    ses = [_se(w) for w in windows]
    if len(ses) != k or any(s is None for s in ses):
        return RepeatInterval(iv, sd, None, None, None)
    se = [float(s) for s in ses if s is not None]
    window_half = Z95 * math.sqrt(sum(s * s for s in se)) / k
    if any(s <= 0 for s in se):  # a window that saw no variation: no test, though the spread speaks for itself
        return RepeatInterval(iv, sd, mean - window_half, mean + window_half, None)
    w = [1.0 / (s * s) for s in se]
    wmean = sum(wi * v for wi, v in zip(w, values)) / sum(w)
    q = sum(wi * (v - wmean) ** 2 for wi, v in zip(w, values))
    return RepeatInterval(iv, sd, mean - window_half, mean + window_half, q > chi2_quantile(k - 1))


def _se(w: Interval | None) -> float | None:
    if w is None or w.lo is None or w.hi is None:
        return None
    return (w.hi - w.lo) / (2 * Z95)
