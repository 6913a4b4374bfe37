"""The nearest-rank percentile, the one Python definition (docs/metrics.md): the same rule as the store's
``nearest_rank()`` macro (views.sql), tested equal to it on the same inputs (tests/store/test_store_macros.py).

Used where the client computes a figure before it is stored (a load point's lag, TTFT and e2e quantiles).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["nearest_rank", "percentile"]


def nearest_rank(ranked: Sequence[float], q: float) -> float | None:
    """The value at rank ⌈q·n⌉ (at least 1) of ``ranked``, already in rank order; None for none.

    q·n is rounded to 6 decimals before the ceiling, as the SQL macro does, so float error cannot move the rank."""
    if not ranked:
        return None
    return ranked[max(1, math.ceil(round(q * len(ranked), 6))) - 1]


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank quantile ``q`` (0.99 for p99) of ``values`` in ascending order (None for no values)."""
    return nearest_rank(sorted(values), q)
