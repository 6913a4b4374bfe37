"""``compare`` of stored runs rendered in every format at once, for tests that check a section shows in all four."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from infermatrix.core.report.compare import render_compare_markdown, render_compare_text
from infermatrix.core.report.compare_html import render_compare_html
from infermatrix.core.report.json_report import render_compare_json
from infermatrix.core.store import Store


def compare_every_format(db: Path, run_ids: list[str]) -> tuple[dict, tuple[str, str, str]]:
    """The JSON document and the (text, Markdown, HTML) renderings of ``compare`` over ``run_ids`` (text 250 wide)."""
    with Store(db, read_only=True) as s:
        doc = render_compare_json(s, run_ids)
        console = Console(file=io.StringIO(), width=250, color_system=None)
        render_compare_text(s, run_ids, console)
        return doc, (console.file.getvalue(), render_compare_markdown(s, run_ids), render_compare_html(s, run_ids))
