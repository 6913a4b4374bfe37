"""A burst point (``[[load]] kind = "burst"``; docs/load.md, "Bursts"): a fixed number of requests, at most
``concurrency`` in flight, timed from the first request sent to the last one's end — the batch-job question ("how
long do 1,000 requests take?") that the peers' request-count modes answer (docs/load.md compares them).

The requests go through the open-loop sender (core/load/openloop.py) with every offset 0 and the in-flight cap as
the concurrency: the cap's FIFO queue is the burst's backlog, and a request is due when its slot frees, so its TTFT
and e2e count from then (its wait for a slot is ``queue_ms``, not latency). Its tail — the last requests running
with fewer than ``concurrency`` in flight, nothing left to send — is measured, not hidden: the burst's throughput is
its whole duration's, and the rate before the tail is stored beside it (docs/metrics.md, "Bursts").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from infermatrix.core.config import BurstLoadConfig, RunConfig
from infermatrix.core.contexts import format_context
from infermatrix.core.load.openloop import SendPlan, percentile
from infermatrix.core.load.point_send import output_tokens, request_row, send_point
from infermatrix.core.load.stall import stall_bound_ms
from infermatrix.core.measure.selfcheck import edge_hold_bound_ms, edge_hold_ms, held_at_ms, usual_lag_s
from infermatrix.core.stream.client import encode_body
from infermatrix.core.stream.loop_lag import ClientMonitor
from infermatrix.core.types import RequestRecord

if TYPE_CHECKING:
    from infermatrix.core.load.context import RunContext

__all__ = ["is_burst", "burst_label", "burst_context", "measure_burst_point", "burst_point_rows", "burst_tail", "burst_stall"]


def is_burst(lc: Any) -> bool:
    return isinstance(lc, BurstLoadConfig)


def burst_context(cfg: RunConfig, lc: BurstLoadConfig) -> int:
    """The burst's prompt tokens: its own, else the first matrix context, else 1024 (as a rate point's)."""
    return lc.context or (cfg.matrix.contexts[0] if cfg.matrix.contexts else 1024)


def burst_label(cfg: RunConfig, lc: BurstLoadConfig) -> str:
    stop = " natural stop" if lc.natural_stop else ""
    return f"burst {lc.requests}@{lc.in_flight} {format_context(burst_context(cfg, lc))}{stop}"


async def measure_burst_point(rc: RunContext, index: int, lc: BurstLoadConfig, state: dict[str, Any]) -> None:
    """Prompts and bodies first (outside the timing), then every request released at once behind the cap; fills ``state``."""
    runner, phase = rc.runner, rc.steps.phase
    ctx = burst_context(rc.cfg, lc)
    state.update(offsets=[0.0] * lc.requests, records={}, ids={})
    phase("prompts")
    bodies = []
    for i in range(lc.requests):
        prompt = await rc.workload.prompt(ctx, f"burst{index}/r{i}", distinct=True)
        bodies.append(encode_body(runner._body(prompt, lc.max_output, ignore_eos=False if lc.natural_stop else None)))
    phase("measure")
    monitor = state["monitor"] = ClientMonitor()  # the client's own lag while it times the requests (burst_stall)
    async with anyio.create_task_group() as watch:
        watch.start_soon(monitor.sample)
        try:
            await send_point(runner, state, index, state["offsets"], bodies, lc.in_flight)
        finally:
            watch.cancel_scope.cancel()


def burst_stall(ticks: list[tuple[float, float]], requests: list[tuple[float, RequestRecord]]) -> str | None:
    """Why the burst's timing is the client's, not the engine's (None: it is the engine's): a stall of its event loop
    held a stamp a burst number is timed by — a request's first token longer than its TTFT allows, or its send or end
    longer than its e2e (from the moment its slot freed) allows (core/load/stall.py). A held end also frees the next slot
    late, so the burst's span and rates read long with it. A stamp's hold is the cell verdict's: the stall's oversleep
    beyond the loop's usual one (measure/selfcheck.py ``held_at_ms``). ``requests``: (when each was due, its record).
    Measured: beside a CPU burner in the same session, a client waited 442 ms on the run queue in mid-burst, read whole
    streams at their end, and its point was stored ``valid`` before this check (docs/performance.md)."""
    usual = usual_lag_s(ticks)
    if usual * 1000 > (floor := stall_bound_ms(0.0)):
        # A loop this late all along is behind everywhere: a hold is counted beyond the usual lag (which cancels in a
        # span), and when the usual lag is itself long nothing would be charged. Seen beside a CPU burner: slots freed
        # 144-169 ms after the requests that held them ended, streams read whole at their end, and no single hold.
        return (f"the client's event loop stalled {usual * 1000:.0f} ms or more in one tick of ten through the burst "
                f"(bound {floor:.0f} ms): every stamp may read that much late")  # fmt: skip
    for due, rec in requests:
        if rec.outcome != "ok" or rec.first_token is None or rec.ended is None:
            continue
        e2e = (rec.ended - min(due, rec.sent)) * 1000
        for stamp, what, which, latency in ((rec.sent, "send", "e2e", e2e), (rec.first_token, "first token", "TTFT", (rec.first_token - rec.sent) * 1000),
                                            (rec.ended, "end", "e2e", e2e)):  # fmt: skip
            held = held_at_ms(ticks, stamp, usual)
            if held > (bound := stall_bound_ms(latency)):
                effect = "its TTFT" if which == "TTFT" else "its e2e and the burst's span"
                return (f"the client's event loop stalled {held:.0f} ms, holding request {rec.stream_index}'s {what} ({which} "
                        f"{latency:.0f} ms; bound {bound:.0f} ms): {effect} may read that much long")  # fmt: skip
    return _span_end_held(ticks, [rec for _, rec in requests])


def _span_end_held(ticks: list[tuple[float, float]], records: list[RequestRecord]) -> str | None:
    """The span's end: the burst's rates are its requests and tokens over its span, so a stall that held the last
    end's read lengthens the span whole and every rate with it. Judged as a prefill probe's edges are
    (measure/selfcheck.py ``edge_hold_ms``): past max(3 ms, 1 % of the span). Only the end: the span's start is
    followed by the burst's own sends, the loop's work and the burst's time. Seen in a full suite on two loaded cores:
    a sim burst of 82 ms read 10.8 ms long and stored valid under the per-request 25 ms floor."""
    tail = burst_tail(records)  # the span the burst stores: from its first request's send to its last end
    if not tail:
        return None
    last = next(r for r in records if r.written and r.ended == tail["last_end"])
    span_ms = tail["duration_s"] * 1000
    held, bound = edge_hold_ms(ticks, None, tail["last_end"]), edge_hold_bound_ms(span_ms)
    if held <= bound:
        return None
    return (f"the client's event loop stalled {held:.1f} ms, holding the burst's last end (request {last.stream_index}; span "
            f"{span_ms:.0f} ms, bound {bound:.1f} ms): its span and rates may read that much long")  # fmt: skip


def burst_tail(records: list[RequestRecord]) -> dict[str, Any]:
    """The burst's span and its tail from the requests that were written: from the first request's send (``sent``:
    stamped as it is handed to a connected socket, just before its first byte is written) to the last end, when the
    tail began (the first request end after the last request was sent: from then on fewer than ``concurrency`` are in
    flight and none waits), and the request and token rates before it.

    Why ``sent``, not the moment the request was begun (``opened``, before connecting; the span's start from
    2026-12-06 to 12-07): the span is the engine's time, and no request is in the engine before its first byte is
    written. Between ``opened`` and ``sent`` lie the connect and the client's own dispatch of the burst's other
    requests, which its loop runs meanwhile: 1-39 ms for the first request on two loaded cores (60-190 ms sim
    bursts), and a CI run stored a 170 ms burst 12.8 ms longer than the sim's record of it, ``valid``. A stamp taken
    before the write can only be early, by the write and its loopback delivery, so the span still holds the server's
    whole. (``sent`` was stamped after the write until 2026-12-06: a client descheduled in between stamped late while
    the server was already working, and a burst read up to 31 ms (4 %) shorter than a real engine's log of it.) Each
    request's connect stays in its own e2e, which counts from its due time (docs/metrics.md, "Bursts")."""
    written = [r for r in records if r.written]
    ends = [r.ended for r in written if r.ended is not None]
    if not written or not ends:
        return {}
    first, last_sent, last = min(r.sent for r in written), max(r.sent for r in written), max(ends)
    tail_start = min((e for e in ends if e >= last_sent), default=last)
    before = tail_start - first
    done_before = sum(1 for r in written if r.outcome == "ok" and r.ended is not None and r.ended <= tail_start)
    tokens_before = sum(n for r in written for t, n in r.events if t <= tail_start)
    return {
        "first_sent": first, "last_end": last, "duration_s": last - first, "tail_start": tail_start, "tail_s": last - tail_start,
        "steady_request_rate": done_before / before if before > 0 else None,
        "steady_output_tps": tokens_before / before if before > 0 else None,
    }  # fmt: skip


def burst_point_rows(
    rc: RunContext, index: int, lc: BurstLoadConfig, state: dict[str, Any], status: str | None, reason: str | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The point's ``points`` row (with its ``bursts`` row under ``"burst"``) and its request rows; ``status`` None:
    ``valid`` when every request ended ok and the client kept up (:func:`burst_stall`), else ``error`` with the first
    failure or ``client_bound`` with the stall."""
    plan: SendPlan | None = state.get("plan")
    records: dict[int, RequestRecord] = state.get("records", {})
    ids: dict[int, str] = state.get("ids", {})
    reqs, recs, timed = [], [], []
    for s in plan.sent if plan is not None else []:
        rec = records.get(s.index)
        if rec is None:
            continue
        recs.append(rec)
        timed.append((rec.sent if s.released is None else s.released, rec))
        reqs.append(request_row(s, rec, ids.get(s.index), due=s.released))  # due when its slot freed: the wait is queue_ms
    ok = [r for r in reqs if r["outcome"] == "ok"]
    tail = burst_tail(recs)
    duration, out_tokens = tail.get("duration_s"), sum(output_tokens(r) for r in recs)
    lags = [r["lag_ms"] for r in reqs if r["lag_ms"] is not None and r["sent"] is not None]

    def q(col: str, p: float) -> float | None:
        return percentile([r[col] for r in ok if r[col] is not None], p)

    row: dict[str, Any] = {
        "point": index, "label": burst_label(rc.cfg, lc), "arrival": "burst", "requested_rate": None, "duration_s": duration,
        "context_tokens": burst_context(rc.cfg, lc), "max_output": lc.max_output, "max_in_flight": lc.in_flight, "seed": None,
        "scheduled": lc.requests, "scheduled_rate": None, "sent": sum(1 for r in reqs if r["sent"] is not None),
        "achieved_rate": len(ok) / duration if duration else None, "lag_p50_ms": percentile(lags, 0.5), "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": max(lags, default=None), "queued": max(0, len(reqs) - lc.in_flight), "max_queue": plan.max_queue if plan else 0,
        "completed": len(ok), "failed": len(reqs) - len(ok), "output_tokens": out_tokens,
        "output_tps": out_tokens / duration if duration else None, "origin": tail.get("first_sent"),
        "ttft_p50_ms": q("ttft_ms", 0.5), "ttft_p99_ms": q("ttft_ms", 0.99), "ttft_sent_p50_ms": q("ttft_sent_ms", 0.5),
        "ttft_sent_p99_ms": q("ttft_sent_ms", 0.99), "e2e_p50_ms": q("e2e_ms", 0.5), "e2e_p99_ms": q("e2e_ms", 0.99),
        "burst": {**tail, "requests": lc.requests, "concurrency": lc.in_flight, "natural_stop": lc.natural_stop,
                  "ttfo_p50_ms": q("ttfo_ms", 0.5), "ttfo_p99_ms": q("ttfo_ms", 0.99)},
    }  # fmt: skip
    if status is None:
        status, reason = "valid", None
        if not reqs:
            status, reason = "error", "no request was sent"
        elif len(ok) < len(reqs):
            first = next((r["error"] or r["outcome"] for r in reqs if r["outcome"] != "ok"), "")
            status, reason = "error", f"{len(reqs) - len(ok)} of {len(reqs)} requests failed (first: {first})"
        elif (monitor := state.get("monitor")) is not None and (stall := burst_stall(monitor.ticks, timed)):
            status, reason = "client_bound", stall
    row.update(status=status, reason=reason)
    return row, reqs
