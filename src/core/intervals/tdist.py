"""The two-sided 95 % quantile of Student's t (no scipy: a table to 30 degrees of freedom, an expansion beyond)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["T_LEVEL", "Z95", "t_quantile", "mean_interval"]

T_LEVEL = 0.95  # every interval of this package is a 95 % one
Z95 = 1.959963984540054

# t_{0.975, df} for df = 1 … 30 (standard tables, 3 decimals).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def t_quantile(df: int) -> float:
    """t_{0.975} with ``df`` degrees of freedom (df ≥ 1); beyond 30 the Cornish–Fisher expansion (error < 1e-3)."""
    if df < 1:
        raise ValueError("t_quantile needs at least one degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(mean, lo, hi): the 95 % t interval of the mean of independent values; None under two values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half
