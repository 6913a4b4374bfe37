"""Open-loop arrival schedules and the check that a client delivered the schedule it promised.

An open-loop point sends requests at times drawn ahead of the run, not when a previous request ends.
Three processes (docs/load.md):

* ``poisson`` — exponential gaps with mean 1/R;
* ``gamma:K`` — gamma(K, 1/(R·K)) gaps: mean 1/R, coefficient of variation 1/√K (K < 1 is burstier
  than Poisson, K = 1 *is* Poisson, K > 1 smoother);
* ``constant`` — every 1/R seconds.

Peers print the requested rate and trust it. Here the delivered send times are judged: achieved rate,
schedule lag (actual − scheduled send), and a Kolmogorov–Smirnov test of the delivered gaps against the
requested gap distribution (fully specified: R and K are given, not fitted, so the plain one-sample KS
distribution applies). Pure functions, no I/O: the runner stamps the sends, this module only judges.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

from infermatrix.core.arrival_spec import Arrival

from infermatrix.core.quantiles import nearest_rank

__all__ = [
    "schedule",
    "gap_cdf",
    "ks_test",
    "ScheduleCheck",
    "check_schedule",
    "regularized_gamma_p",
]

# A KS p-value below this rejects "the delivered gaps follow the requested process" (docs/load.md).
KS_ALPHA = 0.01


def _gap_sampler(arrival: Arrival, rate: float, rng: random.Random) -> Callable[[], float]:
    if arrival.kind == "constant":
        return lambda: 1.0 / rate
    if arrival.kind == "poisson":
        return lambda: rng.expovariate(rate)
    k = arrival.shape
    return lambda: rng.gammavariate(k, 1.0 / (rate * k))


def schedule(arrival: Arrival, rate: float, duration_s: float, seed: int) -> list[float]:
    """Send offsets (seconds from the point's start) in (0, duration_s], drawn from ``seed``.

    The first request goes at its first drawn gap, not at 0: a stationary process has no arrival pinned
    to the start, and a constant process then sends at 1/R, 2/R, …, duration (R·duration requests in all,
    the last one at the end: with a half-open [0, duration) it would be one short whenever R·duration is whole).
    """
    if rate <= 0 or duration_s <= 0:
        raise ValueError(f"rate and duration must be positive (got rate {rate}, duration {duration_s})")
    rng = random.Random(seed)
    gap = _gap_sampler(arrival, rate, rng)
    out: list[float] = []
    t = gap()
    while t <= duration_s * (1 + 1e-12):  # a whole number of constant gaps lands on the end despite rounding
        out.append(t)
        t += gap()
    return out


def regularized_gamma_p(a: float, x: float) -> float:
    """P(a, x) = γ(a, x) / Γ(a), the gamma distribution's CDF at x for shape a and scale 1.

    Series for x < a + 1, Lentz's continued fraction for Q = 1 − P otherwise (both converge fast there).
    """
    if x <= 0:
        return 0.0
    log_prefix = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_prefix) * h)


def gap_cdf(arrival: Arrival, rate: float) -> Callable[[float], float]:
    """The CDF of the gap between consecutive requested arrivals."""
    if arrival.kind == "constant":
        return lambda x: 1.0 if x >= 1.0 / rate else 0.0
    if arrival.kind == "poisson":
        return lambda x: 1.0 - math.exp(-rate * x) if x > 0 else 0.0
    k = arrival.shape
    return lambda x: regularized_gamma_p(k, x * rate * k)


def _kolmogorov_q(lam: float) -> float:
    """P(K > λ) for the Kolmogorov distribution: 2 Σ (−1)^(j−1) exp(−2 j² λ²)."""
    if lam < 0.2:
        return 1.0
    total = 0.0
    for j in range(1, 101):
        term = math.exp(-2 * j * j * lam * lam)
        total += term if j % 2 else -term
        if term < 1e-12:
            break
    return max(0.0, min(1.0, 2 * total))


def ks_test(samples: list[float], cdf: Callable[[float], float]) -> tuple[float, float]:
    """(D, p): the one-sample Kolmogorov–Smirnov statistic and its p-value (Stephens' small-n form)."""
    n = len(samples)
    if n == 0:
        raise ValueError("KS test of no samples")
    xs = sorted(samples)
    d = 0.0
    for i, x in enumerate(xs):
        f = cdf(x)
        d = max(d, (i + 1) / n - f, f - i / n)
    root = math.sqrt(n)
    return d, _kolmogorov_q((root + 0.12 + 0.11 / root) * d)


@dataclass(frozen=True)
class ScheduleCheck:
    """What a point delivered against what it promised (columns of a load point; docs/load.md)."""

    requested_rate: float
    achieved_rate: float
    sent: int
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    ks_d: float | None  # None for constant arrivals (their gaps are judged by the lag alone)
    ks_p: float | None
    fit_rejected: bool


def check_schedule(
    arrival: Arrival, rate: float, duration_s: float, scheduled: list[float], actual: list[float]
) -> ScheduleCheck:
    """Judge delivered send times (``actual``, same clock and origin as ``scheduled``) against the plan.

    The achieved rate counts the requests actually sent over the point's duration. The fit tests the
    gaps between consecutive *actual* sends against the requested gap distribution; it needs ≥ 2 sends.
    """
    if len(scheduled) != len(actual):
        raise ValueError(f"{len(scheduled)} scheduled sends but {len(actual)} actual ones")
    lags = sorted(max(0.0, a - s) * 1000 for s, a in zip(scheduled, actual))
    ks_d = ks_p = None
    rejected = False
    if arrival.kind != "constant" and len(actual) >= 3:
        ordered = sorted(actual)
        gaps = [b - a for a, b in zip(ordered, ordered[1:])]
        ks_d, ks_p = ks_test(gaps, gap_cdf(arrival, rate))
        rejected = ks_p < KS_ALPHA
    return ScheduleCheck(
        requested_rate=rate,
        achieved_rate=len(actual) / duration_s,
        sent=len(actual),
        lag_p50_ms=nearest_rank(lags, 0.5) or 0.0,  # nearest rank, as the store's nearest_rank() (0 for no sends)
        lag_p99_ms=nearest_rank(lags, 0.99) or 0.0,
        lag_max_ms=lags[-1] if lags else 0.0,
        ks_d=ks_d,
        ks_p=ks_p,
        fit_rejected=rejected,
    )
