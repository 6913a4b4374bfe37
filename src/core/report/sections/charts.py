"""The Charts section of the HTML report: throughput, prefill, the decode heatmap and latency bands (core/report/charts.py)."""

from __future__ import annotations

from infermatrix.core.report.charts import report_charts
from infermatrix.core.report.data import ReportData
from infermatrix.core.report.model import Charts, Note, Section

__all__ = ["charts_section"]


def charts_section(d: ReportData) -> Section | None:
    charts, notes = report_charts(d)
    if not charts:
        return None
    return Section("charts", "Charts", [Charts(charts), *map(Note, notes)])
