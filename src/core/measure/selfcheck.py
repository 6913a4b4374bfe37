"""Did the client keep up? The client-bound verdict (definition: docs/metrics.md, "Client verdict").

A slow reader does two different things, judged separately:

- it **stamps chunks late**. Latencies that hinge on single stamps (TTFT, the per-token gaps of the ITL
  histogram) are then blurred by the client's own clock. How late, at most, is bounded by the event
  loop's lag: a 10 ms sleeper's oversleep, sampled through the ramp and the window (:class:`ClientMonitor`);
  a read that became ready is stamped within about two loop turns. Such a column is *doubtful*: its
  number is kept and the cell says which column and why.
- it **falls behind**: tokens pile up in socket buffers and fewer arrive inside the window than the engine
  produced. Only this makes the throughput wrong, and only this makes a cell ``client_bound``. Judged by
  the engine's own generated-tokens counter over the window where the engine has one (usage totals are
  exact however slow the reader), else bounded by the longest loop stall relative to the window.

Whether the engine held N running is the admission verdict's question (``admission.py``), judged from the
same once-a-second gauge reads.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import psutil

from infermatrix.core.measure.steady import GaugeSample
from infermatrix.core.types import RequestRecord

__all__ = [
    "ClientMonitor", "ClientLoad", "ClientVerdict", "client_verdict", "worst", "edge_lag_ms", "lag_at_ms", "ttft_stamp_lag_ms",
    "span_stamp_lag_share",
    "RATE_TOLERANCE", "STALL_LIMIT", "EDGE_BOUND_LIMIT", "TTFT_LAG_SHARE", "ITL_LAG_SHARE", "SPAN_LAG_SHARE",
]  # fmt: skip

RATE_TOLERANCE = 0.01  # the client may read at most 1 % fewer window tokens than the engine generated (plus chunks in flight)
STALL_LIMIT = 0.01  # without a conclusive engine count: edge stalls above 1 % of the window mark the rates doubtful ...
EDGE_BOUND_LIMIT = 0.05  # ... and above 5 % make the cell client_bound
TTFT_LAG_SHARE = 0.05  # ttft_ms is doubtful when the stamp-lag bound exceeds 5 % of the median TTFT
ITL_LAG_SHARE = 0.10  # the itl histogram is doubtful when it exceeds 10 % of the median TBT
SPAN_LAG_SHARE = 0.01  # per_request_tps / tbt_ms are doubtful when it exceeds 1 % of the median in-window request span
RATE_CHECK_MAX_TOL = 0.05  # an engine count known less well than this (slow /metrics reads) is inconclusive
EDGE_S = 0.25  # ticks this close to a window edge tell how late the stamps there were
_TICK_S = 0.01


@dataclass
class ClientLoad:
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    cpu_pct: float | None  # mean CPU of this process over the period, % of one core
    samples: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"lag_p50_ms": _r(self.lag_p50_ms), "lag_p99_ms": _r(self.lag_p99_ms), "lag_max_ms": _r(self.lag_max_ms),
                "cpu_pct": _r(self.cpu_pct, 1), "samples": self.samples}  # fmt: skip


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(v, nd)


class ClientMonitor:
    """Run ``sample()`` in a task for the length of a period (ramp, window), then read ``result()``."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.ticks: list[tuple[float, float]] = []  # (when the tick ended, its oversleep), for the lag at the window's edges
        self.proc = psutil.Process()
        self.cpu_start: float | None = None
        self.t_start: float | None = None
        self.t_end: float | None = None
        self.cpu_end: float | None = None

    def _cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    async def sample(self) -> None:
        self.t_start, self.cpu_start = time.monotonic(), self._cpu()
        try:
            while True:
                t0 = time.monotonic()
                await anyio.sleep(_TICK_S)
                t1 = time.monotonic()
                lag = max(0.0, t1 - t0 - _TICK_S)
                self.lags.append(lag)
                self.ticks.append((t1, lag))
        finally:
            self.t_end, self.cpu_end = time.monotonic(), self._cpu()

    def result(self) -> ClientLoad:
        if not self.lags or self.t_start is None or self.t_end is None or self.cpu_start is None or self.cpu_end is None:
            return ClientLoad(None, None, None, None)
        lags = sorted(self.lags)
        elapsed = self.t_end - self.t_start
        cpu = 100.0 * (self.cpu_end - self.cpu_start) / elapsed if elapsed > 0 else None
        return ClientLoad(lag_p50_ms=lags[len(lags) // 2] * 1000, lag_p99_ms=lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000,
                          lag_max_ms=lags[-1] * 1000, cpu_pct=cpu, samples=len(lags))  # fmt: skip


def edge_lag_ms(ticks: list[tuple[float, float]], edges: tuple[float, ...], half_s: float = EDGE_S) -> float | None:
    """The longest loop lag of the ticks that ended within ``half_s`` of any of ``edges``, in ms."""
    near = [lag for t, lag in ticks if any(abs(t - e) <= half_s for e in edges)]
    return max(near) * 1000 if near else None


def worst(loads: list[ClientLoad]) -> ClientLoad:
    """The worst of several processes' readings (the parent's and its workers'), field by field."""

    def top(vals: list[float | None]) -> float | None:
        known = [v for v in vals if v is not None]
        return max(known) if known else None

    return ClientLoad(top([x.lag_p50_ms for x in loads]), top([x.lag_p99_ms for x in loads]), top([x.lag_max_ms for x in loads]),
                      top([x.cpu_pct for x in loads]), sum(x.samples for x in loads))  # fmt: skip


@dataclass
class ClientVerdict:
    bound: bool  # the throughput itself is doubtful: status client_bound
    why: list[str] = field(default_factory=list)
    doubtful: dict[str, str] = field(default_factory=dict)  # column -> why its number is doubtful (kept, marked)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"client_bound": self.bound, "why": self.why, "doubtful": self.doubtful, **self.detail}


def _tokens_between(records: list[RequestRecord], a: float, b: float) -> int:
    return sum(n for r in records for t, n in r.events if a <= t <= b)


def lag_at_ms(ticks: list[tuple[float, float]], t: float) -> float:
    """The loop lag a stamp taken at ``t`` may carry, in ms: the oversleep of any tick that spans ``t``
    (a tick ending at ``end`` with lag ``lag`` slept from ``end - _TICK_S - lag``; a stamp right after a
    stall may run just before the tick's own wake-up)."""
    return 1000 * max((lag for end, lag in ticks if end - _TICK_S - lag <= t <= end + _TICK_S), default=0.0)


def ttft_stamp_lag_ms(records: list[RequestRecord], ws: float, we: float, ticks: list[tuple[float, float]]) -> float | None:
    """The largest lag held by the sent or first-token stamp of a request in the TTFT population, in ms
    (None when none of them was stamped while the loop was watched)."""
    if not ticks:
        return None
    t0, t1 = min(e - _TICK_S - lag for e, lag in ticks), max(e for e, _ in ticks)
    seen = [t for r in records if r.first_token is not None and r.sent <= we for t in (r.sent, r.first_token) if t0 <= t <= t1]
    return max((lag_at_ms(ticks, t) for t in seen), default=None)


def span_stamp_lag_share(records: list[RequestRecord], ws: float, we: float, ticks: list[tuple[float, float]]) -> float | None:
    """Σ over requests of the lag at their first and last in-window stamps ÷ Σ of their spans: how far the
    token-weighted rate can be off from stalls at the stamps it is timed by (None without spans)."""
    late, total = 0.0, 0.0
    for r in records:
        inside = [t for t, _ in r.events if ws <= t <= we]
        if len(inside) >= 2 and inside[-1] > inside[0]:
            total += inside[-1] - inside[0]
            late += (lag_at_ms(ticks, inside[0]) + lag_at_ms(ticks, inside[-1])) / 1000
    return late / total if total > 0 else None


def _states_more(note: str | None, pct: float) -> bool:
    """Whether a doubtful note already states a bound of at least ``pct`` %."""
    m = re.search(r"within ±([0-9.]+) %", note or "")
    return m is not None and float(m.group(1)) >= pct


def client_verdict(
    n: int, records: list[RequestRecord], window: tuple[float, float], *, window_load: ClientLoad, ramp_load: ClientLoad | None,
    engine: list[GaugeSample], ttft_ms: float | None, tbt_ms: float | None, ticks: list[tuple[float, float]] | None = None,
) -> ClientVerdict:
    """The verdict on one cell (pure: every input measured already; see docs/metrics.md). ``ticks`` are the
    loop-lag ticks ``(end, lag_s)`` of every client process."""
    ws, we = window
    edge_lag = edge_lag_ms(ticks, (ws, we)) if ticks is not None else None
    measured = we - ws
    v = ClientVerdict(bound=False)
    d = v.detail
    d["window"] = window_load.as_dict()
    if ramp_load is not None:
        d["ramp"] = ramp_load.as_dict()
    # 1. Miscounting the window. Stamps late by a lag that differs between the window's two edges move
    # tokens across them (a steady lag moves as many in as out). The engine's own counter over the same
    # stretch settles it where it is known well enough; else the lag at the edges bounds the error.
    counted = [s for s in engine if s.gauges.generated_tokens is not None and ws <= s.t <= we]
    d["engine_reads"] = len(counted)
    d["rate_check"] = None
    if len(counted) >= 2 and counted[-1].t - counted[0].t >= 0.5 * measured:
        a, b = counted[0], counted[-1]
        eng = float(b.gauges.generated_tokens or 0) - float(a.gauges.generated_tokens or 0)
        cli = _tokens_between(records, a.t, b.t)
        chunk = max((k for r in records for _, k in r.events), default=1)
        # Read times are known to ± half a read; the client's own stamps near them are late by up to its lag
        # there; chunks in flight at either end are counted by one side only.
        rate = eng / (b.t - a.t) if b.t > a.t else 0.0
        read_lag_s = (edge_lag_ms(ticks, (a.t, b.t)) or 0.0) / 1000 if ticks is not None else 0.0
        slack = n * chunk + ((a.took_s + b.took_s) / 2 + read_lag_s) * rate
        tol = RATE_TOLERANCE + (slack / eng if eng > 0 else 0.0)
        # Two independent counts that agree as closely as chunks in flight allow confirm the count, however
        # uncertain the read times were: the timing errors would have to cancel exactly.
        tight = RATE_TOLERANCE + (n * chunk / eng if eng > 0 else 0.0)
        confirms = eng > 0 and abs(cli / eng - 1) <= tight
        d["rate_check"] = {"engine_tokens": eng, "client_tokens": cli, "seconds": round(b.t - a.t, 3),
                           "ratio": round(cli / eng, 5) if eng > 0 else None, "tolerance": round(tol, 5), "confirms": confirms,
                           "conclusive": eng > 0 and (confirms or tol <= RATE_CHECK_MAX_TOL)}  # fmt: skip
    check = d["rate_check"]
    if check is not None and check["ratio"] is not None and abs(check["ratio"] - 1) > check["tolerance"]:
        # Apart by more than every uncertainty allows, conclusive or not: the window was miscounted.
        ratio = check["ratio"]
        v.bound = True
        side = "fewer" if ratio < 1 else "more"
        v.why.append(f"the client counted {100 * abs(1 - ratio):.1f} % {side} tokens in the window than the engine generated")
    elif check is not None and check["conclusive"]:
        pass  # agreement within a tolerance tight enough to settle the window count
    elif edge_lag is not None and measured > 0:
        # The tick that spans an edge overslept by as long as the client was stalled there: stamps that
        # late move at most that many seconds of tokens across the edge.
        d["edge_lag_ms"] = _r(edge_lag)
        share = edge_lag / 1000 / measured
        if share > EDGE_BOUND_LIMIT:
            v.bound = True
            v.why.append(f"the client was stalled up to {edge_lag:.0f} ms at the window's edges ({100 * share:.1f} % of the window) "
                         "and no engine token count settles it")
        elif share > STALL_LIMIT:
            for col in ("total_tps", "per_request_tps", "tbt_ms"):
                v.doubtful[col] = f"within ±{100 * share:.1f} %: the client was stalled up to {edge_lag:.0f} ms at the window's edges"
    # 2. Late stamps: latency columns that hinge on single stamps.
    lags = [x.lag_p99_ms for x in (window_load, ramp_load) if x is not None and x.lag_p99_ms is not None]
    bound_ms = 2 * max(lags) if lags else None
    d["stamp_lag_bound_ms"] = _r(bound_ms)
    # A median of few TTFTs (N = 1: two or three) moves with one stall the p99 does not see: the stalls
    # that held the TTFT stamps themselves bound it (each TTFT is off by at most its stamps' lag).
    ttft_lag = ttft_stamp_lag_ms(records, ws, we, ticks) if ticks is not None else None
    ttft_bound = max((x for x in (bound_ms, ttft_lag) if x is not None), default=None)
    d["ttft_lag_bound_ms"] = _r(ttft_bound)
    if ttft_bound is not None and ttft_ms and ttft_bound > TTFT_LAG_SHARE * ttft_ms:
        v.doubtful["ttft_ms"] = f"client stamps up to {ttft_bound:.1f} ms late (> {100 * TTFT_LAG_SHARE:g} % of the median TTFT {ttft_ms:.1f} ms)"
    if bound_ms is not None:
        if tbt_ms and bound_ms > ITL_LAG_SHARE * tbt_ms:
            v.doubtful["itl"] = f"client stamps up to {bound_ms:.1f} ms late (> {100 * ITL_LAG_SHARE:g} % of the median TBT {tbt_ms:.2f} ms)"
        # A request's rate is timed from its first to its last in-window chunk: short spans feel late stamps.
        spans = sorted(ev[-1][0] - ev[0][0] for ev in ([e for e in r.events if ws <= e[0] <= we] for r in records) if len(ev) >= 2)
        span = spans[len(spans) // 2] if spans else None
        d["median_span_s"] = _r(span, 3)
        if span and bound_ms / 1000 > SPAN_LAG_SHARE * span:
            for col in ("per_request_tps", "tbt_ms"):
                v.doubtful.setdefault(col, f"within ±{100 * bound_ms / 1000 / span:.1f} %: client stamps up to {bound_ms:.1f} ms late "
                                           f"over a median request span of {span * 1000:.0f} ms")
    # The rate's own stamps: a stall that holds one request's first or last in-window chunk lengthens or
    # shortens its span by the stall, which the p99 of the window's ticks need not show (one stall, two requests).
    span_share = span_stamp_lag_share(records, ws, we, ticks) if ticks is not None else None
    d["span_lag_share"] = _r(span_share, 5)
    if span_share is not None and span_share > SPAN_LAG_SHARE:
        for col in ("per_request_tps", "tbt_ms"):
            if not _states_more(v.doubtful.get(col), 100 * span_share):
                v.doubtful[col] = f"within ±{100 * span_share:.1f} %: client stamps held by stalls at the requests' first or last in-window chunks"
    if v.bound:
        for col in ("total_tps", "per_request_tps", "tbt_ms"):
            v.doubtful.setdefault(col, v.why[0])
    return v
