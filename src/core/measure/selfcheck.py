"""Did the client keep up? The client-bound verdict (definition: docs/metrics.md, "Client verdict").

A slow reader does two different things:

- it **stamps chunks late**. Latencies that hinge on single stamps (TTFT, the per-token gaps of the ITL
  histogram) are then blurred by the client's own clock. How late, at most, is bounded by the event
  loop's lag: a 10 ms sleeper's oversleep, sampled through the ramp and the window (``ClientMonitor``, core/stream/loop_lag.py);
  a read that became ready is stamped within about two loop turns. Within the bound below, such a latency
  column is *doubtful*: its number is kept and the cell says which column and why.
- it **falls behind**: tokens pile up in socket buffers, fewer arrive inside the window than the engine
  produced, requests' spans stretch, and the ends of finished requests are read late so the engine runs fewer
  than N. Any sign of it beyond :data:`BEHIND_SHARE` (a share of the window or of a request's span: the engine's
  own token counter, the stall at the window's edges, the stamp-lag bound) or :data:`GAP_SHARE` of N (the
  client's in-flight count against the engine's running count, ``batch.py``) makes the cell ``client_bound``
  with the reason. The rates are never left valid-but-doubtful.

Whether the engine held N running is the admission verdict's question (``admission.py``), judged from the
same once-a-second gauge reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.measure.admission import WAITING_SHARE
from infermatrix.core.measure.batch import WindowBatch
from infermatrix.core.measure.metrics import rate_stamps
from infermatrix.core.measure.steady import GaugeSample, in_window
from infermatrix.core.stream.loop_lag import TICK_S, ClientLoad
from infermatrix.core.stream.loop_lag import round_or_none as _r
from infermatrix.core.types import RequestRecord

__all__ = [
    "ClientVerdict", "client_verdict", "edge_lag_ms", "lag_at_ms", "ttft_stamp_lag_ms",
    "span_stamp_lag_share", "held_at_ms", "usual_lag_s", "settle_status", "edge_hold_ms", "edge_hold_bound_ms",
    "EDGE_HOLD_FLOOR_MS", "EDGE_HOLD_SHARE",
    "RATE_TOLERANCE", "TTFT_LAG_SHARE", "ITL_LAG_SHARE", "SPAN_LAG_SHARE", "BEHIND_SHARE", "GAP_SHARE",
]  # fmt: skip

RATE_TOLERANCE = 0.01  # the client may read at most 1 % fewer window tokens than the engine generated (plus chunks in flight)
# The client was behind by more than this share (of the window, of a request's span, of N) -> client_bound: the rates
# could be off by more than the 1 % the report promises. One share for every sign of it (docs/metrics.md, client verdict).
BEHIND_SHARE = 0.01
GAP_SHARE = 0.02  # the engine held, or the client kept, fewer than N by more than 2 % of N (at least one request): client_bound
TTFT_LAG_SHARE = 0.05  # ttft_ms is doubtful when the stamp-lag bound exceeds 5 % of the median TTFT
ITL_LAG_SHARE = 0.10  # the itl histogram is doubtful when it exceeds 10 % of the median TBT
SPAN_LAG_SHARE = BEHIND_SHARE  # per_request_tps / tbt_ms: client_bound when the stamp lag exceeds 1 % of the median in-window request span
RATE_CHECK_MAX_TOL = 0.05  # an engine count known less well than this (slow /metrics reads) is inconclusive
EDGE_S = 0.25  # ticks this close to a window edge tell how late the stamps there were
_TICK_S = TICK_S  # the loop monitor's tick (stream/loop_lag.py): the lag bounds below read its ticks
_SELECT_S = 0.001  # the selector waits in whole ms (epoll): a tick's due time is known to that
# A tick oversleeps this quantile of the ticks' lags with nothing held: the span rule charges stamps only beyond it.
# Calibrated against the sim's record (scripts/calibrate_verdict.py; docs/performance.md): of 24 cells of 16-64-token
# requests, idle-ish and loaded, the 8 whose rates were over 1 % off the server's bind with either; of the 16 within
# 1 %, the median (p50) bound 9, p90 3.
USUAL_LAG_QUANTILE = 0.9


def edge_lag_ms(ticks: list[tuple[float, float]], edges: tuple[float, ...], half_s: float = EDGE_S) -> float | None:
    """The longest loop lag of the ticks that ended within ``half_s`` of any of ``edges``, in ms."""
    near = [lag for t, lag in ticks if any(abs(t - e) <= half_s for e in edges)]
    return max(near) * 1000 if near else None


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


def held_at_ms(ticks: list[tuple[float, float]], t: float, usual_s: float) -> float:
    """How long a stall may have held a stamp taken at ``t``, in ms: the oversleep beyond ``usual_s`` of a tick
    that was due before ``t`` and woke no more than one tick after it. The loop could not run from the tick's due
    time (``end - lag``, known to the selector's 1 ms) to its wake-up, so a stamp taken then or just after waited;
    one taken before the due time was taken while the loop ran, and that stall did not hold it."""
    return 1000 * max((lag - usual_s for end, lag in ticks if lag > usual_s and end - lag - _SELECT_S <= t <= end + _TICK_S), default=0.0)


# A span timed by two stamps of an otherwise idle or quiet loop (a prefill probe's send and first token, a burst's end):
# a stall at either end lengthens it whole. Past max(EDGE_HOLD_FLOOR_MS, EDGE_HOLD_SHARE x the span) the span is the
# client's. The floor is above an idle loop's own oversleep of its 10 ms tick (the selector waits in whole ms: ~1.1 ms;
# measured idle, at most 1.2 ms on the sim and 1.8 ms on two real CPU engines: docs/metrics.md); the share is the rates' 1 %.
EDGE_HOLD_FLOOR_MS = 3.0
EDGE_HOLD_SHARE = BEHIND_SHARE


def edge_hold_ms(ticks: list[tuple[float, float]], start: float | None, end: float | None) -> float:
    """How long a stall of the loop may have lengthened a span from ``start`` to ``end``, in ms: the longest oversleep of
    a tick due within one tick after ``start`` (a stall there may hold the request's write: ``start`` is stamped by
    running code, so no usual lag cancels) or of one that held the read stamped ``end`` (:func:`held_at_ms`, whole).
    ``start`` None: the end alone (a burst, whose start is followed by its own sends: the loop's work, not a stall)."""
    at_start = 0.0 if start is None else max((lag for t, lag in ticks if t > start and t - lag <= start + _TICK_S), default=0.0)
    return max(at_start * 1000.0, held_at_ms(ticks, end, 0.0) if end is not None else 0.0)


def edge_hold_bound_ms(span_ms: float) -> float:
    """The longest hold a span of ``span_ms`` may carry and still be the engine's: max(EDGE_HOLD_FLOOR_MS, 1 % of it)."""
    return max(EDGE_HOLD_FLOOR_MS, EDGE_HOLD_SHARE * span_ms)


def usual_lag_s(ticks: list[tuple[float, float]]) -> float:
    """The loop's usual oversleep, in seconds: the :data:`USUAL_LAG_QUANTILE` of the ticks' (timer slack, the
    process's wake-up, the client's own callbacks). Every read waits for it alike, so it cancels within a span."""
    lags = sorted(lag for _, lag in ticks)
    return lags[min(len(lags) - 1, int(USUAL_LAG_QUANTILE * len(lags)))] if lags else 0.0


def ttft_stamp_lag_ms(records: list[RequestRecord], ws: float, we: float, ticks: list[tuple[float, float]]) -> float | None:
    """The largest lag held by the sent or first-token stamp of a request in the TTFT population, in ms
    (None when none of them was stamped while the loop was watched)."""
    if not ticks:
        return None
    t0, t1 = min(e - _TICK_S - lag for e, lag in ticks), max(e for e, _ in ticks)
    seen = [t for r in records if r.first_token is not None and r.sent <= we for t in (r.sent, r.first_token) if t0 <= t <= t1]
    return max((lag_at_ms(ticks, t) for t in seen), default=None)


def span_stamp_lag_share(records: list[RequestRecord], ws: float, we: float, ticks: list[tuple[float, float]]) -> float | None:
    """How far the token-weighted rate may be off from stalls that held the stamps it is timed by, as a share of
    the spans (None without spans; at most 1).

    A request's span runs between its two rate stamps (metrics.rate_stamps) and moves by the *difference* of their
    delays, so a lag every read waits for cancels: a stamp is charged only a stall that held it beyond the loop's
    usual oversleep (:func:`held_at_ms`, :func:`usual_lag_s`); a request the larger of its two stamps' charges (one
    delay moves the span by at most itself), and at most its span (a stall stretches the span it holds by no more
    than the span measured; one that held the first chunk makes a burst, and the rate starts at the burst's last
    chunk). docs/performance.md, "Client verdict calibration": every tick's whole lag at both ends, summed, read
    1-34 % on short requests whose rates were 0.1-1 % off the sim's record (issue 27)."""
    usual = usual_lag_s(ticks)
    late, total = 0.0, 0.0
    for r in records:
        stamps = rate_stamps(r, ws, we)
        if stamps is None:
            continue
        first, last = stamps
        total += last - first
        late += min(last - first, max(held_at_ms(ticks, first, usual), held_at_ms(ticks, last, usual)) / 1000)
    return late / total if total > 0 else None


def _states_more(note: str | None, pct: float) -> bool:
    """Whether a doubtful note already states a bound of at least ``pct`` %."""
    m = re.search(r"within ±([0-9.]+) %", note or "")
    return m is not None and float(m.group(1)) >= pct


def client_verdict(
    n: int, records: list[RequestRecord], window: tuple[float, float], *, window_load: ClientLoad, ramp_load: ClientLoad | None,
    engine: list[GaugeSample], ttft_ms: float | None, tbt_ms: float | None, ticks: list[tuple[float, float]] | None = None,
    batch: WindowBatch | None = None, client_active: float | None = None,
) -> ClientVerdict:
    """The verdict on one cell (pure: every input measured already; see docs/metrics.md). ``ticks`` are the
    loop-lag ticks ``(end, lag_s)`` of every client process; ``batch`` the engine's running count beside the
    client's in-flight count over the window (batch.py); ``client_active`` the client's time-weighted in-flight mean.

    The rates (``total_tps``, ``per_request_tps``, ``tbt_ms``) are never left *doubtful* on a valid cell: when any
    sign says the client was behind by more than :data:`BEHIND_SHARE` (of the window, of a request's span) or the
    engine held fewer than N by more than :data:`GAP_SHARE` because of it, the cell is ``client_bound`` with the
    reason. Only the latency columns (``ttft_ms``, ``itl``) are marked doubtful within that bound."""
    ws, we = window
    v = ClientVerdict(bound=False)
    d = v.detail
    d["window"] = window_load.as_dict()
    if ramp_load is not None:
        d["ramp"] = ramp_load.as_dict()
    _window_count(v, n, records, window, engine, ticks)
    lags = [x.lag_p99_ms for x in (window_load, ramp_load) if x is not None and x.lag_p99_ms is not None]
    bound_ms = 2 * max(lags) if lags else None  # the latency columns' bound: the first N requests are stamped in the ramp
    d["stamp_lag_bound_ms"] = _r(bound_ms)
    # The rates are stamped inside the window: only the window's own lag bounds them (the ramp's load is the ramp's).
    win_ms = 2 * window_load.lag_p99_ms if window_load.lag_p99_ms is not None else None
    d["window_lag_bound_ms"] = _r(win_ms)
    if win_ms is not None and we > ws and win_ms / 1000 > BEHIND_SHARE * (we - ws):
        _bind(v, f"client stamps up to {win_ms:.0f} ms late ({100 * win_ms / 1000 / (we - ws):.1f} % of the window)",
              100 * win_ms / 1000 / (we - ws))
    _spans(v, records, window, ticks, win_ms)
    _behind(v, n, batch, client_active)
    _latency(v, records, window, ticks, bound_ms, ttft_ms, tbt_ms)
    if v.bound:
        for col in RATE_COLUMNS:
            v.doubtful.setdefault(col, v.why[0])
    return v


RATE_COLUMNS = ("total_tps", "per_request_tps", "tbt_ms")


def _bind(v: ClientVerdict, why: str, within_pct: float | None = None, columns: tuple[str, ...] = RATE_COLUMNS) -> None:
    """The cell is client_bound for ``why``; the rate columns say how far off they may be, where that is known."""
    v.bound = True
    v.why.append(why)
    if within_pct is not None:
        for col in columns:
            if not _states_more(v.doubtful.get(col), within_pct):
                v.doubtful[col] = f"within ±{within_pct:.1f} %: {why}"


def _window_count(
    v: ClientVerdict, n: int, records: list[RequestRecord], window: tuple[float, float], engine: list[GaugeSample],
    ticks: list[tuple[float, float]] | None,
) -> None:
    """1. Miscounting the window. Stamps late by a lag that differs between the window's two edges move tokens
    across them (a steady lag moves as many in as out). The engine's own counter over the same stretch settles it
    where it is known well enough; else the lag at the edges bounds the error."""
    ws, we = window
    measured = we - ws
    d = v.detail
    # Reads that began inside the window (the end edge's read begins at its end: steady.EngineGauges.edge_read).
    counted = [s for s in engine if s.gauges.generated_tokens is not None and in_window(s, ws, we)]
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
                           "ratio": round(cli / eng, 5) if eng > 0 else None, "tolerance": round(tol, 5), "tight": round(tight, 5), "confirms": confirms,
                           "conclusive": eng > 0 and (confirms or tol <= RATE_CHECK_MAX_TOL)}  # fmt: skip
    check = d["rate_check"]
    if check is not None and check["confirms"]:
        return  # agreement as close as chunks in flight allow: the window count stands (tight <= tolerance: never apart)
    if check is not None and check["ratio"] is not None:
        ratio = check["ratio"]
        gap, side = 100 * abs(1 - ratio), "fewer" if ratio < 1 else "more"
        if abs(ratio - 1) > check["tolerance"]:
            # Apart by more than every uncertainty allows, conclusive or not: the window was miscounted.
            _bind(v, f"the client counted {gap:.1f} % {side} tokens in the window than the engine generated")
            return
        if check["conclusive"]:
            # Known well enough to judge by (tolerance <= RATE_CHECK_MAX_TOL), and apart by more than chunks in flight
            # allow: within the reads' timing the count may be right or off by the whole gap plus that timing, so the
            # rates cannot claim RATE_TOLERANCE. Until 2026-12-07 this was taken as agreement: a 256-stream cell stored
            # valid with its total 1.9 % under the sim's record, the engine's count 1.9 % over the client's, its
            # tolerance 3.0 %.
            timing = 100 * (check["tolerance"] - check["tight"])
            _bind(v, f"the client's window count is unsettled: {gap:.1f} % {side} tokens than the engine generated, "
                     f"beyond the {100 * check['tight']:.1f} % that chunks in flight allow, with the engine's reads timed to ±{timing:.1f} %",
                  gap + timing)  # fmt: skip
            return
    edge_lag = edge_lag_ms(ticks, (ws, we)) if ticks is not None else None
    if edge_lag is not None and measured > 0:
        # The tick that spans an edge overslept by as long as the client was stalled there: stamps that
        # late move at most that many seconds of tokens across the edge.
        d["edge_lag_ms"] = _r(edge_lag)
        share = edge_lag / 1000 / measured
        if share > BEHIND_SHARE:
            _bind(v, f"the client was stalled up to {edge_lag:.0f} ms at the window's edges ({100 * share:.1f} % of the window) "
                     "and no engine token count settles it", 100 * share)  # fmt: skip


def _spans(v: ClientVerdict, records: list[RequestRecord], window: tuple[float, float], ticks: list[tuple[float, float]] | None,
           bound_ms: float | None) -> None:  # fmt: skip
    """A request's rate is timed from its first to its last in-window chunk: late stamps there move per_request_tps
    (and tbt_ms, its inverse) by their lag over the span."""
    ws, we = window
    d = v.detail
    spans = sorted(ev[-1][0] - ev[0][0] for ev in ([e for e in r.events if ws <= e[0] <= we] for r in records) if len(ev) >= 2)
    span = spans[len(spans) // 2] if spans else None
    d["median_span_s"] = _r(span, 3)
    # The rate's own stamps: a stall that holds one request's first or last in-window chunk lengthens or
    # shortens its span by the stall, which the p99 of the window's ticks need not show (one stall, two requests).
    # Where the ticks are known this is the measure (the lags the stamps really had); else the window's p99 bound
    # over the median span, a coarser one (measured at 128 streams: p99 bound 1.1 % of the span, stamps' own 0.5 %,
    # the rate 0.12 % off the server's).
    span_share = span_stamp_lag_share(records, ws, we, ticks) if ticks else None
    d["span_lag_share"] = _r(span_share, 5)
    if span_share is None and bound_ms is not None and span and bound_ms / 1000 > SPAN_LAG_SHARE * span:
        share = 100 * bound_ms / 1000 / span
        _bind(v, f"client stamps up to {bound_ms:.1f} ms late over a median request span of {span * 1000:.0f} ms ({share:.1f} %)",
              share, ("per_request_tps", "tbt_ms"))
    if span_share is not None and span_share > SPAN_LAG_SHARE:
        _bind(v, f"client stamps held by stalls at the requests' first or last in-window chunks ({100 * span_share:.1f} % of their spans)",
              100 * span_share, ("per_request_tps", "tbt_ms"))


def _behind(v: ClientVerdict, n: int, batch: WindowBatch | None, client_active: float | None) -> None:
    """The engine can only run what the client sent and read: requests whose ends the client had not read yet
    (it still counted them; the engine no longer held them), or restarts sent late, leave the engine running
    fewer than N, and the numbers describe fewer. A share of N, at least one whole request."""
    floor = max(GAP_SHARE * n, 1.0)
    if batch is not None and batch.behind > floor:
        _bind(v, f"the client still counted {batch.client_in_flight_mean - batch.client_awaiting_first_mean:.1f} requests with a first token "
                 f"in flight while the engine held {batch.held_mean:.1f} (mean over {batch.reads} reads): it read their ends "
                 f"{batch.behind:.1f} requests late ({100 * batch.behind / n:.1f} % of {n})")  # fmt: skip
    if client_active is not None and n - client_active > floor:
        _bind(v, f"the client kept {client_active:.1f} of {n} requests in flight on average ({100 * (1 - client_active / n):.1f} % short): "
                 "it sent restarts late")  # fmt: skip


def _latency(
    v: ClientVerdict, records: list[RequestRecord], window: tuple[float, float], ticks: list[tuple[float, float]] | None,
    bound_ms: float | None, ttft_ms: float | None, tbt_ms: float | None,
) -> None:
    """2. Late stamps: latency columns that hinge on single stamps are marked doubtful, never blanked."""
    ws, we = window
    # A median of few TTFTs (N = 1: two or three) moves with one stall the p99 does not see: the stalls
    # that held the TTFT stamps themselves bound it (each TTFT is off by at most its stamps' lag).
    ttft_lag = ttft_stamp_lag_ms(records, ws, we, ticks) if ticks is not None else None
    ttft_bound = max((x for x in (bound_ms, ttft_lag) if x is not None), default=None)
    v.detail["ttft_lag_bound_ms"] = _r(ttft_bound)
    if ttft_bound is not None and ttft_ms and ttft_bound > TTFT_LAG_SHARE * ttft_ms:
        v.doubtful["ttft_ms"] = f"client stamps up to {ttft_bound:.1f} ms late (> {100 * TTFT_LAG_SHARE:g} % of the median TTFT {ttft_ms:.1f} ms)"
    if bound_ms is not None and tbt_ms and bound_ms > ITL_LAG_SHARE * tbt_ms:
        v.doubtful["itl"] = f"client stamps up to {bound_ms:.1f} ms late (> {100 * ITL_LAG_SHARE:g} % of the median TBT {tbt_ms:.2f} ms)"


def settle_status(status: str, reason: str | None, verdict: ClientVerdict, admission: dict[str, Any] | None) -> tuple[str, str | None]:
    """The cell's status once the client verdict is in. A client behind makes a ``valid`` cell ``client_bound``; it
    also takes an ``admission_limited`` cell whose engine held nothing back (no preemption, nothing waiting in most
    reads): an engine that ran fewer than N with nobody queued ran what a late client let it run (issue 17: the
    reader fell behind, its restarts came late, the engine never ran N). Preemptions and queues stay the engine's."""
    if not verdict.bound:
        return status, reason
    why = "; ".join(verdict.why)
    if status == "valid":
        return "client_bound", why
    if status == "client_bound":  # already the client's (admission: it kept fewer than N in flight): say both
        return status, "; ".join(x for x in (reason, why) if x)
    adm = admission or {}
    if status == "admission_limited" and not adm.get("preemptions") and (adm.get("waiting_share") or 0.0) < WAITING_SHARE:
        return "client_bound", f"{why}; so {reason}" if reason else why
    return status, reason
