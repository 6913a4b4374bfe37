"""The report as GitHub-flavoured Markdown (same content as the terminal report): the header, then the report's
sections (core/report/sections/) block by block."""

from __future__ import annotations

from collections.abc import Sequence

from infermatrix.core.report.data import ReportData, load_report
from infermatrix.core.report.layout import header_sections, title_lines
from infermatrix.core.report.model import Block, Bullets, Cell, Legend, Note, Notice, Paragraph, Section, Table
from infermatrix.core.report.sections import report_sections
from infermatrix.core.store import Store

__all__ = ["render_markdown", "markdown_of", "markdown_sections", "md_table", "md_escape"]


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

    out += markdown_sections(report_sections(d))
    return "\n".join(out)


def _cell(c: str | Cell) -> str:
    if not isinstance(c, Cell):
        return md_escape(c)
    if c.under:
        return f"{md_escape(c.text)}<br>{md_escape(c.under)}"
    return f"*{md_escape(c.text)}*" if c.status != "missing" else md_escape(c.text)  # statuses in italics, apart from numbers


def _block(b: Block) -> list[str]:
    if isinstance(b, Table):
        return [md_escape(b.caption), "", md_table(b.header, [[_cell(c) for c in row] for row in b.rows], b.align, escape=False), ""]
    if isinstance(b, Note):
        return [f"- {md_escape(b.text)}", ""]
    if isinstance(b, Paragraph):
        return [md_escape(b.text), ""]
    if isinstance(b, Legend):
        return [f"{md_escape(line)}  " for line in b.lines] + [""]
    if isinstance(b, Bullets):
        return [f"- {md_escape(n)}" for n in b.items] + [""]
    if isinstance(b, Notice):
        return [f"_{md_escape(b.text)}_", ""]
    return []  # Charts: the HTML report's


def markdown_sections(sections: list[Section]) -> list[str]:
    """Report sections (core/report/model.py) as Markdown lines: a ``##`` title, then each block."""
    out: list[str] = []
    for s in sections:
        if s.title:
            out += [f"## {md_escape(s.title)}", ""]
        for b in s.blocks:
            out += _block(b)
    return out


def render_markdown(store: Store, run_id: str | None) -> str:
    """The report of ``run_id`` (prefix ok; ``None`` = latest run) as Markdown."""
    return markdown_of(load_report(store, run_id))
