"""Sending an open-loop point's prepared request bodies on their schedule: shared by rate points (points.py) and
trace replays (trace_point.py), so both stamp, identify and close their requests the same way."""

from __future__ import annotations

import time
from typing import Any

import anyio

from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.stream.client import stream_request
from infermatrix.core.load.openloop import MonotonicClock, Sent, SendPlan, send_schedule
from infermatrix.core.types import RequestRecord

__all__ = ["send_point", "output_tokens", "request_row"]


async def send_point(runner: CellRunner, state: dict[str, Any], index: int, offsets: list[float], bodies: list[bytes],
                     max_in_flight: int | None) -> SendPlan:  # fmt: skip
    """Send ``bodies[i]`` at ``offsets[i]`` (seconds from now) as request ``{run}-load-{index}-r{i}``. The records
    and ids land in ``state["records"]`` / ``state["ids"]`` and the plan in ``state["plan"]`` as requests go, so an
    interrupted point keeps what was sent; no connection is left open behind the point, interrupted or not."""
    records: dict[int, RequestRecord] = state["records"]
    ids: dict[int, str] = state["ids"]
    count_path = runner._count_path()

    async def launch(i: int) -> None:
        rec = records[i] = RequestRecord(stream_index=i, seq=0, sent=time.monotonic())
        rid = ids[i] = f"{runner.id_prefix}-load-{index}-r{i}"
        await stream_request(runner.streams, runner.url, bodies[i], rec, headers=runner._headers(rid), on_tokens=runner.on_tokens,
                             count_path=count_path)  # fmt: skip

    plan = state["plan"] = SendPlan(offsets=offsets, origin=time.monotonic())
    try:
        await send_schedule(offsets, launch, clock=MonotonicClock(), max_in_flight=max_in_flight, plan=plan)
    finally:
        with anyio.CancelScope(shield=True):
            await runner._close_streams()
    return plan


def output_tokens(rec: RequestRecord) -> int:
    """The server's closing usage count when it sent one (a plain OpenAI server streams several tokens in a
    chunk without per-chunk usage), else the tokens counted from the chunks."""
    return rec.final_usage_tokens if rec.final_usage_tokens is not None else rec.output_tokens


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((a - b) * 1000, 3)


def request_row(s: Sent, rec: RequestRecord, request_id: str | None, due: float | None = None) -> dict[str, Any]:
    """One ``point_requests`` row: the request's times, and its latencies from ``due`` (default its scheduled time:
    a rate point charges the client's lag; a burst passes when its slot let it go) and from its actual send."""
    due = s.scheduled if due is None else due
    sent, ft = rec.sent, rec.first_token
    return {
        "request_no": s.index, "request_id": request_id, "scheduled": due, "sent": sent if rec.written else None,
        "first_token": ft, "ended": rec.ended, "lag_ms": _ms(sent, due), "queue_ms": round(s.queue_s * 1000, 3),
        "ttft_ms": _ms(ft, due), "ttft_sent_ms": _ms(ft, sent), "e2e_ms": _ms(rec.ended, due),
        "e2e_sent_ms": _ms(rec.ended, sent), "prompt_tokens": rec.prompt_tokens, "output_tokens": output_tokens(rec),
        "outcome": rec.outcome, "error": rec.error, "ttfo_ms": _ms(rec.first_content, due), "reasoning": rec.reasoning,
        "reasoning_tokens": rec.reasoning_tokens,
    }  # fmt: skip
