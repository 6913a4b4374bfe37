"""Comparison reports: the wording shared by every format, and the text (rich) and Markdown renderers.

Per other run: a cell-by-cell table over the cells valid in both (values of A and B and B/A per
metric, marked better/worse by the metric's direction), the cells only one side could run, and a
summary (geometric-mean ratio per metric); then the best run per cell over all runs.
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table
from rich.text import Text

from infermatrix.core.contexts import format_context
from infermatrix.core.report.compare_tasks import TASK_COMPARE_CAPTION, TASK_COMPARE_HEADERS, task_compare_rows
from infermatrix.core.report.compare_data import (
    METRICS,
    SAME_WITHIN,
    Comparison,
    Pair,
    describe_run,
    fmt_ratio,
    STYLE,
    load_comparison,
    verdict,
)
from infermatrix.core.report.fmt import DASH, fmt_tps
from infermatrix.core.report.markdown import markdown_sections, md_escape, md_table
from infermatrix.core.report.model import Section
from infermatrix.core.report.sections import slo_sections
from infermatrix.core.report.sections.burst_compare import burst_compare_section
from infermatrix.core.report.sections.interference import interference_compare_section
from infermatrix.core.report.sections.telemetry_compare import telemetry_compare_section
from infermatrix.core.report.slo_report import load_slo_report
from infermatrix.core.report.text import draw_sections
from infermatrix.core.store import Store

__all__ = [
    "load_comparison", "render_compare_text", "render_compare_markdown", "METRICS", "MARKS", "FOOTNOTE",
    "pair_header", "pair_rows", "one_sided_rows", "measured_by_one_lines", "summary_rows", "best_grid", "run_lines", "warning_lines",
    "BEST_CAPTION", "footnote_lines",
]

MARKS = {"better": "✓", "worse": "✗", "same": "", None: ""}
VERDICT_STYLES = {"better": "bold green", "worse": "bold red", "same": "dim", None: ""}
BEST_CAPTION = (f"total tok/s, cells valid in two or more runs; × = lead over the next best run; same: the top two within "
                f"{SAME_WITHIN:.0%} of each other, so no winner")
FOOTNOTE = (
    f"Cells valid in both runs; ratio = other run / A. ✓ the other run is better, ✗ worse, by more than "
    f"{SAME_WITHIN:.0%} (more tok/s is better; less TTFT and TBT — time between tokens — is better). Latencies are medians."
)


INTERVAL_FOOTNOTE = (
    "Cells valid in both runs; ratio = other run / A, with its 95 % interval in brackets (from the two cells' own "
    "intervals, docs/metrics.md): ✓ the other run is faster, ✗ slower, where the interval lies wholly on that side of "
    "1; else the same (noise). Latencies are medians."
)
FIXED_RULE_NOTE = (f"Some cells have no stored intervals (an imported page, a store older than schema v8): those are "
                   f"judged by the fixed rule, better or worse by more than {SAME_WITHIN:.0%}.")


def footnote_lines(cmp: Comparison) -> list[str]:
    """The legend of the per-cell ratio tables, only when some pair has a cell valid in both runs (a table to read)."""
    pairs = [p for p in cmp.pairs.values() if p.cells]
    if not pairs:
        return []
    with_intervals = any(v.lo is not None for p in pairs for c in p.cells for v in c.judged.values())
    if not with_intervals:
        return [FOOTNOTE]
    return [INTERVAL_FOOTNOTE] + ([FIXED_RULE_NOTE] if any(p.fixed_rule for p in pairs) else [])


def _ratio_text(ratio: float | None, lo: float | None, hi: float | None) -> str:
    return fmt_ratio(ratio) + ("" if lo is None or hi is None else f" [{lo:.3f}–{hi:.3f}]")


def run_lines(cmp: Comparison) -> list[str]:
    return [f"{cmp.letters[rid]} = {describe_run(run)}" for rid, run in cmp.runs.items()]


def warning_lines(cmp: Comparison) -> list[str]:
    """The method-differs warning (one line) and what some runs do not record."""
    out = []
    if cmp.method_diffs:
        out.append("Warning: the runs' method differs, so their numbers are not like for like — " + "; ".join(cmp.method_diffs) + ".")
    if cmp.method_unknown:
        out.append("Not recorded: " + "; ".join(cmp.method_unknown) + ".")
    return out


def pair_header(cmp: Comparison, pair: Pair) -> list[str]:
    a, b = cmp.letters[cmp.baseline], cmp.letters[pair.run_b]
    cols = ["Context", "Requests at once"]
    for m in METRICS:
        cols += [f"{m.title} {a}", f"{m.title} {b}", f"{b}/{a}"]
    return cols


def pair_rows(pair: Pair) -> list[list[tuple[str, str | None]]]:
    """Cells as (text, verdict); verdict is set on ratio cells only."""
    out = []
    for c in pair.cells:
        row: list[tuple[str, str | None]] = [(c.context_label, None), (str(c.concurrency), None)]
        for m in METRICS:
            a, b, ratio = c.values.get(m.key, (None, None, None))
            judged = c.judged.get(m.key)
            v = STYLE[judged.verdict] if judged is not None else verdict(m.key, ratio)
            mark = MARKS[v]
            text = _ratio_text(ratio, judged.lo, judged.hi) if judged is not None else fmt_ratio(ratio)
            row += [(m.fmt(a), None), (m.fmt(b), None), (text + (f" {mark}" if mark else ""), v or "same")]
        out.append(row)
    return out


def one_sided_rows(cmp: Comparison, pair: Pair) -> tuple[list[str], list[list[str]]]:
    a, b = cmp.letters[cmp.baseline], cmp.letters[pair.run_b]
    rows = [[o.context_label, str(o.concurrency), o.a, o.b, f"only {a if o.valid_in == 'a' else b}"] for o in pair.one_sided]
    return ["Context", "Requests at once", a, b, "Valid in"], rows


def measured_by_one_lines(cmp: Comparison, pair: Pair) -> list[str]:
    """Cells only one run measured at all (its matrix is larger), as one line per run."""
    out = []
    for side, rid in (("a", cmp.baseline), ("b", pair.run_b)):
        keys = pair.measured_by_one.get(side, [])
        if not keys:
            continue
        by_ctx: dict[int, list[int]] = {}
        for ctx, n in keys:
            by_ctx.setdefault(ctx, []).append(n)
        cells = " · ".join(f"{format_context(c)} × {', '.join(map(str, ns))}" for c, ns in sorted(by_ctx.items()))
        other = cmp.letters[pair.run_b if side == "a" else cmp.baseline]
        out.append(f"Measured only by {cmp.letters[rid]} ({len(keys)} cell{'s' if len(keys) != 1 else ''}, not tried by {other}): {cells}")
    return out


def summary_rows(cmp: Comparison, pair: Pair) -> tuple[list[str], list[list[tuple[str, str | None]]]]:
    a, b = cmp.letters[cmp.baseline], cmp.letters[pair.run_b]
    rows: list[list[tuple[str, str | None]]] = []
    for m in METRICS:
        g = pair.geomean.get(m.key)
        gi = pair.geomean_interval.get(m.key)
        if gi is None:
            v = verdict(m.key, g)
        else:
            v = "same" if gi[0] <= 1 <= gi[1] else ("better" if (gi[0] > 1) == m.higher_is_better else "worse")
        counts = pair.verdicts.get(m.key) or Counter()
        n = len(pair.cells)
        tally = f"{counts.get('faster', 0)} faster · {counts.get('slower', 0)} slower · {counts.get('same', 0)} same, of {n}"
        text = _ratio_text(g, *(gi or (None, None)))
        rows.append([(m.title, None), (text + (f" {MARKS[v]}" if MARKS[v] else ""), v or "same"), (tally, None)])
    return ["Metric", f"Geometric mean {b}/{a}", "Cells"], rows


WIDE = 170  # below this the text report splits the cell table into throughput and latency


def _cell_tables(cmp: Comparison, pair: Pair, width: int) -> list[Table]:
    header, rows = pair_header(cmp, pair), pair_rows(pair)
    groups = [list(range(len(header)))]
    if width < WIDE:  # Context, N, then 3 columns per metric: tok/s metrics, then latency metrics
        groups = [[0, 1, *range(2, 8)], [0, 1, *range(8, 14)]]
    tables = []
    for cols in groups:
        t = Table(header_style="bold", show_edge=False)
        for i in cols:
            t.add_column(header[i], justify="right")
        for row in rows:
            t.add_row(*(Text(row[i][0], style=VERDICT_STYLES[row[i][1]] if row[i][1] else "") for i in cols))
        tables.append(t)
    return tables


def best_grid(cmp: Comparison) -> tuple[list[str], list[list[str]]]:
    """Best run per cell (most total tok/s): rows are contexts, columns concurrency levels."""
    contexts = sorted({b.context_tokens for b in cmp.best})
    concs = sorted({b.concurrency for b in cmp.best})
    index = {(b.context_tokens, b.concurrency): b for b in cmp.best}
    rows = []
    for ctx in contexts:
        row = [format_context(ctx)]
        for n in concs:
            b = index.get((ctx, n))
            if b is None:
                row.append(DASH)
                continue
            who = f"same ({' '.join(sorted((cmp.letters[b.best], cmp.letters[b.runner_up])))})" if b.same else cmp.letters[b.best]
            row.append(f"{who} {fmt_tps(b.total_tps)} {fmt_ratio(b.margin)}")
        rows.append(row)
    return ["Context", *map(str, concs)], rows


def render_compare_text(store: Store, run_ids: list[str], console: Console) -> None:
    """Print the comparison of the runs (the first is the baseline A)."""
    cmp = load_comparison(store, run_ids)
    console.print(Text("Comparison", style="bold"))
    for line in run_lines(cmp):
        console.print(line, highlight=False)
    for line in warning_lines(cmp):
        console.print(Text(line, style="bold yellow" if line.startswith("Warning") else "dim"))
    for pair in cmp.pairs.values():
        b = cmp.letters[pair.run_b]
        console.print()
        console.print(Text(f"{b} against A: {describe_run(cmp.runs[pair.run_b])}", style="bold cyan"))
        if pair.cells:
            for table in _cell_tables(cmp, pair, console.width):
                console.print(table)
            header, rows = summary_rows(cmp, pair)
            summary = Table(*header, header_style="bold", show_edge=False, title="Summary", title_justify="left")
            for row in rows:
                summary.add_row(*(Text(t, style=VERDICT_STYLES[v] if v else "") for t, v in row))
            console.print(summary)
        else:
            console.print(Text("No cells valid in both runs.", style="yellow"))
        if pair.one_sided:
            header, plain = one_sided_rows(cmp, pair)
            t = Table(*header, header_style="bold", show_edge=False, title="Cells only one side could run", title_justify="left")
            for line_cells in plain:
                t.add_row(*line_cells)
            console.print(t)
        for line in measured_by_one_lines(cmp, pair):
            console.print(Text(line, style="dim"))
        if cmp.tasks.get(pair.run_b):
            t = Table(*TASK_COMPARE_HEADERS, header_style="bold", show_edge=False, title="Tasks", title_justify="left",
                      caption=TASK_COMPARE_CAPTION, caption_justify="left")  # fmt: skip
            for line_cells in task_compare_rows(cmp.tasks[pair.run_b]):
                t.add_row(*line_cells)
            console.print(t)
    if cmp.best:
        header, grid = best_grid(cmp)
        console.print()
        console.print(Text("Best run per cell", style="bold"), Text(BEST_CAPTION, style="dim"))
        t = Table(*header, header_style="bold", show_edge=False)
        for line_cells in grid:
            t.add_row(*line_cells)
        console.print(t)
    draw_sections(console, [*slo_sections(load_slo_report(store, run_ids), many_runs=True), *_bursts(cmp)])
    for line in footnote_lines(cmp):
        console.print(Text(line, style="dim"))


def _bursts(cmp: Comparison) -> list[Section]:
    """The comparison's Bursts section, when two runs ran a burst alike (sections/burst_compare.py), and its Engine and GPU
    section, when two runs read telemetry in the same cells (sections/telemetry_compare.py)."""
    return [s for s in (burst_compare_section(cmp), interference_compare_section(cmp), telemetry_compare_section(cmp)) if s is not None]


def _md_cells(row: list[tuple[str, str | None]]) -> list[str]:
    return [md_escape(t) for t, _ in row]


def render_compare_markdown(store: Store, run_ids: list[str]) -> str:
    cmp = load_comparison(store, run_ids)
    out = ["# Comparison", ""] + [f"- {md_escape(line)}" for line in run_lines(cmp)] + [""]
    for line in warning_lines(cmp):
        out += [f"> **{md_escape(line)}**" if line.startswith("Warning") else f"_{md_escape(line)}_", ""]
    for pair in cmp.pairs.values():
        out += [f"## {cmp.letters[pair.run_b]} against A: {md_escape(describe_run(cmp.runs[pair.run_b]))}", ""]
        if pair.cells:
            header = pair_header(cmp, pair)
            out += [md_table(header, [_md_cells(r) for r in pair_rows(pair)], "r" * len(header), escape=False), ""]
            header, rows = summary_rows(cmp, pair)
            out += ["**Summary**", "", md_table(header, [_md_cells(r) for r in rows], "lrl", escape=False), ""]
        else:
            out += ["_No cells valid in both runs._", ""]
        if pair.one_sided:
            header, plain = one_sided_rows(cmp, pair)
            out += ["**Cells only one side could run**", "", md_table(header, plain, "rrrrl"), ""]
        for line in measured_by_one_lines(cmp, pair):
            out += [f"_{md_escape(line)}_", ""]
        if cmp.tasks.get(pair.run_b):
            out += ["**Tasks**", "", md_escape(TASK_COMPARE_CAPTION), "",
                    md_table(list(TASK_COMPARE_HEADERS), task_compare_rows(cmp.tasks[pair.run_b]), "l" + "r" * 10), ""]
    if cmp.best:
        header, grid = best_grid(cmp)
        out += ["## Best run per cell", "", md_escape(BEST_CAPTION), "", md_table(header, grid, "r" * len(header)), ""]
    out += markdown_sections([*slo_sections(load_slo_report(store, run_ids), many_runs=True), *_bursts(cmp)])
    out += [md_escape(line) for line in footnote_lines(cmp)]
    return "\n".join(out) + "\n"
