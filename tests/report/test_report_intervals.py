"""``±`` in run reports (issue 30 item 1): a decode number whose stored 95 % interval is wider than its printed
precision shows ``±h`` (h the interval's larger side) in text, Markdown and HTML; one whose interval is narrower
shows the bare number; an interval open on a side shows ``±?``; JSON carries every interval (lo, hi, method, n)."""

from __future__ import annotations

from rich.console import Console

from imx_factories import RUN_INFO, make_cell
from infermatrix.core.report.data import load_report
from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import json_of
from infermatrix.core.report.layout import PM_NOTE
from infermatrix.core.report.markdown import markdown_of
from infermatrix.core.report.text import render_text
from infermatrix.core.store import Store

# 1K × 1: every interval narrower than its number's last printed digit; 1K × 2: every one wider;
# 1K × 4: a wide throughput and a TTFT median with no upper bound (too few values).
NARROW = {"total_tps": (99.98, 100.02), "per_request_tps": (79.97, 80.04), "ttft_ms": (200.8, 201.3), "tbt_ms": (10.98, 11.03)}
WIDE = {"total_tps": (190.0, 212.0), "per_request_tps": (85.0, 96.0), "ttft_ms": (180.0, 230.0), "tbt_ms": (11.5, 12.6)}
OPEN = {"total_tps": (380.0, 420.0), "ttft_ms": (190.0, None)}
SHOWN_WIDE = ("200.0 ±12.0", "90.0 ±6.0", "202 ±28 ms", "12.0 ±0.6 ms")
SHOWN_NARROW = ("100.0", "80.0", "201 ms", "11.0 ms")


def _store(path) -> tuple[Store, str]:
    s = Store(path)
    run_id = s.create_run(dict(RUN_INFO))
    for n, per_request, ivs in ((1, 80.0, NARROW), (2, 90.0, WIDE), (4, 70.0, OPEN)):
        c, _ = make_cell(1024, n, values=(100.0 * n, per_request, 200.0 + n, 10.0 + n, float(n), 1, 3000, 30.0), intervals=ivs)
        s.save_cell(run_id, c)
    s.finish_run(run_id, "completed")
    return s, run_id


def _text(store, run_id) -> str:
    console = Console(record=True, width=200)  # wide: no cell wraps
    render_text(store, run_id, console)
    return console.export_text()


def test_wide_intervals_show_plus_minus_and_narrow_ones_do_not(tmp_path):
    store, run_id = _store(tmp_path / "i.duckdb")
    try:
        d = load_report(store, run_id)
        outputs = {"text": _text(store, run_id), "markdown": markdown_of(d), "html": render_html(store, run_id)}
        for name, out in outputs.items():
            for shown in SHOWN_WIDE:
                assert shown in out, (name, shown)
            assert "202 ±28 ms TTFT" in out, name  # the matrix cell's second line too
            assert "400.0 ±20.0" in out and "204 ±? ms" in out, name  # an open side: no half-width to give
            # The narrow cell's numbers stand bare: no ± follows them anywhere.
            for shown in SHOWN_NARROW:
                bare = shown.removesuffix(" ms")
                assert shown in out and f"{bare} ±" not in out, (name, shown)
    finally:
        store.close()


def test_json_carries_each_cells_intervals_and_the_legend_says_what_plus_minus_means(tmp_path):
    store, run_id = _store(tmp_path / "i.duckdb")
    try:
        d = load_report(store, run_id)
        decode = {r["concurrency"]: r for r in json_of(d)["decode"]}
        assert decode[2]["intervals"]["total_tps"] == {"lo": 190.0, "hi": 212.0, "method": "test factory", "n": 20}
        assert decode[4]["intervals"]["ttft_ms"]["hi"] is None and "tbt_ms" not in decode[4]["intervals"]
        assert set(decode[1]["intervals"]) == set(NARROW)  # narrow ones too: JSON has every interval
        assert " ".join(PM_NOTE.split()) in " ".join(_text(store, run_id).split()) and PM_NOTE in markdown_of(d)
    finally:
        store.close()


def test_a_run_without_intervals_shows_no_plus_minus_and_no_legend_line(filled):
    store, run_id, _, _ = filled  # the reference-like run: cells saved without intervals, as before schema v8
    d = load_report(store, run_id)
    assert "±" not in _text(store, run_id) and "±" not in markdown_of(d) and "±" not in render_html(store, run_id)
    assert all(r["intervals"] == {} for r in json_of(d)["decode"])
