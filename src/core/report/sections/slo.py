"""The SLO, capacity, frontier, engine-statistics and SLO-search sections (their tables: core/report/slo_report.py),
and with run labels the frontier charts (HTML); the single-run report and compare both draw these."""

from __future__ import annotations

from infermatrix.core.report.frontier_chart import frontier_charts
from infermatrix.core.report.model import Chart, Charts, Section, Table
from infermatrix.core.report.slo_report import SloReport, slo_tables

__all__ = ["slo_sections", "slug"]


def slug(title: str) -> str:
    """An HTML anchor from a title: ``"SLO capacity" -> "slo-capacity"``."""
    return "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")


def slo_sections(r: SloReport, many_runs: bool = False, labels: dict[str, str] | None = None) -> list[Section]:
    """One section per table; ``labels`` (run id -> legend label) adds the frontier charts, one per context."""
    out = [Section(slug(t.title), t.title, [Table(t.header, t.rows, t.align, caption=t.caption, name="slo")])
           for t in slo_tables(r, many_runs)]  # fmt: skip
    charts = frontier_charts(r, labels) if labels is not None else []
    if charts:
        out.append(Section("frontier-charts", "Frontier charts", [Charts([Chart(*c) for c in charts])]))
    return out
