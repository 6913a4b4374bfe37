"""The 95 % interval of every cell number, from the cell's own request records (docs/metrics.md, *Intervals*).

Computed here, at measure time, because the rates' intervals need each chunk's time, which the store does not
keep (requests hold sent / first token / ended / tokens only): the window is cut into equal sub-windows, each
one's tokens (total tok/s) and tokens and time between chunks (per-request tok/s, after each request's first
arrival, exactly as ``metrics.request_rate`` counts them) are taken, and the statistics of
``infermatrix.core.intervals`` turn them into intervals. Each figure's value is the cell's own number.

Total tok/s is a count, and a count has a resolution: the window's edges cut an engine step at an unknown phase,
so its tokens are known to about one step's tokens at each edge, however steady the engine (docs/metrics.md,
*Intervals*). That is the floor under its interval (``ratio_interval``'s ``count_sd``).
"""

from __future__ import annotations

from infermatrix.core.intervals import Interval, quantile_interval, ratio_interval
from infermatrix.core.intervals.batches import BATCHES
import math

from infermatrix.core.measure.metrics import WindowStats, rate_chunks
from infermatrix.core.quantiles import percentile
from infermatrix.core.types import RequestRecord

__all__ = ["cell_intervals", "INTERVAL_METRICS"]

# metric name (cell_intervals.metric) -> higher is better (rates) or worse (latencies)
INTERVAL_METRICS = {"total_tps": True, "per_request_tps": True, "tbt_ms": False, "ttft_ms": False, "ttft_p99_ms": False, "tbt_p99_ms": False}


def _batch(t: float, start: float, width: float) -> int:
    return min(BATCHES - 1, max(0, int((t - start) / width)))


def _sub_windows(records: list[RequestRecord], start: float, end: float) -> tuple[list[float], list[float], list[float], int]:
    """Per sub-window: all in-window tokens, the rate tokens, and the time between the rate's chunks; and how many
    such gaps between chunks there were."""
    width = (end - start) / BATCHES
    total, rate_tokens, rate_s = [0.0] * BATCHES, [0.0] * BATCHES, [0.0] * BATCHES
    gaps = 0
    for r in records:
        for t, n in r.events:
            if start <= t <= end:
                total[_batch(t, start, width)] += n
        picked = rate_chunks(r, start, end)
        if picked is None:
            continue
        inside, first = picked
        for (t0, _), (t1, n1) in zip(inside[first:], inside[first + 1 :]):
            b = _batch(t1, start, width)
            rate_tokens[b] += n1
            rate_s[b] += t1 - t0
            gaps += 1
    return total, rate_tokens, rate_s, gaps


def count_resolution_sd(tokens: float, window_s: float, gap_s: float, gaps: int) -> float:
    """The standard deviation of a window's token count from its resolution alone.

    One step delivers q tokens across the streams — the window's tokens × a stream's mean time between chunks
    ÷ the window (at least one token: a count is whole) — and each of the window's two edges falls at a uniform
    phase of a step: variance q² / 12 each, so sd = q / √6. The client's stamps (``time.monotonic``, 1 ns) add
    nothing beside a step."""
    q = tokens * (gap_s / gaps) / window_s if gaps and window_s > 0 else 0.0
    return max(q, 1.0) / math.sqrt(6.0)


def cell_intervals(records: list[RequestRecord], start: float, end: float, stats: WindowStats) -> dict[str, Interval]:
    """metric -> the cell number with its interval; a metric without one (no number, too little data) is left out."""
    out: dict[str, Interval] = {}
    if end > start and stats.total_tps is not None:
        total, rate_tokens, rate_s, gaps = _sub_windows(records, start, end)
        width = (end - start) / BATCHES
        tps = ratio_interval(total, [width] * BATCHES, count_sd=count_resolution_sd(sum(total), end - start, sum(rate_s), gaps))
        if tps is not None:
            out["total_tps"] = tps
        per_request = ratio_interval(rate_tokens, rate_s) if stats.per_request_tps is not None else None
        if per_request is not None:
            out["per_request_tps"] = per_request
            if per_request.lo is not None and per_request.lo > 0:
                out["tbt_ms"] = per_request.inverted(1000.0)
    ttfts_ms = [v * 1000.0 for v in stats.ttft_values_s]
    tbts_ms = [v * 1000.0 for v in stats.tbt_values_s]
    for name, values, q, value in (
        ("ttft_ms", ttfts_ms, 0.5, stats.ttft_ms),
        ("ttft_p99_ms", ttfts_ms, 0.99, percentile(ttfts_ms, 0.99)),
        ("tbt_p99_ms", tbts_ms, 0.99, percentile(tbts_ms, 0.99)),
    ):
        iv = quantile_interval(values, q, value) if value is not None else None
        if iv is not None:
            out[name] = iv
    return out
