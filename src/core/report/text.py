"""The terminal report (rich), laid out like the reference report: the header, then the report's sections
(core/report/sections/) drawn block by block."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group, JustifyMethod
from rich.table import Table as Table_
from rich.text import Text

from infermatrix.core.report.data import ReportData, load_report
from infermatrix.core.report.layout import header_sections, title_lines
from infermatrix.core.report.model import Block, Bullets, Cell, Legend, Note, Notice, Paragraph, Section, Table
from infermatrix.core.report.sections import report_sections
from infermatrix.core.store import Store

__all__ = ["render_text", "render_data", "draw_sections", "STATUS_STYLES"]

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
        grid = Table_.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        for label, value in fields:
            grid.add_row(label, value)
        console.print(grid)
    if d.run.get("launch_command"):
        _section(console, "Launch command")
        # soft_wrap: a long command stays copy-pasteable instead of being folded with padding.
        console.print(Text(d.run["launch_command"]), soft_wrap=True)


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


def _long_lines(console: Console, t: Table) -> None:
    for status, c in zip(t.statuses, t.rows):
        phase, ctx, n, label, total, per_req, ttft, tbt, active, done, tokens, window = c
        head = Text.assemble((f"{phase} {ctx} × {n}: ", "bold"), (str(label), STATUS_STYLES.get(status, "")))
        if status != "valid":
            console.print(head)
        elif phase == "Prefill":
            console.print(head, f"· {total} prompt tok/s · TTFT {ttft}")
        else:
            console.print(head, f"· {total} tok/s total · {per_req} per request · TTFT {ttft} · TBT {tbt} · "
                                f"{active} active · {done} completed · {tokens} tokens in {window}")


def _long_table(console: Console, t: Table) -> None:
    """All measurements, by the console's width: the reference's long headers, compact headers, or one line each."""
    if console.width < NARROW:
        _long_lines(console, t)
        return
    compact = console.width < WIDE
    if compact:
        table = Table_(header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    else:
        table = Table_(header_style="bold", show_edge=False)
    for i, name in enumerate(t.header):
        table.add_column(COMPACT[name] if compact else name, justify=_JUSTIFY[t.align[i]], no_wrap=compact)
    for status, row in zip(t.statuses, t.rows):
        cells = list(map(str, row))  # the long table's cells are text
        if compact and cells[0] == "Sustained decode":
            cells = ["Decode", *cells[1:]]
        table.add_row(*cells[:3], Text(cells[3], style=STATUS_STYLES.get(status, "")), *cells[4:])
    console.print(table)
    if compact:
        console.print(Text(COMPACT_NOTE, style="dim"))


_JUSTIFY: dict[str, JustifyMethod] = {"l": "left", "r": "right"}
_LIST = {"box": box.SIMPLE_HEAD, "show_edge": False, "header_style": "bold", "pad_edge": False}
# How each kind of table (Table.name, the HTML report's table class) looks on a terminal; a list table (the
# default) never folds a number, only the label column of the tables named in _FOLDS.
_LOOKS: dict[str, dict[str, Any]] = {
    "prefill": {"show_edge": False, "header_style": "bold"},
    "matrix": {"show_lines": True, "header_style": "bold"},
    "slo": {"box": box.SIMPLE_HEAD, "show_edge": False},
}
_FOLDS = {"open-loop", "trace-replay"}


def _column(t: Table, i: int) -> dict[str, Any]:
    justify = _JUSTIFY[t.align[i]]
    if t.name in _LOOKS:
        return {"justify": justify, **({"style": "bold"} if t.grid and i == 0 else {})}  # a grid's row labels in bold
    extra = {"min_width": len("client_bound") if i == t.status_col else len(t.header[i])} if t.name == "open-loop" else {}
    return {"justify": justify, "no_wrap": not (i == 0 and t.name in _FOLDS), **extra}


def _cell(t: Table, k: int, i: int, c: str | Cell) -> str | Text:
    if isinstance(c, Cell):  # a grid cell: the number in bold over its second line, or a status in its look
        if c.under is None:
            return Text(c.text, style=STATUS_STYLES.get(c.status, ""))
        return Text.assemble((c.text, "bold"), "\n", (c.under, "dim"))
    if i == t.status_col and t.statuses:
        return Text(c, style=STATUS_STYLES.get(t.statuses[k], ""))
    return c


def _table(console: Console, t: Table) -> None:
    if t.caption:
        console.print(Text(f"  {t.caption}" if t.name == "trace-replay-more" else t.caption, style="dim"))  # a trace's own arrivals
    if t.name == "long":
        _long_table(console, t)
        return
    table = Table_(**_LOOKS.get(t.name, _LIST))
    for i, h in enumerate(t.header):
        table.add_column(h, **_column(t, i))
    for k, row in enumerate(t.rows):
        table.add_row(*(_cell(t, k, i, c) for i, c in enumerate(row)))
    console.print(table)


def _block(console: Console, b: Block) -> None:
    if isinstance(b, Table):
        _table(console, b)
    elif isinstance(b, Note):
        console.print(Text(f"  {b.text}", style="dim"), soft_wrap=True)
    elif isinstance(b, Paragraph):
        parts = [p if isinstance(p, str) else (p.text, STATUS_STYLES.get(p.status, "")) for p in b.parts]
        console.print(Text.assemble(*parts), soft_wrap=True)
    elif isinstance(b, Legend):
        for line in b.lines:
            console.print(Text(line, style="dim"))
    elif isinstance(b, Bullets):
        console.print(Group(*(Text(f"• {n}") for n in b.items)))
    elif isinstance(b, Notice):
        console.print(Text(b.text, style="yellow"))
    # Charts: the HTML report's; the tables they are drawn from are here


def draw_sections(console: Console, sections: list[Section]) -> None:
    """Print report sections (core/report/model.py): a blank line, the title, then each block."""
    for s in sections:
        console.print()
        if s.title:
            console.print(Text(s.title, style="bold underline"))
        for b in s.blocks:
            _block(console, b)


def render_data(d: ReportData, console: Console) -> None:
    """Print an already loaded report."""
    _header(console, d)
    draw_sections(console, report_sections(d))


def render_text(store: Store, run_id: str | None, console: Console) -> None:
    """Print the report of ``run_id`` (prefix ok; ``None`` = latest run) to ``console``."""
    render_data(load_report(store, run_id), console)
