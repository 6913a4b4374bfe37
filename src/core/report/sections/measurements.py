"""The All measurements section (every prefill and decode row, one line each), or the notice that a run has
nothing measured."""

from __future__ import annotations

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.layout import LONG_COLUMNS, LONG_NOTE, long_rows
from infermatrix.core.report.model import Notice, Section, Table

__all__ = ["measurements_section", "nothing_section", "NOTHING_MEASURED"]

NOTHING_MEASURED = "No measurements saved for this run yet."


def measurements_section(d: ReportData) -> Section | None:
    if not (d.prefill or d.decode):
        return None
    lines = long_rows(d)
    table = Table(list(LONG_COLUMNS), [c for _, c in lines], "llrl" + "r" * 8, caption=LONG_NOTE, name="long",
                  statuses=[s for s, _ in lines], status_col=3)  # fmt: skip
    return Section("all", "All measurements", [table])


def nothing_section(d: ReportData) -> Section | None:
    """A bare notice when the run has no prefill, decode, point or workload row."""
    if d.prefill or d.decode or d.points or d.bursts or d.workload.reuse:
        return None
    return Section("", "", [Notice(NOTHING_MEASURED)])
