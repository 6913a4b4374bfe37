"""The comparison as one self-contained HTML page: ratios coloured better/worse, a ratio heatmap and throughput
curves per run as inline SVG (its JSON: json_report.py)."""

from __future__ import annotations

import math

from infermatrix import __version__
from infermatrix.core.contexts import format_context
from infermatrix.core.report.compare import (
    BEST_CAPTION,
    best_grid,
    footnote_lines,
    measured_by_one_lines,
    one_sided_rows,
    pair_header,
    pair_rows,
    run_lines,
    summary_rows,
    warning_lines,
)
from infermatrix.core.report.compare_tasks import TASK_COMPARE_CAPTION, TASK_COMPARE_HEADERS, task_compare_rows
from infermatrix.core.report.compare_data import Comparison, Pair, describe_run, load_comparison
from infermatrix.core.report.fmt import fmt_ratio, fmt_tps
from infermatrix.core.report.html import html_sections
from infermatrix.core.report.html_page import esc, figure, page, table
from infermatrix.core.report.model import Chart
from infermatrix.core.report.sections import slo_sections
from infermatrix.core.report.sections.burst_compare import burst_compare_section
from infermatrix.core.report.sections.interference import interference_compare_section
from infermatrix.core.report.sections.telemetry_compare import telemetry_compare_section
from infermatrix.core.report.slo_report import load_slo_report
from infermatrix.core.report.svg_heatmap import HeatCell, diverging_colour, heatmap
from infermatrix.core.report.svg_plot import Series, line_chart
from infermatrix.core.store import Store

__all__ = ["render_compare_html", "compare_html_of"]


def _cells(row: list[tuple[str, str | None]]) -> list[str]:
    return [f'<span class="{v}">{esc(t)}</span>' if v else esc(t) for t, v in row]


def _ratio_heatmap(cmp: Comparison, pair: Pair) -> str:
    a, b = cmp.letters[cmp.baseline], cmp.letters[pair.run_b]
    cells = []
    for c in pair.cells:
        ratio = c.values.get("total_tps", (None, None, None))[2]
        if ratio:
            tip = f"{c.context_label} × {c.concurrency}: {b}/{a} total tok/s {fmt_ratio(ratio)}"
            cells.append(HeatCell(c.context_label, str(c.concurrency), math.log(ratio), fmt_ratio(ratio), tip))
    for o in pair.one_sided:
        text = f"only {a if o.valid_in == 'a' else b}"
        cells.append(HeatCell(o.context_label, str(o.concurrency), None, text, f"{o.context_label} × {o.concurrency}: {a} {o.a}, {b} {o.b}", "one-sided"))
    keys = {(c.context_tokens, c.concurrency) for c in pair.cells} | {(o.context_tokens, o.concurrency) for o in pair.one_sided}
    rows = [format_context(t) for t in sorted({k[0] for k in keys})]
    cols = [str(n) for n in sorted({k[1] for k in keys})]
    return heatmap(cells, rows, cols, title=f"{b}/{a} total tok/s per cell", colour=diverging_colour(2.0),
                   legend=(f"×0.5 ({b} slower)", f"×2 ({b} faster)"), diverging=True, chart_id=f"ratio-{b.lower()}")


def _curves(cmp: Comparison) -> str:
    series = []
    for rid, rows in cmp.decode.items():
        letter = cmp.letters[rid]
        for ctx in sorted({k[0] for k in rows}):
            pts = [(float(n), r["total_tps"], f"{letter} {format_context(ctx)} × {n}: {fmt_tps(r['total_tps'])} tok/s")
                   for (c, n), r in sorted(rows.items()) if c == ctx and r["status"] == "valid" and r["total_tps"] is not None]
            if pts:
                series.append(Series(f"{letter} · {format_context(ctx)}", pts))
    return line_chart(series, title="Total tok/s vs requests at once, every run", x_label="requests at once (log 2)",
                      y_label="total tok/s", x_format=lambda v: str(int(round(v))), chart_id="compare-total-tps")


def compare_html_of(cmp: Comparison, slo: str = "") -> str:
    """The page; ``slo`` is the SLO / frontier sections (sections/slo.py), already HTML."""
    body = ["<header><h1>Comparison</h1>", "".join(f'<p class="subtitle">{esc(x)}</p>' for x in run_lines(cmp)), "</header>"]
    for line in warning_lines(cmp):
        body.append(f'<p class="warning">{esc(line)}</p>' if line.startswith("Warning") else f'<p class="muted">{esc(line)}</p>')
    figures = [Chart("compare-total-tps", "Total tok/s per run", "One line per run and context.", _curves(cmp))]
    for pair in cmp.pairs.values():
        b = cmp.letters[pair.run_b]
        body.append(f'<h2 id="pair-{b.lower()}">{esc(b)} against A: {esc(describe_run(cmp.runs[pair.run_b]))}</h2>')
        if pair.cells:
            header = pair_header(cmp, pair)
            body.append(table(header, [_cells(r) for r in pair_rows(pair)], align="r" * len(header), cls="compare", raw=True))
            header, rows = summary_rows(cmp, pair)
            body.append("<h3>Summary</h3>" + table(header, [_cells(r) for r in rows], align="lrl", cls="summary", raw=True))
        else:
            body.append('<p class="muted">No cells valid in both runs.</p>')
        if pair.one_sided:
            header, plain = one_sided_rows(cmp, pair)
            body.append("<h3>Cells only one side could run</h3>" + table(header, plain, align="rrrrl", cls="one-sided"))
        body += [f'<p class="muted">{esc(line)}</p>' for line in measured_by_one_lines(cmp, pair)]
        if cmp.tasks.get(pair.run_b):
            body.append(f'<h3>Tasks</h3><p class="caption">{esc(TASK_COMPARE_CAPTION)}</p>'
                        + table(list(TASK_COMPARE_HEADERS), task_compare_rows(cmp.tasks[pair.run_b]), align="l" + "r" * 10, cls="tasks"))
        if pair.cells or pair.one_sided:
            figures.append(Chart(f"ratio-{b.lower()}", f"{b}/A total tok/s", "Green: B faster, red: slower (log colour scale).",
                                 _ratio_heatmap(cmp, pair)))
    if cmp.best:
        header, grid = best_grid(cmp)
        body.append(f'<h2 id="best">Best run per cell</h2><p class="caption">{esc(BEST_CAPTION)}</p>')
        body.append(table(header, grid, align="r" * len(header), cls="best"))
    body.append(f'<h2 id="charts">Charts</h2><div class="charts">{"".join(map(figure, figures))}</div>')
    body.append(slo)
    body += [f'<p class="muted">{esc(line)}</p>' for line in footnote_lines(cmp)]
    body.append(f"<footer>Generated by infermatrix {esc(__version__)} from the engine_comparison and decode_matrix views. "
                "A self-contained page: no scripts, nothing loaded from the network.</footer>")
    return page("Comparison · " + " · ".join(cmp.runs), "".join(body))


def render_compare_html(store: Store, run_ids: list[str]) -> str:
    cmp = load_comparison(store, run_ids)
    labels = {rid: f"{cmp.letters[rid]}: {rid} ({run.get('engine') or '?'})" for rid, run in cmp.runs.items()}
    extra = [s for s in (burst_compare_section(cmp), interference_compare_section(cmp), telemetry_compare_section(cmp)) if s is not None]
    sections = [*slo_sections(load_slo_report(store, run_ids), many_runs=True, labels=labels), *extra]
    return compare_html_of(cmp, html_sections(sections))
