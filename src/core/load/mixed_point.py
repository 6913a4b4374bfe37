"""An interference point (``[[load]] kind = "mixed"``; docs/load.md, "Interference"): how much running decodes stall
when long prompts arrive — the number a chunked-prefill budget is tuned by.

First a prefill of the point's context is sent alone (a prompt of its own, so no prefix-cache hit): its TTFT is the
baseline. Then ``decode_streams`` long decodes start; after every one has its first token and ``warmup_s`` more, the
alone window (``window_s``) records their token gaps with no prompt in the engine; then the prefills are sent (one
at a time, or at a rate), each a distinct prompt. A decoder's gap *during* a prefill is one that overlaps a prefill's
time in the engine (its send to its first token). The decodes are closed when the last prefill has ended. The
figures come from the client's stream timestamps only (docs/metrics.md, "Interference").
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio

from infermatrix.core.config import MixedLoadConfig, RunConfig
from infermatrix.core.contexts import format_context
from infermatrix.core.load.openloop import Sent, percentile
from infermatrix.core.load.point_send import output_tokens, request_row
from infermatrix.core.load.stall import stalled
from infermatrix.core.stream.client import encode_body, stream_request
from infermatrix.core.stream.loop_lag import ClientMonitor
from infermatrix.core.types import Capacity, RequestRecord

if TYPE_CHECKING:
    from infermatrix.core.load.context import RunContext

__all__ = ["is_mixed", "mixed_label", "mixed_decode_context", "mixed_fit_reason", "measure_mixed_point", "mixed_point_rows",
           "interference_stats", "token_gaps", "client_stall"]  # fmt: skip

POLL_S = 0.01  # how often the point looks whether every decode stream has its first token


def is_mixed(lc: Any) -> bool:
    return isinstance(lc, MixedLoadConfig)


def mixed_decode_context(cfg: RunConfig, lc: MixedLoadConfig) -> int:
    """The decode streams' prompt tokens: their own, else the first matrix context, else 1024 (as a rate point's)."""
    return lc.decode_context or (cfg.matrix.contexts[0] if cfg.matrix.contexts else 1024)


def mixed_label(cfg: RunConfig, lc: MixedLoadConfig) -> str:
    how = f" at {lc.prefill_rate:g}/s" if lc.prefill_rate is not None else ""
    return f"mixed {lc.decode_streams}@{format_context(mixed_decode_context(cfg, lc))} + {lc.prefills}×{format_context(lc.prefill_context or 0)}{how}"


def mixed_fit_reason(cfg: RunConfig, lc: MixedLoadConfig, capacity: Capacity, max_model_len: int | None) -> str | None:
    """Why the point cannot run on this server (None: it fits): a request longer than ``max_model_len``, more streams
    than the server runs at once, or more KV than it holds (``MixedLoadConfig.kv_need``)."""
    dctx, pctx = mixed_decode_context(cfg, lc), lc.prefill_context or 0
    if max_model_len is not None:
        for what, ctx, out in (("decode", dctx, lc.decode_tokens(dctx, max_model_len)), ("prefill", pctx, lc.prefill_max_output)):
            if ctx + out > max_model_len:
                return f"a {what} request ({format_context(ctx)} + {out:,} output tokens) exceeds max_model_len {max_model_len:,}"
    at_once = lc.decode_streams + (lc.prefills if lc.prefill_rate is not None else 1)
    if capacity.max_seqs is not None and at_once > capacity.max_seqs:
        return f"{at_once} requests at once exceed the server's max sequences {capacity.max_seqs}"
    need = lc.kv_need(dctx, max_model_len)
    if capacity.kv_tokens is not None and need > capacity.kv_tokens:
        return f"the streams need {need:,} KV tokens, the server holds {capacity.kv_tokens:,} ({capacity.source})"
    return None


async def measure_mixed_point(rc: RunContext, index: int, lc: MixedLoadConfig, state: dict[str, Any]) -> None:
    """The alone prefill, then the decodes, their warm-up and alone window, then the prefills; fills ``state``."""
    runner, phase = rc.runner, rc.steps.phase
    state.update(decoders={}, prefills={}, alone=None, window=None)
    over = mixed_fit_reason(rc.cfg, lc, rc.capacity, rc.max_model_len)
    if over is not None:
        state["over"] = over
        return
    phase("prompts")
    dctx, pctx = mixed_decode_context(rc.cfg, lc), lc.prefill_context or 0

    async def body(ctx: int, key: str, max_output: int) -> bytes:
        return encode_body(runner._body(await rc.workload.prompt(ctx, f"mixed{index}/{key}", distinct=True), max_output))

    decode_out = lc.decode_tokens(dctx, rc.max_model_len)
    decode_bodies = [await body(dctx, f"d{i}", decode_out) for i in range(lc.decode_streams)]
    prefill_bodies = [await body(pctx, f"p{i}", lc.prefill_max_output) for i in range(lc.prefills)]
    alone_body = await body(pctx, "alone", lc.prefill_max_output)
    count_path = runner._count_path()

    async def send(rec: RequestRecord, content: bytes, rid: str) -> None:
        await stream_request(runner.streams, runner.url, content, rec, headers=runner._headers(f"{runner.id_prefix}-mixed-{index}-{rid}"),
                             on_tokens=runner.on_tokens, count_path=count_path)  # fmt: skip

    monitor = state["monitor"] = ClientMonitor()  # the client's own lag while it times the prompts (client_stall)
    try:
        async with anyio.create_task_group() as watch:
            watch.start_soon(monitor.sample)
            phase("alone prefill")
            state["alone"] = RequestRecord(stream_index=-1, seq=0, sent=time.monotonic())
            await send(state["alone"], alone_body, "alone")
            phase("measure")
            async with anyio.create_task_group() as tg:
                for i, content in enumerate(decode_bodies):
                    rec = state["decoders"][i] = RequestRecord(stream_index=i, seq=0, sent=time.monotonic())
                    tg.start_soon(send, rec, content, f"d{i}")
                await _decoders_running(state["decoders"])
                await anyio.sleep(lc.warmup_s)
                w0 = time.monotonic()
                await anyio.sleep(lc.window_s)
                state["window"] = (w0, time.monotonic())
                await _send_prefills(lc, prefill_bodies, state["prefills"], send)
                tg.cancel_scope.cancel()  # the decodes have served their purpose: closed (the server aborts them)
            watch.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await runner._close_streams()


async def _decoders_running(decoders: dict[int, RequestRecord]) -> None:
    """Until every decode stream has its first token; a stream that ends before (an error) ends the wait too."""
    while not all(r.first_token is not None or r.ended is not None for r in decoders.values()):
        await anyio.sleep(POLL_S)


async def _send_prefills(lc: MixedLoadConfig, bodies: list[bytes], out: dict[int, RequestRecord], send: Any) -> None:
    """One at a time (each ``gap_s`` after the previous one ended), or at ``prefill_rate`` per second (constant spacing)."""

    async def one(i: int) -> None:
        rec = out[i] = RequestRecord(stream_index=i, seq=0, sent=time.monotonic())
        await send(rec, bodies[i], f"p{i}")

    if lc.prefill_rate is None:
        for i in range(len(bodies)):
            await one(i)
            await anyio.sleep(lc.gap_s)
        return
    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i in range(len(bodies)):
            await anyio.sleep(max(0.0, start + i / lc.prefill_rate - time.monotonic()))
            tg.start_soon(one, i)


def token_gaps(rec: RequestRecord) -> list[tuple[float, float, int]]:
    """A stream's gaps: (previous arrival, this arrival, the tokens this arrival brought) for each arrival after its
    first. An arrival is one read: chunks read together share their stamp (a client that falls a little behind reads
    several at once), so they are one arrival with their tokens summed, not gaps of 0 ms beside one of twice the step
    (on a real engine at load 4 those zeros made a decoder's median gap read 0.00 ms)."""
    arrivals: list[list[float]] = []
    for t, n in rec.events:
        if arrivals and arrivals[-1][0] == t:
            arrivals[-1][1] += n
        else:
            arrivals.append([t, n])
    return [(a[0], b[0], int(b[1])) for a, b in zip(arrivals, arrivals[1:])]


def interference_stats(
    decoders: list[RequestRecord], prefills: list[tuple[float, float]], window: tuple[float, float] | None,
) -> dict[str, Any]:
    """The decoders' gaps inside the alone ``window`` and those overlapping a prefill's (send, first token) interval,
    as docs/metrics.md ("Interference") defines the figures; ms. The TBT figures are per token (an arrival's gap shared
    by the tokens it brought, each counted: as a cell's ``tbt_ms``); the stall is an arrival's whole gap, the time a
    decoder got nothing."""
    alone: list[float] = []
    during: list[float] = []
    stall: float | None = None
    for rec in decoders:
        for a, b, n in token_gaps(rec):
            tokens = max(n, 1)
            per_token = [(b - a) * 1000 / tokens] * tokens
            if window is not None and window[0] <= a and b <= window[1]:
                alone += per_token
            elif any(b > s and a < f for s, f in prefills):
                during += per_token
                stall = max(stall or 0.0, (b - a) * 1000)
    return {
        "tbt_alone_ms": percentile(alone, 0.5), "tbt_alone_p99_ms": percentile(alone, 0.99), "alone_gaps": len(alone),
        "tbt_during_ms": percentile(during, 0.5), "tbt_p99_during_ms": percentile(during, 0.99),
        "stall_max_ms": stall, "during_gaps": len(during),
    }  # fmt: skip


def _ttft_ms(rec: RequestRecord | None) -> float | None:
    return None if rec is None or rec.first_token is None or rec.outcome != "ok" else (rec.first_token - rec.sent) * 1000


def client_stall(ticks: list[tuple[float, float]], prompts: list[RequestRecord]) -> str | None:
    """Why the point's timing is the client's, not the engine's (None: it is the engine's). While a prompt is in the
    engine (send → first token) the client's event loop must not stall longer than that prompt's TTFT allows
    (core/load/stall.py): a loop that stalls L ms reads every chunk that arrived meanwhile L ms late, so the prompt's
    TTFT and the decoders' gaps around it (the stall) may read up to L ms long. ``ticks``: the monitor's (tick end,
    oversleep) pairs (core/stream/loop_lag.py). Measured: a real-engine point beside a full test suite on two cores
    read a 1,319 ms stall for a 205 ms prompt evaluation (the client had read nothing for 1.2 s)."""
    for rec in prompts:
        if rec.first_token is None:
            continue
        found = stalled(ticks, rec.sent, rec.first_token)
        if found:
            lag_ms, ttft_ms, bound = found
            which = "the alone prompt" if rec.stream_index < 0 else f"prompt {rec.stream_index}"
            return (f"the client's event loop stalled {lag_ms:.0f} ms while {which} was in the engine (TTFT {ttft_ms:.0f} ms; "
                    f"bound {bound:.0f} ms): its TTFT and the stall around it may read that much long")  # fmt: skip
    return None


def _judge(state: dict[str, Any], decoders: list[RequestRecord], prefills: list[RequestRecord]) -> tuple[str, str | None]:
    if state.get("over"):
        return "over_capacity", state["over"]
    alone = state.get("alone")
    if alone is None or alone.outcome != "ok":
        return "error", f"the alone prefill failed ({alone.error or alone.outcome if alone else 'not sent'})"
    bad = [r for r in prefills if r.outcome != "ok"]
    if not prefills or bad:
        return "error", f"{len(bad)} of {len(prefills)} prefills failed" + (f" (first: {bad[0].error or bad[0].outcome})" if bad else "")
    last = max((r.ended or r.sent) for r in prefills)
    short = [r for r in decoders if r.outcome != "cancelled" and (r.ended is None or r.ended < last)]
    if short:
        r = short[0]
        why = r.error or ("it ended before the last prefill: raise decode_max_output" if r.outcome == "ok" else r.outcome)
        return "error", f"decode stream {r.stream_index} did not run through the point ({why})"
    monitor: ClientMonitor | None = state.get("monitor")
    stalled = client_stall(monitor.ticks, [alone, *prefills]) if monitor is not None else None
    return ("client_bound", stalled) if stalled else ("valid", None)


def mixed_point_rows(
    rc: RunContext, index: int, lc: MixedLoadConfig, state: dict[str, Any], status: str | None, reason: str | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The point's ``points`` row (its ``interference`` row under ``"mixed"``) and its request rows (decodes, then the
    prefills, then the alone prefill); ``status`` None: judged here."""
    decoders = [state.get("decoders", {})[i] for i in sorted(state.get("decoders", {}))]
    prefills = [state.get("prefills", {})[i] for i in sorted(state.get("prefills", {}))]
    alone: RequestRecord | None = state.get("alone")
    recs = [*decoders, *prefills, *([alone] if alone is not None else [])]
    reqs = []
    for no, rec in enumerate(recs):
        role = "d" if no < len(decoders) else "alone" if rec is alone else "p"
        rid = f"{rc.runner.id_prefix}-mixed-{index}-{role}{rec.stream_index if role != 'alone' else ''}"
        reqs.append(request_row(Sent(index=no, scheduled=rec.sent, released=rec.sent), rec, rid))
    intervals = [(r.sent, r.first_token) for r in prefills if r.first_token is not None]
    stats = interference_stats(decoders, intervals, state.get("window"))
    ttfts = [t for t in (_ttft_ms(r) for r in prefills) if t is not None]
    window = state.get("window")
    origin = min((r.sent for r in recs), default=None)
    ends = [r.ended for r in recs if r.ended is not None]
    row: dict[str, Any] = {
        "point": index, "label": mixed_label(rc.cfg, lc), "arrival": "mixed", "requested_rate": lc.prefill_rate,
        "duration_s": max(ends) - origin if ends and origin is not None else None, "context_tokens": lc.prefill_context,
        "max_output": lc.prefill_max_output, "max_in_flight": None, "seed": None, "scheduled": lc.prefills, "sent": len(prefills),
        "completed": sum(r.outcome == "ok" for r in prefills), "failed": sum(r.outcome not in ("ok",) for r in prefills),
        "output_tokens": sum(output_tokens(r) for r in recs), "origin": origin,
        "ttft_p50_ms": percentile(ttfts, 0.5), "ttft_p99_ms": percentile(ttfts, 0.99),
        "mixed": {
            **stats, "decode_streams": lc.decode_streams, "decode_context": mixed_decode_context(rc.cfg, lc), "prefills": lc.prefills,
            "prefill_rate": lc.prefill_rate, "warmup_s": lc.warmup_s, "window_s": lc.window_s,
            "window_start": window[0] if window else None, "window_end": window[1] if window else None,
            "prefill_ttft_ms": percentile(ttfts, 0.5), "prefill_ttft_max_ms": max(ttfts, default=None),
            "prefill_ttft_alone_ms": _ttft_ms(alone),
        },
    }  # fmt: skip
    if status is None:
        status, reason = _judge(state, decoders, prefills)
    row.update(status=status, reason=reason)
    return row, reqs
