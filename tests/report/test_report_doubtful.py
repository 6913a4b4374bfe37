"""A valid cell whose latency columns the client verdict marked doubtful (cells.flags.client.doubtful) is shown
with a mark beside those numbers, a footnote saying what the mark means, and the reason per cell — in the
terminal, Markdown and HTML reports and the decode_matrix view; a cell without doubtful columns shows none.
Read from a real DuckDB file."""

from __future__ import annotations

from html import escape

from rich.console import Console

from imx_factories import RUN_INFO, make_cell
from infermatrix.core.report.data import fmt_ms, fmt_tps, load_report
from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import json_of
from infermatrix.core.report.layout import DOUBTFUL_MARK, DOUBTFUL_NOTE
from infermatrix.core.report.markdown import markdown_of
from infermatrix.core.report.text import render_text
from infermatrix.core.store import Store

TTFT_WHY = "client stamps up to 41.0 ms late (> 5 % of the median TTFT 200.0 ms)"
TBT_WHY = "within ±2.5 %: client stamps held by stalls at the requests' first or last in-window chunks"


def _store(path, doubtful: dict[str, str] | None) -> tuple[Store, str, dict]:
    """A run with two valid cells: 1K × 2 judged by the client verdict with ``doubtful`` columns, 1K × 1
    judged with none."""
    s = Store(path)
    run_id = s.create_run(dict(RUN_INFO))
    cells = {}
    for n, marks in ((1, {}), (2, doubtful)):
        c, _ = make_cell(1024, n, values=(100.0 * n, 90.0, 200.0 + n, 10.0 + n, float(n), 1, 3000, 30.0))  # numbers apart
        if marks is not None:
            c.flags["client"] = {"client_bound": False, "why": [], "doubtful": marks}
        s.save_cell(run_id, c)
        cells[n] = c
    s.finish_run(run_id, "completed")
    return s, run_id, cells


def _text(store, run_id) -> str:
    console = Console(record=True, width=200)
    render_text(store, run_id, console)
    return console.export_text()


def test_doubtful_columns_are_marked_explained_and_in_the_view(tmp_path):
    store, run_id, cells = _store(tmp_path / "d.duckdb", {"ttft_ms": TTFT_WHY, "tbt_ms": TBT_WHY})
    try:
        rows = dict(store.query("SELECT concurrency, doubtful FROM decode_matrix WHERE run_id = ?", [run_id])[1])
        assert rows == {1: [], 2: ["tbt_ms", "ttft_ms"]}
        marked, plain = cells[2], cells[1]
        text = _text(store, run_id)
        # The marked cell's TTFT and TBT carry the mark; its throughput does not; the other cell has none.
        assert f"{DOUBTFUL_MARK}{fmt_ms(marked.ttft_ms)} TTFT" in text
        assert f"{DOUBTFUL_MARK}{fmt_ms(marked.tbt_ms)}" in text
        assert f"{DOUBTFUL_MARK}{fmt_tps(marked.total_tps)}" not in text and fmt_tps(marked.total_tps) in text
        assert f"{DOUBTFUL_MARK}{fmt_ms(plain.ttft_ms)}" not in text and f"{fmt_ms(plain.ttft_ms)} TTFT" in text
        flat = " ".join(text.split())
        assert " ".join(DOUBTFUL_NOTE.split()) in flat
        assert f"1K × 2: {DOUBTFUL_MARK} TTFT doubtful: {TTFT_WHY}" in flat
        assert f"1K × 2: {DOUBTFUL_MARK} time between tokens doubtful: {TBT_WHY}" in flat
        assert "1K × 1:" not in flat
        md = markdown_of(load_report(store, run_id))
        assert f"\\{DOUBTFUL_MARK}{fmt_ms(marked.ttft_ms)} TTFT" in md  # escaped: two marks in a cell would strike through
        assert "ms late" in md and "\\~ before a number" in md
        assert [r["doubtful"] for r in json_of(load_report(store, run_id))["decode"]] == [[], ["tbt_ms", "ttft_ms"]]
        html = render_html(store, run_id)
        assert f"{DOUBTFUL_MARK}{fmt_ms(marked.ttft_ms)} TTFT" in html and escape(TTFT_WHY) in html
    finally:
        store.close()


def test_no_doubtful_columns_no_mark_no_footnote(tmp_path):
    for name, doubtful in (("judged", {}), ("unjudged", None)):
        store, run_id, _ = _store(tmp_path / f"{name}.duckdb", doubtful)
        try:
            rows = dict(store.query("SELECT concurrency, doubtful FROM decode_matrix WHERE run_id = ?", [run_id])[1])
            assert rows[2] == ([] if doubtful is not None else None)  # [] judged and clean; NULL never judged
            text = _text(store, run_id)
            assert DOUBTFUL_MARK not in text and "doubtful" not in text
            assert DOUBTFUL_MARK not in markdown_of(load_report(store, run_id))
        finally:
            store.close()
