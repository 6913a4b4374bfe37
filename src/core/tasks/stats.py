"""The statistics of a task pass (docs/metrics.md, "Task accuracy"): the 95 % interval of the mean output tokens
(Student t), Wilson's interval of an accuracy (the same formula as views.sql's ``wilson_score``, which the
``task_results`` view uses: tests/core/test_tasks.py checks they agree), the auto-stop rule, and the two tests
``compare`` uses — the exact McNemar test on paired tasks, and the two-proportion z test otherwise."""

from __future__ import annotations

import math
from dataclasses import dataclass

from infermatrix.core.intervals.tdist import Z95, mean_interval

__all__ = ["mean_interval", "wilson", "StopRule", "mcnemar_exact", "two_proportions", "TestResult", "SIGNIFICANCE"]

SIGNIFICANCE = 0.05  # a comparison's verdict is "different" below this p-value


def wilson(good: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's 95 % score interval of good / n, clipped to [0, 1]; None without a trial."""
    if n <= 0:
        return None
    p = good / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4.0 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


@dataclass(frozen=True)
class StopRule:
    """Stop sending tasks once the 95 % interval is narrower than ``below``: of the mean output tokens relative to
    the mean ((hi − lo) / mean), or of the accuracy in absolute terms (hi − lo); never before ``min_tasks``."""

    below: float
    on: str = "output_tokens"  # output_tokens | accuracy
    min_tasks: int = 20

    def width(self, output_tokens: list[int], correct: list[bool]) -> float | None:
        if self.on == "accuracy":
            w = wilson(sum(correct), len(correct))
            return None if w is None else w[1] - w[0]
        m = mean_interval([float(t) for t in output_tokens])
        return None if m is None or m[0] <= 0 else (m[2] - m[1]) / m[0]

    def met(self, output_tokens: list[int], correct: list[bool]) -> bool:
        if len(correct) < self.min_tasks:
            return False
        w = self.width(output_tokens, correct)
        return w is not None and w < self.below


@dataclass(frozen=True)
class TestResult:
    test: str  # "mcnemar-exact" | "two-proportion-z"
    p_value: float | None
    n: int  # tasks paired (McNemar) or the smaller side's count
    a_only: int | None = None  # McNemar: tasks right in A only
    b_only: int | None = None  # ... in B only


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs under Binomial(a_only + b_only, 1/2); 1 when none."""
    n, k = a_only + b_only, min(a_only, b_only)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2 * tail)


def two_proportions(good_a: int, n_a: int, good_b: int, n_b: int) -> float | None:
    """Two-sided p-value of the pooled two-proportion z test; None when a side has no task or the pool is all one."""
    if n_a <= 0 or n_b <= 0:
        return None
    pool = (good_a + good_b) / (n_a + n_b)
    if pool in (0.0, 1.0):
        return 1.0
    z = (good_a / n_a - good_b / n_b) / math.sqrt(pool * (1 - pool) * (1 / n_a + 1 / n_b))
    return math.erfc(abs(z) / math.sqrt(2))
