"""The Time to first answer token section: where some stream carried reasoning text, TTFO beside TTFT for each valid
decode cell (latency_percentiles' ttft and ttfo metrics) and each burst (burst_points) — TTFT counts the reasoning
tokens, TTFO is when the answer began (docs/metrics.md, TTFO). A run without reasoning has no such section: its TTFO is
its TTFT."""

from __future__ import annotations

from infermatrix.core.contexts import format_context
from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import fmt_ms_plain
from infermatrix.core.report.model import Section, Table

__all__ = ["answer_section", "ANSWER_TITLE", "ANSWER_HEADERS"]

ANSWER_TITLE = "Time to first answer token"
ANSWER_HEADERS = ("Measured at", "TTFT p50", "TTFO p50", "TTFT p99", "TTFO p99")
_CAPTION = ("reasoning tokens came first: TTFT is the first token of any kind, TTFO the first answer token; ms from each "
            "request's send; decode cells from latency_percentiles, bursts from burst_points")  # fmt: skip


def answer_section(d: ReportData) -> Section | None:
    if not d.reasoning:
        return None
    rows: list[list[str]] = []
    by_cell: dict[tuple[str, int], dict[str, dict]] = {}
    for r in d.latency:
        if r["metric"] in ("ttft", "ttfo"):
            by_cell.setdefault((r["context_label"], r["concurrency"]), {})[r["metric"]] = r
    for (label, n), m in by_cell.items():
        if "ttfo" in m:
            t, o = m.get("ttft", {}), m["ttfo"]
            rows.append([f"decode {label} × {n}", *map(fmt_ms_plain, (t.get("p50"), o.get("p50"), t.get("p99"), o.get("p99")))])
    for b in d.bursts:
        if b["status"] == "valid" and b.get("ttfo_p50_ms") is not None:
            cells = (b.get("ttft_p50_ms"), b.get("ttfo_p50_ms"), b.get("ttft_p99_ms"), b.get("ttfo_p99_ms"))
            rows.append([f"burst {b['requests']}@{b['concurrency']} {format_context(b['context_tokens'])}", *map(fmt_ms_plain, cells)])
    if not rows:
        return None
    return Section("ttfo", ANSWER_TITLE, [Table(list(ANSWER_HEADERS), rows, "lrrrr", caption=_CAPTION, name="ttfo")])
