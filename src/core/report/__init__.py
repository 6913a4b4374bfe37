"""Reports, built only from the store's SQL views and runs table.

``render_text`` (rich), ``render_markdown``, ``render_json``, ``render_html`` for one run;
``render_compare_text`` / ``render_compare_markdown`` for several (engine_comparison view).
"""

from infermatrix.core.report.compare import load_comparison, render_compare_markdown, render_compare_text
from infermatrix.core.report.data import ReportData, fmt_ms, fmt_tps, load_report
from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import render_json
from infermatrix.core.report.markdown import render_markdown
from infermatrix.core.report.text import render_text

__all__ = [
    "ReportData",
    "load_report",
    "render_text",
    "render_markdown",
    "render_json",
    "render_html",
    "load_comparison",
    "render_compare_text",
    "render_compare_markdown",
    "fmt_tps",
    "fmt_ms",
]
