"""The workload-pass part of a report (shared-prefix, multi-turn; docs/workloads.md): the prefix reuse the
workload implies beside the engine's own counters, TTFT by expected cached fraction, and the per-turn table,
from the ``prefix_reuse``, ``ttft_by_cached_fraction`` and ``turns`` views."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infermatrix.core.store import Store

__all__ = ["WorkloadReport", "load_workload_report", "render_workload", "reuse_line", "turn_cells", "band_cells", "pass_line",
           "TURN_HEADERS", "BAND_HEADERS", "BAND_CAPTION", "TURN_CAPTION"]

BAND_HEADERS = ("Cached", "Requests", "Prompt", "TTFT p50", "TTFT mean")
BAND_CAPTION = "TTFT by each request's expected cached fraction (ms, from the request's send)"
TURN_CAPTION = "per turn: context = the prompt tokens the turn sent (history with real replies); TTFT in ms"
TURN_HEADERS = ("Turn", "Conv.", "Context", "Cached (exp.)", "TTFT p50", "TTFT mean", "TTFT max", "Output", "Failed")


@dataclass
class WorkloadReport:
    reuse: dict[str, Any] | None = None  # the prefix_reuse row
    bands: list[dict[str, Any]] = field(default_factory=list)  # ttft_by_cached_fraction, by band
    turns: list[dict[str, Any]] = field(default_factory=list)  # the turns view, by turn
    params: dict[str, Any] | None = None  # the pass's parameters as run (workload_passes.params), for the header


def _rows(store: Store, sql: str, run_id: str) -> list[dict[str, Any]]:
    cols, found = store.query(sql, [run_id])
    return [dict(zip(cols, r)) for r in found]


def load_workload_report(store: Store, run_id: str) -> WorkloadReport:
    """The run's workload pass (empty where it has none)."""
    reuse = _rows(store, "SELECT * FROM prefix_reuse WHERE run_id = ?", run_id)
    params = _rows(store, "SELECT params FROM workload_passes WHERE run_id = ?", run_id)
    raw = params[0]["params"] if params else None
    return WorkloadReport(
        reuse=reuse[0] if reuse else None,
        params=json.loads(raw) if isinstance(raw, str) else raw,
        bands=_rows(store, "SELECT * FROM ttft_by_cached_fraction WHERE run_id = ? ORDER BY band", run_id),
        turns=_rows(store, "SELECT * FROM turns WHERE run_id = ? ORDER BY turn", run_id),
    )


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _pct(v: Any) -> str:
    return "—" if v is None else f"{v:.1%}"


def _table(headers: tuple[str, ...], rows: list[list[str]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    for h in headers:
        table.add_column(h, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def reuse_line(r: dict[str, Any]) -> str:
    """One line: implied reuse beside the engine's hit rate (or why the engine's is missing)."""
    line = f"prefix reuse implied {_pct(r.get('implied_reuse'))} of {r.get('prompt_tokens') or 0:,} prompt tokens"
    line += f" ({r.get('block_tokens')}-token blocks)"
    if r.get("engine_hit_rate") is not None:
        line += f"; engine prefix-cache hit rate {_pct(r['engine_hit_rate'])} ({r['difference']:+.1%})"
    else:
        line += f"; engine: {r.get('engine_note') or 'no prefix-cache counters'}"
    return line


def turn_cells(t: dict[str, Any]) -> list[str]:
    return [str(t["turn"]), str(t["conversations"]), f"{t['context_tokens'] or 0:,.0f}", _pct(t.get("expected_cached_fraction")),
            _ms(t.get("ttft_p50_ms")), _ms(t.get("ttft_mean_ms")), _ms(t.get("ttft_max_ms")), f"{t['output_tokens'] or 0:,.0f}",
            str(t.get("failed") or 0)]  # fmt: skip


def band_cells(b: dict[str, Any]) -> list[str]:
    return [b["cached_fraction"], str(b["requests"]), f"{b['prompt_tokens'] or 0:,.0f}", _ms(b["ttft_p50_ms"]), _ms(b["ttft_mean_ms"])]


def pass_line(r: dict[str, Any]) -> tuple[str, str]:
    """The pass's summary around its status: (before, after)."""
    return f"{r['requests']} requests, {r['failed']} failed · ", f" · {reuse_line(r)}"


def render_workload(console: Console, w: WorkloadReport, styles: dict[str, str]) -> None:
    """The workload section: nothing when the run has no pass."""
    r = w.reuse
    if r is None:
        return
    console.print()
    console.print(Text(f"Workload {r['workload']}", style="bold underline"))
    status = Text(r["status"], style=styles.get(r["status"], ""))
    before, after = pass_line(r)
    console.print(Text.assemble(before, status, after), soft_wrap=True)
    if w.bands:
        console.print(Text(BAND_CAPTION, style="dim"))
        console.print(_table(BAND_HEADERS, [band_cells(b) for b in w.bands]))
    if w.turns:
        console.print(Text(TURN_CAPTION, style="dim"))
        console.print(_table(TURN_HEADERS, [turn_cells(t) for t in w.turns]))
