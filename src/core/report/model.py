"""What a report section says, before any format draws it: the one model that the text (rich), Markdown and HTML
renderers all draw (text.py, markdown.py, html.py); the JSON report carries the rows themselves.

A :class:`Section` is a title and blocks. Cells are already formatted text (core/report/fmt.py), so every format
shows the same numbers; a renderer only decides how a block looks. Sections a run doesn't have are not built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Cell", "Styled", "Table", "Note", "Paragraph", "Legend", "Bullets", "Chart", "Charts", "Notice", "Section", "Block"]


@dataclass
class Cell:
    """A grid cell (the decode matrix): a number over a second line, or a status standing in for a number."""

    text: str
    under: str | None
    status: str


@dataclass
class Styled:
    """Words of a paragraph drawn in a status's look (the workload pass's status)."""

    text: str
    status: str


@dataclass
class Table:
    """A table: header, rows of formatted cells, 'l'/'r' per column; its caption is said above it.

    ``name`` says what kind of table it is (the HTML class, and the text report's look for it); ``statuses``, one
    per row, colour rows (HTML row classes); ``status_col`` is the column whose cell says the status (coloured in
    the text report). A ``grid`` table's first column labels its rows and its cells may be :class:`Cell`."""

    header: list[str]
    rows: Sequence[Sequence[str | Cell]]
    align: str
    caption: str = ""
    name: str = ""
    statuses: list[str] = field(default_factory=list)
    status_col: int | None = None
    grid: bool = False


@dataclass
class Note:
    """A muted line under a table (a reason, what a replay skipped)."""

    text: str


@dataclass
class Paragraph:
    """A line of prose; some of its words may be a :class:`Styled` status."""

    parts: list[str | Styled]

    @property
    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text for p in self.parts)


@dataclass
class Legend:
    """Lines that explain the table above (what each status means), one after another."""

    lines: list[str]


@dataclass
class Bullets:
    """A list of notes (why each cell was discarded)."""

    items: list[str]


@dataclass
class Chart:
    """An inline SVG chart (HTML only): its id, title, caption and drawing."""

    chart_id: str
    title: str
    caption: str
    svg: str


@dataclass
class Charts:
    """Charts side by side (HTML only; the other formats have the tables they are drawn from)."""

    charts: list[Chart]


@dataclass
class Notice:
    """A line standing alone, in place of sections a run does not have ("No measurements saved …")."""

    text: str


Block = Table | Note | Paragraph | Legend | Bullets | Charts | Notice


@dataclass
class Section:
    """One part of a report: ``slug`` is its HTML anchor; a section without a title is a bare block (a notice)."""

    slug: str
    title: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def html_only(self) -> bool:
        """Nothing but charts: the text and Markdown reports leave it out."""
        return all(isinstance(b, Charts) for b in self.blocks)
