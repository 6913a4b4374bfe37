"""One report path (issue 28 item 4): the text, Markdown and HTML reports draw the same sections (core/report/sections/),
so every section's title, every table's caption, headers and cells, and every note appear in all three, in one order.
Before, the text report drew its sections with functions of its own (the arrivals caption of a trace said less there,
and the workload's band column was aligned otherwise)."""

from __future__ import annotations

import io
import re
from html import escape

import pytest
from rich.console import Console

from infermatrix.core.report.data import load_report
from infermatrix.core.report.fmt import DASH, fmt_float2, fmt_ms_plain, fmt_pct, fmt_ratio, fmt_share, fmt_usd
from infermatrix.core.report.html import html_of
from infermatrix.core.report.markdown import markdown_of, md_escape
from infermatrix.core.report.model import Bullets, Cell, Legend, Note, Notice, Paragraph, Table
from infermatrix.core.report.sections import report_sections
from infermatrix.core.report.text import render_data
from infermatrix.core.slo import parse_slo
from infermatrix.core.store.slo_store import save_gpu_hour_price, save_slos
from test_report_load_sections import fill_load_run


@pytest.fixture
def everything(filled):
    """The reference-like run with an SLO and a price, open-loop points, a trace replay and a workload pass."""
    s, run_id, _, _ = filled
    save_slos(s, run_id, [parse_slo("ttft_p99_ms=2000,tpot_p99_ms=12")])
    save_gpu_hour_price(s, run_id, 2.5)
    fill_load_run(s, run_id)
    return load_report(s, run_id)


def _texts(b) -> list[str]:
    """Every piece of text a block says (a renderer may lay it out, never drop or reword it)."""
    if isinstance(b, Table):
        cells = [x for row in b.rows for c in row for x in ((c.text, c.under or "") if isinstance(c, Cell) else (c,))]
        return [b.caption, *b.header, *cells]
    if isinstance(b, Legend):
        return list(b.lines)
    if isinstance(b, Bullets):
        return list(b.items)
    if isinstance(b, (Note, Notice, Paragraph)):
        return [b.text]
    return []


def test_every_format_draws_every_section_the_same(everything):
    d = everything
    out = io.StringIO()
    render_data(d, Console(file=out, width=400, color_system=None))
    text, md, page = out.getvalue(), markdown_of(d), html_of(d)
    sections = report_sections(d)
    assert [s.slug for s in sections] == ["prefill", "decode", "slo-ttft-p99-ms-2000-tpot-p99-ms-12", "slo-capacity",
                                          "throughput-interactivity-frontier", "all", "open-loop", "trace-replay", "workload"]  # fmt: skip
    for s in sections:
        for piece in filter(None, _texts_of(s)):
            assert piece in text, (s.slug, piece)
            assert md_escape(piece) in md, (s.slug, piece)
            assert escape(piece, quote=False) in page.replace("&#x27;", "'").replace("&quot;", '"'), (s.slug, piece)
    # one order: the section titles come in the sections' order in every format
    titles = [s.title for s in sections]
    assert _order(text, [f"\n{t}\n" for t in titles]) and _order(md, [f"## {md_escape(t)}\n" for t in titles])
    assert re.findall(r'<h2 id="([^"]+)">', page) == ["launch", "prefill", "decode", "charts", *[s.slug for s in sections[2:5]],
                                                       "frontier-charts", *[s.slug for s in sections[5:]]]  # fmt: skip


def _texts_of(s) -> list[str]:
    return [s.title, *(x for b in s.blocks for x in _texts(b))]


def _order(doc: str, needles: list[str]) -> bool:
    at = [doc.find(n) for n in needles]
    return -1 not in at and at == sorted(at)


def test_the_one_formatting_module_says_each_number_one_way():
    assert [fmt_ms_plain(v) for v in (6.25, 99.0, 2048.0, None, float("nan"))] == ["6.2", "99.0", "2,048", DASH, DASH]
    assert [fmt_float2(v) for v in (3.833, None, float("nan"))] == ["3.83", DASH, DASH]
    assert (fmt_pct(0.24), fmt_share(0.9731), fmt_usd(0.4123), fmt_usd(12.5), fmt_ratio(1.304)) == ("24.0%", "97.3 %", "$0.412", "$12.50", "×1.30")
    assert {fmt_pct(None), fmt_share(float("nan")), fmt_usd(None), fmt_ratio(None)} == {DASH}


def test_a_run_with_nothing_measured_is_one_notice():
    from infermatrix.core.report.data import ReportData

    d = ReportData(run={"run_id": "x"}, prefill=[], decode=[])
    (only,) = report_sections(d)
    assert only.title == "" and only.blocks == [Notice("No measurements saved for this run yet.")]


def test_a_reference_run_has_no_load_sections(filled):
    s, run_id, _, _ = filled
    assert {x.slug for x in report_sections(load_report(s, run_id))}.isdisjoint({"open-loop", "trace-replay", "workload"})
