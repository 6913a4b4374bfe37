"""The Trace replay section: each trace point against its trace (requests, the trace's rate and the achieved one,
schedule lag against its bound, what was skipped) and its arrivals over time — requests due and sent per stretch
of the replay — from the trace rows ReportData loaded (trace_points, load_points, trace_arrivals; docs/load.md)."""

from __future__ import annotations

import math
from typing import Any

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import fmt_float2, fmt_ms_plain
from infermatrix.core.report.model import Block, Note, Section, Table

__all__ = ["trace_section", "arrival_buckets", "arrival_rows", "trace_cells", "trace_notes", "TRACE_HEADERS", "TRACE_CAPTION",
           "ARRIVAL_HEADERS", "MAX_BUCKETS"]

TRACE_HEADERS = ("Trace", "Requests", "Trace/s", "Sent/s", "Lag p50", "Lag p99", "Bound", "TTFT p50", "TTFT p99", "Status")
TRACE_CAPTION = ("each request sent at its trace timestamp × time scale, its own lengths; Trace/s = the trace's rate, "
                 "Sent/s = the replay's; lag and TTFT in ms (TTFT from the scheduled time)")
ARRIVAL_HEADERS = ("Seconds", "Due", "Sent", "")
MAX_BUCKETS = 12  # rows of the arrivals-over-time table: the replay's span cut into at most this many stretches


def arrival_buckets(arrivals: list[dict[str, Any]], max_buckets: int = MAX_BUCKETS) -> list[tuple[int, int, int, int]]:
    """(from second, to second, due, sent) per stretch: whole seconds, at most ``max_buckets`` stretches."""
    if not arrivals:
        return []
    first, last = min(a["second"] for a in arrivals), max(a["second"] for a in arrivals)
    width = max(1, math.ceil((last - first + 1) / max_buckets))
    out: dict[int, list[int]] = {}
    for a in arrivals:
        b = (a["second"] - first) // width
        due_sent = out.setdefault(b, [0, 0])
        due_sent[0] += a["requested"]
        due_sent[1] += a["sent"]
    n = (last - first) // width + 1
    return [(first + b * width, first + (b + 1) * width, *out.get(b, [0, 0])) for b in range(n)]


def _skipped(t: dict[str, Any]) -> str:
    parts = [(t.get("skipped_failed"), "failed in the trace (0 response tokens)"), (t.get("skipped_empty"), "with 0 input or output tokens"),
             (t.get("skipped_too_long"), "longer than max_model_len"), (t.get("cut"), "past the replay's limits")]  # fmt: skip
    said = [f"{n} {what}" for n, what in parts if n]
    return f"{t['in_file']} requests in the file, {t['replayed']} replayed" + (f"; not sent: {', '.join(said)}" if said else "")


def trace_cells(t: dict[str, Any]) -> list[str]:
    """One trace point's cells (TRACE_HEADERS)."""
    return [
        f"{t['label']} ({t['format']})", f"{t.get('completed') or 0}/{t.get('scheduled') or 0}", fmt_float2(t.get("requested_rate")),
        fmt_float2(t.get("achieved_rate")), fmt_ms_plain(t.get("lag_p50_ms")), fmt_ms_plain(t.get("lag_p99_ms")),
        fmt_ms_plain(t.get("lag_bound_ms")), fmt_ms_plain(t.get("ttft_p50_ms")), fmt_ms_plain(t.get("ttft_p99_ms")), t["status"],
    ]  # fmt: skip


def trace_notes(t: dict[str, Any]) -> str:
    """One line under the table: what was replayed and skipped, exactness, shared prefixes, the status's reason."""
    notes = [_skipped(t)]
    if t.get("inexact_prompts"):
        notes.append(f"{t['inexact_prompts']} prompts not of the trace's exact length (shorter than the API's {t['prompt_overhead']}-token overhead)")
    if t.get("shared_prefix_tokens"):
        notes.append(f"{t['shared_prefix_tokens']:,} of {t['prompt_tokens']:,} prompt tokens shared with an earlier request (hash_ids)")
    if t.get("reason"):
        notes.append(f"{t['status']}: {t['reason']}")
    return f"{t['label']}: " + "; ".join(notes)


def arrival_rows(t: dict[str, Any]) -> tuple[str, list[list[str]]]:
    """The arrivals-over-time table of a trace point (ARRIVAL_HEADERS): its caption and rows, each with a bar
    of sent (█) and due-but-not-sent (·) requests; no rows when the point has no arrivals."""
    buckets = arrival_buckets(t.get("arrivals") or [])
    if not buckets:
        return "", []
    most = max(max(due, sent) for _, _, due, sent in buckets) or 1
    caption = f"arrivals over time: requests due (trace) and sent (replay), per {buckets[0][1] - buckets[0][0]} s"
    rows = []
    for lo, hi, due, sent in buckets:
        bar = "█" * round(20 * sent / most) + ("·" * round(20 * (due - sent) / most) if due > sent else "")
        rows.append([f"{lo}–{hi}", str(due), str(sent), bar])
    return caption, rows


def trace_section(d: ReportData) -> Section | None:
    if not d.traces:
        return None
    blocks: list[Block] = [Table(list(TRACE_HEADERS), [trace_cells(t) for t in d.traces], "l" + "r" * 8 + "l", caption=TRACE_CAPTION,
                                 name="trace-replay", statuses=[t["status"] for t in d.traces], status_col=9)]  # fmt: skip
    for t in d.traces:
        blocks.append(Note(trace_notes(t)))
        caption, rows = arrival_rows(t)
        if rows:
            blocks.append(Table(list(ARRIVAL_HEADERS), rows, "lrrl", caption=f"{t['label']}: {caption}", name="trace-replay-more"))
    return Section("trace-replay", "Trace replay", blocks)
