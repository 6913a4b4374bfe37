"""The Prefill section: prompt tok/s and TTFT by context length (the prefill_list view)."""

from __future__ import annotations

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import PM
from infermatrix.core.report.layout import long_rows, prefill_notes
from infermatrix.core.report.model import Block, Note, Section, Table

__all__ = ["prefill_section", "PM_CAPTION"]

PM_CAPTION = f"{PM} the 95 % interval from the point's cold probes"  # added to the caption where a ± shows


def prefill_section(d: ReportData) -> Section | None:
    if not d.prefill:
        return None
    lines = long_rows(d)[: len(d.prefill)]  # the prefill rows of All measurements, so both say the same
    caption = "prompt tok/s by context length"
    if any(PM in c[4] + c[6] for _, c in lines):  # said where a ± shows (the decode legend may be absent: a prefill-only run)
        caption += f"; {PM_CAPTION}"
    table = Table(["Context", "Prompt tok/s", "TTFT", "Status"], [[f"{c[1]} context", c[4], c[6], c[3]] for _, c in lines], "rrrl",
                  caption=caption, name="prefill", statuses=[s for s, _ in lines], status_col=3)  # fmt: skip
    blocks: list[Block] = [table, *(Note(n) for n in prefill_notes(d))]  # why a point is not valid, under the table
    return Section("prefill", "Prefill", blocks)
