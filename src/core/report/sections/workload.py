"""The workload section (shared-prefix, multi-turn; docs/workloads.md): the prefix reuse the workload implies beside
the engine's own counters, TTFT by expected cached fraction, and the per-turn table (the prefix_reuse,
ttft_by_cached_fraction and turns rows ReportData loaded)."""

from __future__ import annotations

from typing import Any

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import fmt_ms_plain, fmt_pct
from infermatrix.core.report.model import Block, Paragraph, Section, Styled, Table

__all__ = ["workload_section", "reuse_line", "turn_cells", "band_cells", "TURN_HEADERS", "BAND_HEADERS", "BAND_CAPTION", "TURN_CAPTION"]

BAND_HEADERS = ("Cached", "Requests", "Prompt", "TTFT p50", "TTFT mean")
BAND_CAPTION = "TTFT by each request's expected cached fraction (ms, from the request's send)"
TURN_CAPTION = "per turn: context = the prompt tokens the turn sent (history with real replies); TTFT in ms"
TURN_HEADERS = ("Turn", "Conv.", "Context", "Cached (exp.)", "TTFT p50", "TTFT mean", "TTFT max", "Output", "Failed")


def reuse_line(r: dict[str, Any]) -> str:
    """One line: implied reuse beside the engine's hit rate (or why the engine's is missing)."""
    line = f"prefix reuse implied {fmt_pct(r.get('implied_reuse'))} of {r.get('prompt_tokens') or 0:,} prompt tokens"
    line += f" ({r.get('block_tokens')}-token blocks)"
    if r.get("engine_hit_rate") is not None:
        line += f"; engine prefix-cache hit rate {fmt_pct(r['engine_hit_rate'])} ({r['difference']:+.1%})"
    else:
        line += f"; engine: {r.get('engine_note') or 'no prefix-cache counters'}"
    return line


def turn_cells(t: dict[str, Any]) -> list[str]:
    return [str(t["turn"]), str(t["conversations"]), f"{t['context_tokens'] or 0:,.0f}", fmt_pct(t.get("expected_cached_fraction")),
            fmt_ms_plain(t.get("ttft_p50_ms")), fmt_ms_plain(t.get("ttft_mean_ms")), fmt_ms_plain(t.get("ttft_max_ms")),
            f"{t['output_tokens'] or 0:,.0f}", str(t.get("failed") or 0)]  # fmt: skip


def band_cells(b: dict[str, Any]) -> list[str]:
    return [b["cached_fraction"], str(b["requests"]), f"{b['prompt_tokens'] or 0:,.0f}", fmt_ms_plain(b["ttft_p50_ms"]),
            fmt_ms_plain(b["ttft_mean_ms"])]  # fmt: skip


def workload_section(d: ReportData) -> Section | None:
    w, r = d.workload, d.workload.reuse
    if r is None or w.tasks:  # a tasks pass has its own section (sections/tasks.py): no prefix reuse to speak of
        return None
    blocks: list[Block] = [Paragraph([f"{r['requests']} requests, {r['failed']} failed · ", Styled(r["status"], r["status"]),
                                      f" · {reuse_line(r)}"])]  # fmt: skip
    tables = []
    if w.bands:
        tables.append(Table(list(BAND_HEADERS), [band_cells(b) for b in w.bands], "l" + "r" * 4, caption=BAND_CAPTION))
    if w.turns:
        tables.append(Table(list(TURN_HEADERS), [turn_cells(t) for t in w.turns], "r" * len(TURN_HEADERS), caption=TURN_CAPTION))
    for i, t in enumerate(tables):
        t.name = "workload" if i == 0 else "workload-more"  # HTML: the section's first table, then the rest
    return Section("workload", f"Workload {r['workload']}", [*blocks, *tables])
