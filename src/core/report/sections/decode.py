"""The Sustained decode section: the matrix of total tok/s (and TTFT) by context and concurrency (decode_matrix),
what each status means, and why cells were discarded."""

from __future__ import annotations

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.layout import cell_notes, legend_lines, matrix_cell
from infermatrix.core.report.model import Block, Bullets, Cell, Legend, Section, Table

__all__ = ["decode_section", "DECODE_CAPTION"]

DECODE_CAPTION = "total tok/s · rows are context length, columns are simultaneous requests"


def decode_section(d: ReportData) -> Section | None:
    if not d.decode:
        return None
    rows: list[list[str | Cell]] = []
    for ctx in d.contexts:
        cells = [d.cell(ctx, n) for n in d.concurrencies]
        label = next(r["context_label"] for r in cells if r is not None)
        rows.append([label, *(Cell(*matrix_cell(d, r)) for r in cells)])
    table = Table(["Context", *map(str, d.concurrencies)], rows, "r" * (1 + len(d.concurrencies)), caption=DECODE_CAPTION,
                  name="matrix", grid=True)  # fmt: skip
    blocks: list[Block] = [table, Legend(legend_lines(d))]
    notes = cell_notes(d)
    if notes:
        blocks.append(Bullets(notes))
    return Section("decode", "Sustained decode", blocks)
