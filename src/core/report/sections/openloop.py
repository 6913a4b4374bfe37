"""The Open-loop points section: one row per rate point (the load_points view; docs/load.md), why a point got
its status, and in HTML the latency-vs-rate chart. Trace points have their own section (trace.py)."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import fmt_float2, fmt_ms_plain
from infermatrix.core.report.model import Block, Chart, Charts, Note, Section, Table
from infermatrix.core.report.openloop_chart import openloop_chart

__all__ = ["openloop_section", "rate_points", "point_cells", "POINTS_TITLE", "POINT_HEADERS", "POINT_CAPTION"]

POINTS_TITLE = "Open-loop points"  # the section's one name: text, Markdown, HTML and docs/load.md alike
POINT_HEADERS = ("Point", "Rate/s", "Sent/s", "Lag p99", "TTFT p50", "TTFT p99", "Done", "Status")
POINT_CAPTION = ("requests arriving at a rate (≤N: in-flight cap); Sent/s = requests sent ÷ their span; "
                 "lag and TTFT in ms, TTFT from each request's scheduled time; KS fit and more: the load_points view")


def rate_points(d: ReportData) -> list[dict[str, Any]]:
    """The open-loop points of the run that are not trace replays, bursts or interference points (their own sections), in point order."""
    return [p for p in d.points if p["arrival"] not in ("trace", "burst", "mixed")]


def point_cells(p: dict[str, Any]) -> list[str]:
    """One point's cells (POINT_HEADERS)."""
    cap = f" ≤{p['max_in_flight']}" if p.get("max_in_flight") else ""
    return [
        f"{p['arrival']} {format_context(p['context_tokens'])}{cap}" if p.get("context_tokens") else str(p["arrival"]),
        f"{p['requested_rate']:g}", fmt_float2(p.get("achieved_rate")), fmt_ms_plain(p.get("lag_p99_ms")),
        fmt_ms_plain(p.get("ttft_p50_ms")), fmt_ms_plain(p.get("ttft_p99_ms")), f"{p.get('completed') or 0}/{p.get('scheduled') or 0}",
        p["status"],
    ]  # fmt: skip


def openloop_section(d: ReportData, charts: bool = False) -> Section | None:
    points = rate_points(d)
    if not points:
        return None
    blocks: list[Block] = [Table(list(POINT_HEADERS), [point_cells(p) for p in points], "l" + "r" * 6 + "l", caption=POINT_CAPTION,
                                 name="open-loop", statuses=[p["status"] for p in points], status_col=7)]  # fmt: skip
    blocks += [Note(f"{p.get('label')}: {p['status']}: {p['reason']}") for p in points if p.get("reason")]
    chart = openloop_chart(points) if charts else None
    if chart:
        cid, caption, svg = chart
        blocks.append(Charts([Chart(cid, "Latency vs rate", caption, svg)]))
    return Section("open-loop", POINTS_TITLE, blocks)
