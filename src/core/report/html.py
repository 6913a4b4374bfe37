"""The report as a standalone HTML page: the terminal report, recorded and exported by rich."""

from __future__ import annotations

import io

from rich.console import Console

from infermatrix.core.report.data import ReportData, load_report
from infermatrix.core.report.text import render_data
from infermatrix.core.store import Store

__all__ = ["render_html", "html_of"]


def html_of(d: ReportData, width: int = 220) -> str:
    # A recording console that writes nowhere: same layout and colours as the terminal report.
    console = Console(record=True, width=width, file=io.StringIO(), color_system="truecolor")
    render_data(d, console)
    return console.export_html(inline_styles=True)


def render_html(store: Store, run_id: str | None, width: int = 220) -> str:
    """The report of ``run_id`` (prefix ok; ``None`` = latest run) as an HTML document."""
    return html_of(load_report(store, run_id), width)
