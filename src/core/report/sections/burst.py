"""The Bursts section: one row per burst point (the burst_points view; docs/load.md, "Bursts"), and for each how its
throughput differs from the sustained rate — its tail (the last requests running with fewer than its concurrency in
flight) against the rate before it, and the decode matrix's cell at the same context and concurrency where there is one."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import fmt_float2, fmt_ms_plain, fmt_span, fmt_tps
from infermatrix.core.report.model import Block, Note, Section, Table

__all__ = ["burst_section", "burst_cells", "burst_note", "BURSTS_TITLE", "BURST_HEADERS", "BURST_CAPTION"]

BURSTS_TITLE = "Bursts"
BURST_HEADERS = ("Burst", "Time", "Req/s", "Out tok/s", "Before tail", "Tail", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99", "Done", "Status")
BURST_CAPTION = ("REQUESTS@CONCURRENCY, context; time from the first request sent to the last one's end; Req/s and Out tok/s over "
                 "that time, Before tail: output tok/s until fewer than CONCURRENCY were in flight; latencies in ms from each "
                 "request's send; more: the burst_points view")  # fmt: skip


def burst_cells(b: dict[str, Any]) -> list[str]:
    """One burst's cells (BURST_HEADERS)."""
    return [
        f"{b['requests']}@{b['concurrency']} {format_context(b['context_tokens'])}", fmt_span(b.get("duration_s")),
        fmt_float2(b.get("request_rate")), fmt_tps(b.get("output_tps")), fmt_tps(b.get("steady_output_tps")), fmt_span(b.get("tail_s")),
        fmt_ms_plain(b.get("ttft_p50_ms")), fmt_ms_plain(b.get("ttft_p99_ms")), fmt_ms_plain(b.get("e2e_p50_ms")),
        fmt_ms_plain(b.get("e2e_p99_ms")), f"{b.get('completed') or 0}/{b['requests']}", b["status"],
    ]  # fmt: skip


def burst_note(d: ReportData, b: dict[str, Any]) -> str | None:
    """How a valid burst's throughput differs from the sustained rate: its tail, the rate before it, and the decode
    matrix's valid cell at the same context and concurrency when the run has one."""
    whole, steady, tail, span = b.get("output_tps"), b.get("steady_output_tps"), b.get("tail_s"), b.get("duration_s")
    if b["status"] != "valid" or not whole or tail is None or not span:
        return None
    text = (f"{b['label']}: the last {fmt_span(tail)} of {fmt_span(span)} ({tail / span:.0%}) ran with fewer than "
            f"{b['concurrency']} requests in flight; {fmt_tps(whole)} tok/s over the whole burst")  # fmt: skip
    if steady:
        text += f", {fmt_tps(steady)} tok/s before its tail ({whole / steady - 1:+.0%})"
    cell = d.cell(b["context_tokens"], b["concurrency"])
    if cell is not None and cell.get("status") == "valid" and cell.get("total_tps"):
        text += f"; the decode matrix sustained {fmt_tps(cell['total_tps'])} tok/s at {format_context(b['context_tokens'])} × {b['concurrency']}"
    return text + "."


def burst_section(d: ReportData) -> Section | None:
    if not d.bursts:
        return None
    blocks: list[Block] = [Table(list(BURST_HEADERS), [burst_cells(b) for b in d.bursts], "l" + "r" * 10 + "l", caption=BURST_CAPTION,
                                 name="bursts", statuses=[b["status"] for b in d.bursts], status_col=11)]  # fmt: skip
    for b in d.bursts:
        note = burst_note(d, b) if not b.get("reason") else f"{b['label']}: {b['status']}: {b['reason']}"
        if note:
            blocks.append(Note(note))
    return Section("bursts", BURSTS_TITLE, blocks)
