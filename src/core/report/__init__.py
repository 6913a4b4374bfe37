"""Reports, built only from the store's SQL views and runs table.

One run: ``render_text`` (rich), ``render_markdown``, ``render_json``, ``render_html`` (one
self-contained page with inline SVG charts). Several runs (engine_comparison view; the first run
is the baseline): ``render_compare_text``, ``render_compare_markdown``, ``render_compare_html``,
``render_compare_json``.
"""

from infermatrix.core.report.compare import render_compare_markdown, render_compare_text
from infermatrix.core.report.compare_data import Comparison, load_comparison
from infermatrix.core.report.compare_html import render_compare_html
from infermatrix.core.report.data import ReportData, fmt_ms, fmt_tps, load_report
from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import render_compare_json, render_json
from infermatrix.core.report.markdown import render_markdown
from infermatrix.core.report.text import render_text

__all__ = [
    "ReportData",
    "load_report",
    "render_text",
    "render_markdown",
    "render_json",
    "render_html",
    "Comparison",
    "load_comparison",
    "render_compare_text",
    "render_compare_markdown",
    "render_compare_html",
    "render_compare_json",
    "fmt_tps",
    "fmt_ms",
]
