"""The report as one self-contained HTML page: the tables of the text report plus inline SVG charts.

Everything is inline (CSS, SVG); there is no script and nothing to fetch, so the file opens
offline, can be mailed or attached to an issue, and prints.
"""

from __future__ import annotations

import datetime as dt

from infermatrix import __version__
from infermatrix.core.report.charts import report_charts
from infermatrix.core.report.data import ReportData, load_report
from infermatrix.core.report.html_page import esc, page, table
from infermatrix.core.report.layout import (
    LONG_COLUMNS,
    LONG_NOTE,
    cell_notes,
    header_sections,
    legend_lines,
    long_rows,
    matrix_cell,
    title_lines,
)
from infermatrix.core.report.frontier_chart import frontier_charts
from infermatrix.core.report.load_sections import Note, load_sections, rate_points
from infermatrix.core.report.openloop_chart import openloop_chart
from infermatrix.core.report.slo_report import SloReport, SloTable, slo_tables
from infermatrix.core.store import Store

__all__ = ["render_html", "html_of"]


def _facts(d: ReportData) -> str:
    cards = []
    for name, fields in header_sections(d):
        rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in fields)
        cards.append(f'<section class="facts-{esc(name.lower())}"><h3>{esc(name)}</h3><dl>{rows}</dl></section>')
    out = f'<div class="facts">{"".join(cards)}</div>'
    if d.run.get("launch_command"):
        out += f'<h2 id="launch">Launch command</h2><pre><code>{esc(d.run["launch_command"])}</code></pre>'
    return out


def _prefill(d: ReportData) -> str:
    if not d.prefill:
        return ""
    rows, classes = [], []
    for status, c in long_rows(d)[: len(d.prefill)]:
        rows.append([f"{c[1]} context", c[4], c[6], c[3]])
        classes.append(f"st-{status}")
    return (
        '<h2 id="prefill">Prefill</h2><p class="caption">prompt tok/s by context length</p>'
        + table(["Context", "Prompt tok/s", "TTFT", "Status"], rows, align="rrrl", cls="prefill", row_classes=classes)
    )


def _matrix(d: ReportData) -> str:
    if not d.decode:
        return ""
    head = '<th scope="col">Context</th>' + "".join(f'<th scope="col">{n}</th>' for n in d.concurrencies)
    body = []
    for ctx in d.contexts:
        cells = [d.cell(ctx, n) for n in d.concurrencies]
        label = next(r["context_label"] for r in cells if r is not None)
        tds = []
        for r in cells:
            first, second, status = matrix_cell(r)
            if second is not None:
                tds.append(f'<td class="st-{status}"><span class="tps">{esc(first)}</span><span class="ttft">{esc(second)}</span></td>')
            else:
                tds.append(f'<td class="st-{esc(status)}">{esc(first)}</td>')
        body.append(f'<tr><th scope="row">{esc(label)}</th>{"".join(tds)}</tr>')
    legend = "".join(f"<p>{esc(line)}</p>" for line in legend_lines(d))
    notes = cell_notes(d)
    listed = f'<ul class="notes">{"".join(f"<li>{esc(n)}</li>" for n in notes)}</ul>' if notes else ""
    return (
        '<h2 id="decode">Sustained decode</h2>'
        '<p class="caption">total tok/s · rows are context length, columns are simultaneous requests</p>'
        f'<div class="scroll"><table class="matrix"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
        f'<div class="legend">{legend}</div>{listed}'
    )


def _charts(d: ReportData) -> str:
    charts, notes = report_charts(d)
    if not charts:
        return ""
    figures = "".join(
        f'<figure class="chart" data-chart="{esc(c.chart_id)}"><figcaption><b>{esc(c.title)}</b>{esc(c.caption)}</figcaption>{c.svg}</figure>'
        for c in charts
    )
    extra = "".join(f'<p class="muted">{esc(n)}</p>' for n in notes)
    return f'<h2 id="charts">Charts</h2><div class="charts">{figures}</div>{extra}'


def slo_html(r: SloReport, labels: dict[str, str], many_runs: bool = False) -> str:
    """The SLO, capacity, frontier and engine tables, and one frontier chart per context (docs/slo.md)."""
    out = []
    for t in slo_tables(r, many_runs):
        slug = "".join(ch if ch.isalnum() else "-" for ch in t.title.lower()).strip("-")
        out.append(f'<h2 id="{esc(slug)}">{esc(t.title)}</h2><p class="caption">{esc(t.caption)}</p>'
                   + table(t.header, t.rows, align=t.align, cls="slo"))  # fmt: skip
    charts = frontier_charts(r, labels)
    if charts:
        figures = "".join(
            f'<figure class="chart" data-chart="{esc(cid)}"><figcaption><b>{esc(title)}</b>{esc(caption)}</figcaption>{svg}</figure>'
            for cid, title, caption, svg in charts
        )
        out.append(f'<h2 id="frontier-charts">Frontier charts</h2><div class="charts">{figures}</div>')
    return "".join(out)


def _load(d: ReportData) -> str:
    """The open-loop, trace-replay and workload sections (core/report/load_sections.py), and the open-loop
    latency-vs-rate chart under the open-loop table."""
    out = []
    for s in load_sections(d):
        out.append(f'<h2 id="{esc(s.slug)}">{esc(s.title)}</h2>')
        first = True
        for b in s.blocks:
            if isinstance(b, SloTable):
                classes = [f"st-{st}" for st in s.statuses] if first else None  # the section's main table: a row per point
                out.append(f'<p class="caption">{esc(b.caption)}</p>'
                           + table(b.header, b.rows, align=b.align, cls=s.slug if first else f"{s.slug}-more", row_classes=classes))  # fmt: skip
                first = False
            elif isinstance(b, Note):
                out.append(f'<p class="muted">{esc(b.text)}</p>')
            else:
                out.append(f"<p>{esc(b)}</p>")
        chart = openloop_chart(rate_points(d)) if s.slug == "open-loop" else None
        if chart:
            cid, caption, svg = chart
            out.append(f'<div class="charts"><figure class="chart" data-chart="{esc(cid)}"><figcaption><b>Latency vs rate</b>'
                       f"{esc(caption)}</figcaption>{svg}</figure></div>")  # fmt: skip
    return "".join(out)


def _long(d: ReportData) -> str:
    if not (d.prefill or d.decode):
        if d.points or d.workload.reuse:
            return ""
        return '<p class="muted">No measurements saved for this run yet.</p>'
    lines = long_rows(d)
    rows = [[*map(esc, c[:3]), f'<span class="st-{esc(s)}">{esc(c[3])}</span>', *map(esc, c[4:])] for s, c in lines]
    return (
        f'<h2 id="all">All measurements</h2><p class="caption">{esc(LONG_NOTE)}</p>'
        + table(LONG_COLUMNS, rows, align="llrl" + "r" * 8, cls="long", row_classes=[f"st-{s}" for s, _ in lines], raw=True)
    )


def html_of(d: ReportData) -> str:
    """The page for an already loaded report."""
    title, second, summary = title_lines(d)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = (
        f'<header><h1>{esc(title)}</h1><p class="subtitle">{esc(second)}</p><p class="summary">{esc(summary)}</p></header>'
        + _facts(d) + _prefill(d) + _matrix(d) + _charts(d)
        + slo_html(d.slo, {d.run_id: f"{d.run_id} ({d.run.get('engine') or '?'})"}) + _long(d) + _load(d)
        + f"<footer>Run {esc(d.run_id)} · generated by infermatrix {esc(__version__)} at {now} from the database's views. "
        "A self-contained page: no scripts, nothing loaded from the network.</footer>"
    )
    return page(f"{title} · {second} · {d.run_id}", body)


def render_html(store: Store, run_id: str | None) -> str:
    """The report of ``run_id`` (prefix ok; ``None`` = latest run) as an HTML document."""
    return html_of(load_report(store, run_id))
