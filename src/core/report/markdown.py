"""The report as GitHub-flavoured Markdown (same content as the terminal report)."""

from __future__ import annotations

from collections.abc import Sequence

from infermatrix.core.report.data import ReportData, load_report
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
from infermatrix.core.report.load_sections import LoadSection, Note, load_sections
from infermatrix.core.report.slo_report import SloTable, slo_tables
from infermatrix.core.store import Store

__all__ = ["render_markdown", "markdown_of", "md_table", "md_escape"]


def md_escape(text: str) -> str:
    """Make text safe inside a table cell: a pipe would end the cell, a newline the row, and
    ``<redacted>`` would vanish as an unknown HTML tag; two ``~`` (the doubtful mark) would strike through what is between."""
    return (
        text.replace("\\", "\\\\").replace("|", "\\|").replace("&", "&amp;")
        .replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ").replace("~", "\\~")
    )


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str] | None = None,
             escape: bool = True) -> str:
    """A GitHub table; ``align`` per column: 'l' or 'r'. With ``escape=False`` cells are taken as
    already-escaped Markdown (the matrix builds its two-line cells with ``<br>``)."""
    align = align or ["l"] * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    esc = md_escape if escape else (lambda t: t)
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "| " + " | ".join(rule) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(esc(c) for c in row) + " |")
    return "\n".join(lines)


def _fence(text: str) -> str:
    # A fence longer than any backtick run inside, so the command can't close it early.
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}sh\n{text}\n{ticks}"


def markdown_of(d: ReportData) -> str:
    """Markdown for an already loaded report."""
    title, second, summary = title_lines(d)
    out = [f"# {title}", "", f"**{md_escape(second)}**", "", md_escape(summary), ""]
    for name, fields in header_sections(d):
        rows = [[f"**{md_escape(k)}**", md_escape(v)] for k, v in fields]
        out += [f"### {name}", "", md_table(["", ""], rows, escape=False), ""]
    if d.run.get("launch_command"):
        out += ["### Launch command", "", _fence(d.run["launch_command"]), ""]

    if d.prefill:
        rows = [[f"{c[1]} context", c[4], c[6], c[3]] for _, c in long_rows(d)[: len(d.prefill)]]
        out += ["## Prefill", "", "prompt tok/s by context length", "",
                md_table(["Context", "Prompt tok/s", "TTFT", "Status"], rows, "rrrl"), ""]

    if d.decode:
        rows = []
        for ctx in d.contexts:
            cells = [d.cell(ctx, n) for n in d.concurrencies]
            label = next(r["context_label"] for r in cells if r is not None)
            shown = []
            for r in cells:
                first, under, status = matrix_cell(r)
                if under:
                    shown.append(f"{md_escape(first)}<br>{md_escape(under)}")
                else:  # statuses in italics, so they stand apart from numbers
                    shown.append(f"*{md_escape(first)}*" if status != "missing" else md_escape(first))
            rows.append([md_escape(label), *shown])
        out += ["## Sustained decode", "", "total tok/s · rows are context length, columns are simultaneous requests", "",
                md_table(["Context", *map(str, d.concurrencies)], rows, "r" * (1 + len(d.concurrencies)), escape=False), ""]
        out += [f"{md_escape(line)}  " for line in legend_lines(d)]
        notes = cell_notes(d)
        if notes:
            out += [""] + [f"- {md_escape(n)}" for n in notes]
        out.append("")

    out += slo_markdown(slo_tables(d.slo))
    if d.prefill or d.decode:
        rows = [cells for _, cells in long_rows(d)]
        out += ["## All measurements", "", LONG_NOTE, "", md_table(LONG_COLUMNS, rows, "llrl" + "r" * 8), ""]
    elif not (d.points or d.workload.reuse):
        out += ["_No measurements saved for this run yet._", ""]
    out += load_markdown(load_sections(d))
    return "\n".join(out)


def load_markdown(sections: list[LoadSection]) -> list[str]:
    """The open-loop, trace-replay and workload sections (core/report/load_sections.py) as Markdown lines."""
    out: list[str] = []
    for s in sections:
        out += [f"## {md_escape(s.title)}", ""]
        for b in s.blocks:
            if isinstance(b, SloTable):
                out += [md_escape(b.caption), "", md_table(b.header, b.rows, b.align), ""]
            elif isinstance(b, Note):
                out += [f"- {md_escape(b.text)}", ""]
            else:
                out += [md_escape(b), ""]
    return out


def slo_markdown(tables: list) -> list[str]:
    """The SLO, capacity, frontier and engine tables (core/report/slo_report.py) as Markdown lines."""
    out: list[str] = []
    for t in tables:
        out += [f"## {md_escape(t.title)}", "", md_escape(t.caption), "", md_table(t.header, t.rows, t.align), ""]
    return out


def render_markdown(store: Store, run_id: str | None) -> str:
    """The report of ``run_id`` (prefix ok; ``None`` = latest run) as Markdown."""
    return markdown_of(load_report(store, run_id))
