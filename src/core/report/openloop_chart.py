"""The HTML report's latency-vs-rate chart: TTFT p50 and p99 of each valid open-loop point against the rate it
achieved, one pair of lines per context — the points' stored values (``load_points``), nothing recomputed."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.svg_plot import Series, line_chart

__all__ = ["openloop_chart", "OPENLOOP_CHART_ID"]

OPENLOOP_CHART_ID = "openloop-latency"


def _plotted(p: dict[str, Any]) -> bool:
    return p["status"] == "valid" and p.get("achieved_rate") is not None and p.get("ttft_p50_ms") is not None


def openloop_chart(points: list[dict[str, Any]]) -> tuple[str, str, str] | None:
    """``(chart id, caption, svg)`` for the run's rate points (trace points excluded by the caller); None when
    no point is valid with figures to plot."""
    shown = sorted((p for p in points if _plotted(p)), key=lambda p: p["achieved_rate"])
    if not shown:
        return None
    series = []
    for ctx in dict.fromkeys(p.get("context_tokens") for p in shown):
        mine = [p for p in shown if p.get("context_tokens") == ctx]
        name = f"{format_context(ctx)} " if ctx else ""
        for column, pct in (("ttft_p50_ms", "p50"), ("ttft_p99_ms", "p99")):
            pts = [(float(p["achieved_rate"]), float(p[column]), f"{p['label']}: {p['achieved_rate']:.2f} req/s sent, TTFT {pct} {p[column]:.1f} ms")
                   for p in mine if p.get(column) is not None]  # fmt: skip
            series.append(Series(f"{name}TTFT {pct}", pts))
    svg = line_chart(series, title="TTFT vs achieved request rate", x_label="achieved rate (requests/s)", y_label="TTFT (ms)",
                     x_kind="linear", chart_id=OPENLOOP_CHART_ID)  # fmt: skip
    caption = "each valid open-loop point at the rate it achieved; TTFT from each request's scheduled time (load_points)"
    return OPENLOOP_CHART_ID, caption, svg
