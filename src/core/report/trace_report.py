"""The trace-replay section of a report: each trace point against its trace (requests, the trace's rate and
the achieved one, schedule lag against its bound, what was skipped), and its arrivals over time — requests
due and sent per stretch of the replay — from ``trace_points``, ``load_points`` and ``trace_arrivals``
(core/store/trace.sql; docs/load.md, "Trace replay")."""

from __future__ import annotations

import math
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infermatrix.core.store import Store

__all__ = ["load_trace_rows", "render_traces", "arrival_buckets", "arrival_rows", "trace_cells", "trace_notes", "TRACE_HEADERS",
           "TRACE_CAPTION", "ARRIVAL_HEADERS", "MAX_BUCKETS"]

TRACE_HEADERS = ("Trace", "Requests", "Trace/s", "Sent/s", "Lag p50", "Lag p99", "Bound", "TTFT p50", "TTFT p99", "Status")
TRACE_CAPTION = ("each request sent at its trace timestamp × time scale, its own lengths; Trace/s = the trace's rate, "
                 "Sent/s = the replay's; lag and TTFT in ms (TTFT from the scheduled time)")
ARRIVAL_HEADERS = ("Seconds", "Due", "Sent", "")
MAX_BUCKETS = 12  # rows of the arrivals-over-time table: the replay's span cut into at most this many stretches


def load_trace_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """One dict per trace point of the run: its trace_points row, its load_points figures, and ``arrivals``
    (the trace_arrivals rows, per second)."""
    cols, found = store.query(
        "SELECT t.*, p.label, p.status, p.reason, p.requested_rate, p.achieved_rate, p.scheduled, p.sent, p.completed, "
        "p.lag_p50_ms, p.lag_p99_ms, p.lag_bound_ms, p.ttft_p50_ms, p.ttft_p99_ms, p.e2e_p50_ms, p.output_tps "
        "FROM trace_points t JOIN load_points p USING (run_id, point) WHERE t.run_id = ? ORDER BY t.point",
        [run_id],
    )
    rows = [dict(zip(cols, r)) for r in found]
    for row in rows:
        acols, arr = store.query("SELECT second, requested, sent, lag_max_ms FROM trace_arrivals WHERE run_id = ? AND point = ? ORDER BY second",
                                 [run_id, row["point"]])  # fmt: skip
        row["arrivals"] = [dict(zip(acols, a)) for a in arr]
    return rows


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


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "—" if v is None else fmt.format(v)


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _skipped(t: dict[str, Any]) -> str:
    parts = [(t.get("skipped_failed"), "failed in the trace (0 response tokens)"), (t.get("skipped_empty"), "with 0 input or output tokens"),
             (t.get("skipped_too_long"), "longer than max_model_len"), (t.get("cut"), "past the replay's limits")]  # fmt: skip
    said = [f"{n} {what}" for n, what in parts if n]
    return f"{t['in_file']} requests in the file, {t['replayed']} replayed" + (f"; not sent: {', '.join(said)}" if said else "")


def trace_cells(t: dict[str, Any]) -> list[str]:
    """One trace point's cells (TRACE_HEADERS), as every report shows them."""
    return [
        f"{t['label']} ({t['format']})", f"{t.get('completed') or 0}/{t.get('scheduled') or 0}", _num(t.get("requested_rate")),
        _num(t.get("achieved_rate")), _ms(t.get("lag_p50_ms")), _ms(t.get("lag_p99_ms")), _ms(t.get("lag_bound_ms")),
        _ms(t.get("ttft_p50_ms")), _ms(t.get("ttft_p99_ms")), t["status"],
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


def render_traces(console: Console, traces: list[dict[str, Any]], styles: dict[str, str]) -> None:
    """The trace-replay section: nothing when the run has no trace points."""
    if not traces:
        return
    console.print()
    console.print(Text("Trace replay", style="bold underline"))
    console.print(Text(TRACE_CAPTION, style="dim"))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    for h in TRACE_HEADERS:
        table.add_column(h, justify="left" if h in ("Trace", "Status") else "right", no_wrap=h != "Trace")
    for t in traces:
        cells = trace_cells(t)
        table.add_row(*cells[:-1], Text(cells[-1], style=styles.get(t["status"], "")))
    console.print(table)
    for t in traces:
        console.print(Text(f"  {trace_notes(t)}", style="dim"), soft_wrap=True)
        _arrivals(console, t)


def _arrivals(console: Console, t: dict[str, Any]) -> None:
    caption, rows = arrival_rows(t)
    if not rows:
        return
    console.print(Text(f"  {caption}", style="dim"))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    for h in ARRIVAL_HEADERS:
        table.add_column(h, justify="left" if h in ("Seconds", "") else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
