"""Comparison reports and HTML."""

from __future__ import annotations

import pytest
from rich.console import Console

from imx_factories import fill_run
from infermatrix.core.contexts import format_context
from infermatrix.core.report import render_compare_markdown, render_compare_text, render_html
from infermatrix.core.report.data import fmt_tps
from infermatrix.core.store import StoreError


def test_compare_text_and_markdown(store):
    a, cells_a, _ = fill_run(store, seed=1)
    b, cells_b, _ = fill_run(store, {"engine": "sglang"}, scale=1.5, seed=2, other=False)
    console = Console(record=True, width=250)
    render_compare_text(store, [a[:4], b], console)
    text = console.export_text()
    md = render_compare_markdown(store, [a, b])
    assert a in text and b in text and "sglang" in text
    for key, (ca, _) in cells_a.items():
        cb = cells_b.get(key, (None,))[0]
        if ca.status != "valid" or cb is None or cb.status != "valid":
            continue
        ratio = f"×{cb.total_tps / ca.total_tps:.2f}"
        line = f"| {format_context(key[0])} | {key[1]} | {fmt_tps(ca.total_tps)} | {fmt_tps(cb.total_tps)} | {ratio} |"
        assert line in md
        assert fmt_tps(cb.total_tps) in text


def test_compare_needs_two_distinct_runs(store):
    a, _, _ = fill_run(store)
    with pytest.raises(StoreError, match="at least two"):
        render_compare_markdown(store, [a])
    with pytest.raises(StoreError, match="twice"):
        render_compare_markdown(store, [a, a[:3]])


def test_html(filled):
    store, run_id, cells, _ = filled
    html = render_html(store, run_id)
    assert html.lstrip().lower().startswith("<!doctype html") or "<html" in html.lower()
    c = next(c for c, _ in cells.values() if c.status == "valid")
    assert fmt_tps(c.total_tps) in html and "Sustained decode" in html
