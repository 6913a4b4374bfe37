"""The one implementation of every decode-cell number (definitions: docs/metrics.md)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from infermatrix.core.types import RequestRecord

__all__ = ["WindowStats", "TtftPopulation", "window_stats", "request_rate", "rate_stamps", "rate_chunks", "median_or_none", "ttft_populations", "ttfo_values"]


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# Chunks read within 1 ms of the request's first in-window chunk arrived together with it (one network
# read, or one burst after the client or the network stalled): the rate is measured from the last of them.
ARRIVAL_GROUP_S = 0.001


def request_rate(record: RequestRecord, start: float, end: float) -> tuple[int, float] | None:
    """(tokens after the first in-window arrival, seconds from it to the last in-window chunk), if any.

    With one token per chunk and one chunk per read this is (tokens − 1, t_last − t_first); with
    multi-token chunks the first chunk's tokens are left out, since they arrived at t_first and took no
    measured time — and so are those of chunks that arrived together with it (``ARRIVAL_GROUP_S``): a
    burst after a stall holds chunks the server emitted before the window, stamped as if inside it.
    """
    picked = rate_chunks(record, start, end)
    if picked is None:
        return None
    inside, first = picked
    span = inside[-1][0] - inside[first][0]
    tokens = sum(n for _, n in inside[first + 1 :])
    if span <= 0 or tokens <= 0:
        return None
    return tokens, span


def rate_stamps(record: RequestRecord, start: float, end: float) -> tuple[float, float] | None:
    """The two stamps :func:`request_rate` times a request by: (its first arrival's last chunk, its last in-window chunk)."""
    if request_rate(record, start, end) is None:
        return None
    inside, first = rate_chunks(record, start, end) or ([], 0)
    return inside[first][0], inside[-1][0]


def rate_chunks(record: RequestRecord, start: float, end: float) -> tuple[list[tuple[float, int]], int] | None:
    """The in-window chunks and the index of the first arrival's last chunk (None: nothing after it)."""
    inside = [(t, n) for t, n in record.events if start <= t <= end]
    first = 0
    while first + 1 < len(inside) and inside[first + 1][0] - inside[0][0] <= ARRIVAL_GROUP_S:
        first += 1
    return (inside, first) if len(inside) - first >= 2 else None


@dataclass
class TtftPopulation:
    """One TTFT population of a cell: its median (ms) and how many requests it holds."""

    median_ms: float | None
    count: int


def ttft_populations(records: list[RequestRecord], end: float) -> tuple[list[float], list[float], int]:
    """(burst TTFTs, restart TTFTs, requests without a first token), in seconds.

    *Burst*: each stream's opening request (``seq == 0``), sent together right after warm-up.
    *Restart*: every later request of a stream sent before the window closed; the cell waits (bounded)
    for their first tokens, so a restart whose first token lands after the window is not dropped.
    """
    burst: list[float] = []
    restart: list[float] = []
    missing = 0
    for r in records:
        if r.sent > end:
            continue
        if r.first_token is None:
            missing += r.outcome in ("ok", "cancelled")  # a failed request is counted as failed, not here
            continue
        (burst if r.seq == 0 else restart).append(r.first_token - r.sent)
    return burst, restart, missing


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
    ttfo_values_s: list[float] = field(default_factory=list)  # the TTFT population's requests with an answer token: TTFO (s)
    ttft_burst: TtftPopulation = field(default_factory=lambda: TtftPopulation(None, 0))
    ttft_restart: TtftPopulation = field(default_factory=lambda: TtftPopulation(None, 0))
    ttft_missing: int = 0  # sent before the window closed, no first token within the bounded wait


def window_stats(records: list[RequestRecord], start: float, end: float) -> WindowStats:
    """Every cell number from the requests of one cell and its window [start, end] (monotonic s)."""
    measured = end - start
    output_tokens = sum(n for r in records for t, n in r.events if start <= t <= end)
    rate_tokens, rate_span = 0, 0.0
    tbts, itls = [], []
    for r in records:
        rt = request_rate(r, start, end)
        if rt is not None:
            tokens, span = rt
            rate_tokens += tokens
            rate_span += span
            tbts.append(span / tokens)  # per-request mean gap: the tbt histogram's population
        prev = None
        for t, n in r.events:
            if start <= t <= end and prev is not None:
                itls.append((t - prev) / n)  # per-token gap: a 2-token chunk after 10 ms is 5 ms a token
            prev = t
    # Token-weighted over in-window spans: Σ tokens ÷ Σ spans. A fragment (a restart that got a few chunks
    # before the window closed) weighs by its span, not as much as a request that ran the whole window, so
    # with one stream this is the stream's decode rate (without the restart gaps and the first arrivals). docs/metrics.md.
    per_request = rate_tokens / rate_span if rate_span > 0 and rate_tokens > 0 else None
    burst, restart, missing = ttft_populations(records, end)
    ttfts = burst + restart
    done = [r for r in records if r.finish_reason is not None and r.outcome == "ok" and r.ended is not None and start <= r.ended <= end]
    # A staggered first request (measure/stagger.py) is a real, completed request, but its length is not the
    # workload's: its sent -> finished time stays out of the e2e histogram.
    e2es = [r.ended - r.sent for r in done if not r.staggered and r.ended is not None]
    active_s = 0.0
    for r in records:
        lo = max(r.opened if r.opened is not None else r.sent, start)  # in flight from the client's first step
        hi = min(r.ended if r.ended is not None else end, end)
        if hi > lo:
            active_s += hi - lo
    return WindowStats(
        total_tps=output_tokens / measured if measured > 0 else None,
        per_request_tps=per_request,
        ttft_ms=None if not ttfts else statistics.median(ttfts) * 1000,
        tbt_ms=None if per_request is None else 1000.0 / per_request,
        avg_active=active_s / measured if measured > 0 else None,
        completed=len(done),
        output_tokens=output_tokens,
        measured_s=measured,
        tbt_values_s=tbts,
        ttft_values_s=ttfts,
        e2e_values_s=e2es,
        itl_values_s=itls,
        ttfo_values_s=ttfo_values(records, end),
        ttft_burst=_population(burst),
        ttft_restart=_population(restart),
        ttft_missing=missing,
    )


def ttfo_values(records: list[RequestRecord], end: float) -> list[float]:
    """Time to the first answer token (s) of the requests the TTFT populations hold (sent before the window closed,
    with a first token) that got an answer token; equal to their TTFT where no reasoning came first (docs/metrics.md)."""
    return [r.first_content - r.sent for r in records if r.sent <= end and r.first_token is not None and r.first_content is not None]


def _population(values_s: list[float]) -> TtftPopulation:
    med = median_or_none(values_s)
    return TtftPopulation(None if med is None else med * 1000.0, len(values_s))
