"""Side-by-side comparison of runs, from the engine_comparison view (first run = baseline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from infermatrix.core.contexts import parse_context
from infermatrix.core.report.data import DASH, fmt_ms, fmt_tps
from infermatrix.core.report.markdown import md_escape, md_table
from infermatrix.core.store import Store, StoreError

__all__ = ["Comparison", "load_comparison", "render_compare_text", "render_compare_markdown", "METRICS"]

# (view metric, short column title, formatter); ratios > 1 are better for throughput, worse for latency.
METRICS = (
    ("total_tps", "Total tok/s", fmt_tps),
    ("per_request_tps", "Per request tok/s", fmt_tps),
    ("ttft_ms", "TTFT", fmt_ms),
    ("tbt_ms", "TBT", fmt_ms),
)
FOOTNOTE = (
    "Cells valid in both runs. B/A > 1 means more tok/s in B, or more latency in B "
    "(TTFT, TBT = time between tokens). Latencies are medians."
)


@dataclass
class Comparison:
    """Baseline run ``a`` against each other run: ``pairs[b] = [(context_label, concurrency, {metric: (a, b, ratio)})]``."""

    runs: dict[str, dict[str, Any]]
    baseline: str
    pairs: dict[str, list[tuple[str, int, dict[str, tuple]]]]


def _describe(run: dict[str, Any]) -> str:
    bits = [run.get("engine"), run.get("engine_version"), run.get("model")]
    return f"{run['run_id']} ({' · '.join(b for b in bits if b)})"


def load_comparison(store: Store, run_ids: list[str]) -> Comparison:
    """Resolve the ids (prefixes ok) and fetch baseline-vs-each pairs from engine_comparison."""
    if len(run_ids) < 2:
        raise StoreError("compare needs at least two runs")
    ids = [store.resolve_run(r) for r in run_ids]
    if len(set(ids)) != len(ids):
        raise StoreError("the same run was given twice")
    runs = {i: store.get_run(i) for i in ids}
    base = ids[0]
    pairs = {}
    for other in ids[1:]:
        cols, rows = store.query(
            "SELECT context_label, concurrency, metric, value_a, value_b, ratio FROM engine_comparison "
            "WHERE run_a = ? AND run_b = ?",
            [base, other],
        )
        cells: dict[tuple[str, int], dict[str, tuple]] = {}
        for label, n, metric, a, b, ratio in rows:
            cells.setdefault((label, n), {})[metric] = (a, b, ratio)
        ordered = sorted(cells.items(), key=lambda kv: (parse_context(kv[0][0]), kv[0][1]))
        pairs[other] = [(label, n, m) for (label, n), m in ordered]
    return Comparison(runs=runs, baseline=base, pairs=pairs)


def _ratio(r: float | None) -> str:
    return DASH if r is None else f"×{r:.2f}"


def _rows(cells: list[tuple[str, int, dict[str, tuple]]]) -> list[list[str]]:
    out = []
    for label, n, metrics in cells:
        row = [label, str(n)]
        for key, _, fmt in METRICS:
            a, b, ratio = metrics.get(key, (None, None, None))
            row += [fmt(a), fmt(b), _ratio(ratio)]
        out.append(row)
    return out


def _header() -> list[str]:
    cols = ["Context", "Requests at once"]
    for _, title, _ in METRICS:
        cols += [f"{title} A", f"{title} B", "B/A"]
    return cols


def render_compare_text(store: Store, run_ids: list[str], console: Console) -> None:
    """Print baseline (first run) against each other run, cell by cell (cells valid in both)."""
    cmp = load_comparison(store, run_ids)
    console.print(Text("Comparison", style="bold"))
    console.print(f"A = {_describe(cmp.runs[cmp.baseline])}")
    for other, cells in cmp.pairs.items():
        console.print()
        console.print(Text(f"B = {_describe(cmp.runs[other])}", style="bold cyan"))
        if not cells:
            console.print(Text("No cells valid in both runs.", style="yellow"))
            continue
        table = Table(header_style="bold", show_edge=False)
        for col in _header():
            table.add_column(col, justify="right", style="bold" if col == "B/A" else "")
        for row in _rows(cells):
            table.add_row(*row)
        console.print(table)
    console.print(Text(FOOTNOTE, style="dim"))


def render_compare_markdown(store: Store, run_ids: list[str]) -> str:
    cmp = load_comparison(store, run_ids)
    out = ["# Comparison", "", f"A = {md_escape(_describe(cmp.runs[cmp.baseline]))}", ""]
    for other, cells in cmp.pairs.items():
        out += [f"## B = {md_escape(_describe(cmp.runs[other]))}", ""]
        if not cells:
            out += ["_No cells valid in both runs._", ""]
            continue
        header = _header()
        out += [md_table(header, _rows(cells), "r" * len(header)), ""]
    out.append(md_escape(FOOTNOTE))
    return "\n".join(out) + "\n"
