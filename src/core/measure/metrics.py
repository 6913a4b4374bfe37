"""The one implementation of every decode-cell number (definitions: docs/metrics.md)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from infermatrix.core.types import RequestRecord

__all__ = ["WindowStats", "window_stats", "request_rate", "median_or_none"]


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def request_rate(record: RequestRecord, start: float, end: float) -> tuple[int, float] | None:
    """(tokens after the first in-window chunk, seconds from first to last in-window chunk), if ≥ 2 chunks.

    With one token per chunk this is (tokens − 1, t_last − t_first); with multi-token chunks the first
    chunk's tokens are left out, since they arrived at t_first and took no measured time.
    """
    inside = [(t, n) for t, n in record.events if start <= t <= end]
    if len(inside) < 2:
        return None
    span = inside[-1][0] - inside[0][0]
    tokens = sum(n for _, n in inside[1:])
    if span <= 0 or tokens <= 0:
        return None
    return tokens, span


@dataclass
class WindowStats:
    total_tps: float | None
    per_request_tps: float | None
    ttft_ms: float | None
    tbt_ms: float | None
    avg_active: float | None
    completed: int
    output_tokens: int
    measured_s: float
    tbt_values_s: list[float]
    ttft_values_s: list[float]
    e2e_values_s: list[float]
    itl_values_s: list[float]


def window_stats(records: list[RequestRecord], start: float, end: float) -> WindowStats:
    """Every cell number from the requests of one cell and its window [start, end] (monotonic s)."""
    measured = end - start
    output_tokens = sum(n for r in records for t, n in r.events if start <= t <= end)
    rates, tbts, itls = [], [], []
    for r in records:
        rt = request_rate(r, start, end)
        if rt is not None:
            tokens, span = rt
            rates.append(tokens / span)
            tbts.append(span / tokens)
        prev = None
        for t, n in r.events:
            if start <= t <= end and prev is not None:
                itls.append((t - prev) / n)  # per-token gap: a 2-token chunk after 10 ms is 5 ms a token
            prev = t
    # TTFT: every request of the cell whose first token came before the window closed — the first N
    # (sent after warm-up, their prompts cached) and the restarts inside the window. See docs/metrics.md.
    ttfts = [r.first_token - r.sent for r in records if r.first_token is not None and r.first_token <= end]
    e2es = [
        r.ended - r.sent
        for r in records
        if r.finish_reason is not None and r.outcome == "ok" and r.ended is not None and start <= r.ended <= end
    ]
    completed = len(e2es)
    active_s = 0.0
    for r in records:
        lo = max(r.sent, start)
        hi = min(r.ended if r.ended is not None else end, end)
        if hi > lo:
            active_s += hi - lo
    median_tbt = median_or_none(tbts)
    return WindowStats(
        total_tps=output_tokens / measured if measured > 0 else None,
        per_request_tps=median_or_none(rates),
        ttft_ms=None if not ttfts else statistics.median(ttfts) * 1000,
        tbt_ms=None if median_tbt is None else median_tbt * 1000,
        avg_active=active_s / measured if measured > 0 else None,
        completed=completed,
        output_tokens=output_tokens,
        measured_s=measured,
        tbt_values_s=tbts,
        ttft_values_s=ttfts,
        e2e_values_s=e2es,
        itl_values_s=itls,
    )
