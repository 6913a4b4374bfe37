"""The open-loop, trace-replay and workload sections of the Markdown and HTML reports, as renderer-neutral blocks.

The text report prints the same sections with rich (openloop.py, trace_report.py, workload_report.py); all three
build their cells with the same row helpers from the rows ReportData already loaded, so every number has one
implementation. A section is a title and blocks: a paragraph (``str``), a muted note (``Note``) or a table
(``SloTable``, its caption shown above it). Sections a run doesn't have are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.openloop import POINT_CAPTION, POINT_HEADERS, POINTS_TITLE, point_cells, point_reasons
from infermatrix.core.report.slo_report import SloTable
from infermatrix.core.report.trace_report import ARRIVAL_HEADERS, TRACE_CAPTION, TRACE_HEADERS, arrival_rows, trace_cells, trace_notes
from infermatrix.core.report.workload_report import (
    BAND_CAPTION,
    BAND_HEADERS,
    TURN_CAPTION,
    TURN_HEADERS,
    band_cells,
    pass_line,
    turn_cells,
)

__all__ = ["Note", "LoadSection", "load_sections", "rate_points"]


@dataclass
class Note:
    """A muted line under a table (a reason, what a replay skipped)."""

    text: str


@dataclass
class LoadSection:
    slug: str  # the HTML anchor
    title: str
    blocks: list[str | Note | SloTable] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)  # per row of the section's first table (HTML row classes)


def rate_points(d: ReportData) -> list[dict[str, Any]]:
    """The open-loop points of the run that are not trace replays (those have their own section), in point order."""
    return [p for p in d.points if p["arrival"] != "trace"]


def _points(d: ReportData) -> LoadSection | None:
    points = rate_points(d)
    if not points:
        return None
    table = SloTable("", POINT_CAPTION, list(POINT_HEADERS), [point_cells(p) for p in points], "l" + "r" * 6 + "l")
    return LoadSection("open-loop", POINTS_TITLE, [table, *map(Note, point_reasons(points))], [p["status"] for p in points])


def _traces(d: ReportData) -> LoadSection | None:
    if not d.traces:
        return None
    blocks: list[str | Note | SloTable] = [SloTable("", TRACE_CAPTION, list(TRACE_HEADERS), [trace_cells(t) for t in d.traces], "l" + "r" * 8 + "l")]
    for t in d.traces:
        blocks.append(Note(trace_notes(t)))
        caption, rows = arrival_rows(t)
        if rows:
            blocks.append(SloTable("", f"{t['label']}: {caption}", list(ARRIVAL_HEADERS), rows, "lrrl"))
    return LoadSection("trace-replay", "Trace replay", blocks, [t["status"] for t in d.traces])


def _workload(d: ReportData) -> LoadSection | None:
    w, r = d.workload, d.workload.reuse
    if r is None:
        return None
    before, after = pass_line(r)
    blocks: list[str | Note | SloTable] = [f"{before}{r['status']}{after}"]
    if w.bands:
        blocks.append(SloTable("", BAND_CAPTION, list(BAND_HEADERS), [band_cells(b) for b in w.bands], "l" + "r" * 4))
    if w.turns:
        blocks.append(SloTable("", TURN_CAPTION, list(TURN_HEADERS), [turn_cells(t) for t in w.turns], "r" * len(TURN_HEADERS)))
    return LoadSection("workload", f"Workload {r['workload']}", blocks)


def load_sections(d: ReportData) -> list[LoadSection]:
    """The run's open-loop, trace-replay and workload sections, in the text report's order."""
    return [s for s in (_points(d), _traces(d), _workload(d)) if s is not None]
