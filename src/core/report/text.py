"""The terminal report (rich), laid out like the reference report."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from infermatrix.core.report.data import ReportData, load_report
from infermatrix.core.report.openloop import render_points
from infermatrix.core.report.workload_report import render_workload
from infermatrix.core.report.trace_report import render_traces
from infermatrix.core.report.slo_report import slo_tables
from infermatrix.core.report.layout import (
    LONG_COLUMNS,
    LONG_NOTE,
    cell_notes,
    header_sections,
    legend_lines,
    long_rows,
    matrix_cell,
    title_lines,
)
from infermatrix.core.store import Store

__all__ = ["render_text", "render_data", "STATUS_STYLES"]

# One look per status, so a discarded cell can't be mistaken for a number at a glance.
STATUS_STYLES = {
    "valid": "",
    "looped": "bold magenta",
    "over_capacity": "dim",
    "error": "bold red",
    "client_bound": "yellow",
    "interrupted": "italic cyan",
    "missing": "dim",
}


def _section(console: Console, title: str, subtitle: str | None = None) -> None:
    console.print()
    console.print(Text(title, style="bold underline"))
    if subtitle:
        console.print(Text(subtitle, style="dim"))


def _header(console: Console, d: ReportData) -> None:
    title, second, summary = title_lines(d)
    console.print(Text(title, style="bold"))
    console.print(Text(second, style="bold cyan"))
    console.print(Text(summary))
    for name, fields in header_sections(d):
        _section(console, name)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        for label, value in fields:
            grid.add_row(label, value)
        console.print(grid)
    if d.run.get("launch_command"):
        _section(console, "Launch command")
        # soft_wrap: a long command stays copy-pasteable instead of being folded with padding.
        console.print(Text(d.run["launch_command"]), soft_wrap=True)


def _prefill(console: Console, d: ReportData) -> None:
    if not d.prefill:
        return
    _section(console, "Prefill", "prompt tok/s by context length")
    table = Table(show_edge=False, header_style="bold")
    table.add_column("Context", justify="right")
    table.add_column("Prompt tok/s", justify="right")
    table.add_column("TTFT", justify="right")
    table.add_column("Status")
    for line_status, cells in long_rows(d)[: len(d.prefill)]:
        _, label, _, status, tps, _, ttft, *_ = cells
        style = STATUS_STYLES.get(line_status, "")
        table.add_row(f"{label} context", tps, ttft, Text(status, style=style))
    console.print(table)


def _matrix(console: Console, d: ReportData) -> None:
    if not d.decode:
        return
    _section(console, "Sustained decode", "total tok/s · rows are context length, columns are simultaneous requests")
    table = Table(show_lines=True, header_style="bold")
    table.add_column("Context", justify="right", style="bold")
    for n in d.concurrencies:
        table.add_column(str(n), justify="right")
    for ctx in d.contexts:
        row = [d.cell(ctx, n) for n in d.concurrencies]
        label = next(r["context_label"] for r in row if r is not None)
        cells = []
        for r in row:
            first, second, status = matrix_cell(r)
            if second is None:
                cells.append(Text(first, style=STATUS_STYLES.get(status, "")))
            else:
                cells.append(Text.assemble((first, "bold"), "\n", (second, "dim")))
        table.add_row(label, *cells)
    console.print(table)
    for line in legend_lines(d):
        console.print(Text(line, style="dim"))
    notes = cell_notes(d)
    if notes:
        console.print(Group(*(Text(f"• {n}") for n in notes)))


# Below WIDE the reference's long headers would fold into towers of letters: a compact table
# (short headers, explained under it) fits down to NARROW; below that, one line per measurement.
WIDE, NARROW = 170, 100
COMPACT = {
    "Phase": "Phase", "Context": "Context", "Requests at once": "N", "Status": "Status", "Total tok/s": "Total",
    "Per request tok/s": "Per req", "TTFT": "TTFT", "Time between tokens": "TBT", "Average active requests": "Active",
    "Completed requests": "Done", "Output tokens": "Tokens", "Measured for": "Window",
}
COMPACT_NOTE = (
    "N = requests at once · Total = total tok/s · Per req = per request tok/s · TBT = time between tokens · "
    "Active = average active requests · Done = completed requests · Window = measured for"
)


def _long_lines(console: Console, d: ReportData) -> None:
    for status, c in long_rows(d):
        phase, ctx, n, label, total, per_req, ttft, tbt, active, done, tokens, window = c
        head = Text.assemble((f"{phase} {ctx} × {n}: ", "bold"), (label, STATUS_STYLES.get(status, "")))
        if status != "valid":
            console.print(head)
        elif phase == "Prefill":
            console.print(head, f"· {total} prompt tok/s · TTFT {ttft}")
        else:
            console.print(head, f"· {total} tok/s total · {per_req} per request · TTFT {ttft} · TBT {tbt} · "
                                f"{active} active · {done} completed · {tokens} tokens in {window}")


def _long_table(console: Console, d: ReportData) -> None:
    if not (d.prefill or d.decode):
        return
    _section(console, "All measurements", LONG_NOTE)
    if console.width < NARROW:
        _long_lines(console, d)
        return
    compact = console.width < WIDE
    if compact:
        table = Table(header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    else:
        table = Table(header_style="bold", show_edge=False)
    for i, name in enumerate(LONG_COLUMNS):
        table.add_column(COMPACT[name] if compact else name, justify="left" if i in (0, 3) else "right", no_wrap=compact)
    for status, cells in long_rows(d):
        if compact and cells[0] == "Sustained decode":
            cells = ["Decode", *cells[1:]]
        style = STATUS_STYLES.get(status, "")
        table.add_row(*cells[:3], Text(cells[3], style=style), *cells[4:])
    console.print(table)
    if compact:
        console.print(Text(COMPACT_NOTE, style="dim"))


def slo_sections(console: Console, tables: list) -> None:
    """The SLO, capacity, frontier and engine tables (core/report/slo_report.py)."""
    for t in tables:
        _section(console, t.title, t.caption)
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for h, a in zip(t.header, t.align):
            table.add_column(h, justify="right" if a == "r" else "left")
        for row in t.rows:
            table.add_row(*row)
        console.print(table)


def render_data(d: ReportData, console: Console) -> None:
    """Print an already loaded report."""
    _header(console, d)
    _prefill(console, d)
    _matrix(console, d)
    slo_sections(console, slo_tables(d.slo))
    _long_table(console, d)
    render_points(console, [p for p in d.points if p["arrival"] != "trace"], STATUS_STYLES)  # trace points: their own section
    render_traces(console, d.traces, STATUS_STYLES)
    render_workload(console, d.workload, STATUS_STYLES)
    if not (d.prefill or d.decode or d.points or d.workload.reuse):
        console.print()
        console.print(Text("No measurements saved for this run yet.", style="yellow"))


def render_text(store: Store, run_id: str | None, console: Console) -> None:
    """Print the report of ``run_id`` (prefix ok; ``None`` = latest run) to ``console``."""
    render_data(load_report(store, run_id), console)
