"""Comparison reports: per-cell ratios marked by each metric's direction, cells only one side could
run, geometric means, best run per cell, method warnings — expectations computed from the inputs."""

from __future__ import annotations

import io
import json
import math
import random
import re
import shutil

import pytest
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style

from html_tree import charts, parse
from imx_factories import REFERENCE_OTHER, REFERENCE_VALID, fill_run, make_cell
from infermatrix.core.contexts import format_context
from infermatrix.core.importer import import_page
from infermatrix.core.report import (
    load_comparison,
    render_compare_html,
    render_compare_json,
    render_compare_markdown,
    render_compare_text,
)
from infermatrix.core.report.compare import FOOTNOTE, VERDICT_STYLES
from infermatrix.core.report.compare_data import METRICS, SAME_WITHIN, verdict
from infermatrix.core.report.json_report import COMPARE_KEYS
from infermatrix.core.report.data import fmt_ms, fmt_tps
from infermatrix.core.store import Store, StoreError
from report_expect import REFERENCE_PAGE

FIELDS = {"total_tps": +1, "per_request_tps": +1, "ttft_ms": -1, "tbt_ms": -1}
FMT = {"total_tps": fmt_tps, "per_request_tps": fmt_tps, "ttft_ms": fmt_ms, "tbt_ms": fmt_ms}


def expected_mark(metric: str, ratio: float) -> str:
    if abs(ratio - 1) < SAME_WITHIN:
        return ""
    return " ✓" if (ratio > 1) == (FIELDS[metric] > 0) else " ✗"


def varied_run(store, seed: int, engine: str, keys=None):
    """A run whose cells are A's reference cells, each scaled by its own random factor."""
    rng = random.Random(seed)
    run_id = store.create_run({"engine": engine, "model": "qwen", "duration_s": 30.0, "max_output": 4096,
                               "api": "completions", "prompt_mode": "distinct", "token_source": "usage"})
    cells = {}
    for key in keys or REFERENCE_VALID:
        c, _ = make_cell(*key, seed=seed, scale=rng.uniform(0.6, 1.6))
        store.save_cell(run_id, c)
        cells[key] = c
    store.finish_run(run_id, "completed")
    return run_id, cells


def md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_markdown_rows_ratios_and_marks(store):
    a, cells_a, _ = fill_run(store, seed=1)
    b, cells_b = varied_run(store, 2, "sglang")
    md = render_compare_markdown(store, [a, b])
    common = [k for k, (c, _) in cells_a.items() if c.status == "valid" and k in cells_b]
    assert common
    for key in common:
        ca, cb = cells_a[key][0], cells_b[key]
        row = [format_context(key[0]), str(key[1])]
        for m in FIELDS:
            va, vb = getattr(ca, m), getattr(cb, m)
            row += [FMT[m](va), FMT[m](vb), f"×{vb / va:.2f}{expected_mark(m, vb / va)}"]
        assert md_row(row) in md, row


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_geometric_means_and_tallies(store):
    a, cells_a, _ = fill_run(store, seed=1)
    b, cells_b = varied_run(store, 3, "sglang")
    cmp = load_comparison(store, [a, b])
    pair = cmp.pairs[b]
    common = [k for k, (c, _) in cells_a.items() if c.status == "valid" and k in cells_b]
    assert [(c.context_tokens, c.concurrency) for c in pair.cells] == sorted(common)
    for m in FIELDS:
        ratios = [getattr(cells_b[k], m) / getattr(cells_a[k][0], m) for k in common]
        want = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        assert pair.geomean[m] == pytest.approx(want, rel=1e-9)
        better = sum(1 for r in ratios if expected_mark(m, r) == " ✓")
        assert pair.verdicts[m]["faster"] == better  # no stored intervals: the fixed 2 % rule
    md = render_compare_markdown(store, [a, b])
    want_total = math.exp(sum(math.log(cells_b[k].total_tps / cells_a[k][0].total_tps) for k in common) / len(common))
    assert f"| Total tok/s | ×{want_total:.2f}" in md


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_cells_only_one_side_could_run_and_cells_not_tried(store):
    a, cells_a, _ = fill_run(store, seed=1)
    # B runs all of A's cells, valid everywhere, except one A could run, and leaves one out.
    keys = set(REFERENCE_VALID) | set(REFERENCE_OTHER)
    broken, left_out = (8 * 1024, 1), (251 * 1024, 2)
    b = store.create_run({"engine": "sglang"})
    for key in keys - {left_out}:
        status = "over_capacity" if key == broken else "valid"
        store.save_cell(b, make_cell(*key, status=status, seed=4)[0])
    cmp = load_comparison(store, [a, b])
    pair = cmp.pairs[b]
    got = {(o.context_tokens, o.concurrency): o.valid_in for o in pair.one_sided}
    want = {k: "b" for k, (c, _) in cells_a.items() if c.status != "valid" and k != left_out}
    want[broken] = "a"
    assert got == want
    assert pair.measured_by_one == {"a": [left_out]}
    md = render_compare_markdown(store, [a, b])
    o = next(x for x in pair.one_sided if (x.context_tokens, x.concurrency) == broken)
    assert md_row([format_context(broken[0]), str(broken[1]), f"{fmt_tps(cells_a[broken][0].total_tps)} tok/s", "Over capacity", "only A"]) in md
    assert o.b == "Over capacity"
    assert f"Measured only by A (1 cell, not tried by B): {format_context(left_out[0])} × {left_out[1]}" in md


def test_best_run_per_cell_over_three_runs(store):
    a, cells_a, _ = fill_run(store, seed=1, other=False)
    b, cells_b = varied_run(store, 5, "sglang")
    c, cells_c = varied_run(store, 6, "trtllm", keys=list(REFERENCE_VALID)[:4])
    cmp = load_comparison(store, [a, b, c])
    assert [p for p in cmp.pairs] == [b, c]
    runs = {a: {k: v[0].total_tps for k, v in cells_a.items()}, b: {k: v.total_tps for k, v in cells_b.items()},
            c: {k: v.total_tps for k, v in cells_c.items()}}
    for best in cmp.best:
        key = (best.context_tokens, best.concurrency)
        values = sorted(((r[key], rid) for rid, r in runs.items() if key in r), reverse=True)
        assert (best.best, best.runner_up) == (values[0][1], values[1][1])
        assert best.margin == pytest.approx(values[0][0] / values[1][0])
    assert len(cmp.best) == len(REFERENCE_VALID)


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_method_warning_names_each_difference(store):
    a, _, _ = fill_run(store, seed=1, other=False)
    same, _, _ = fill_run(store, seed=2, other=False)
    assert load_comparison(store, [a, same]).method_diffs == []
    b, _, _ = fill_run(store, {"duration_s": 5.0, "max_output": 256, "prompt_mode": "shared", "api": None,
                               "config": {"matrix": {"warmup": True}}}, seed=3, other=False)
    cmp = load_comparison(store, [a, b])
    assert [d.split(":")[0] for d in cmp.method_diffs] == ["duration", "max output", "prompt mode"]
    md = render_compare_markdown(store, [a, b])
    line = next(x for x in md.splitlines() if "method differs" in x)
    assert "duration: A 30 s, B 5 s" in line and "max output: A 4,096 tokens, B 256 tokens" in line
    assert "prompt mode: A distinct, B shared" in line
    assert "B does not record its API" in md


def test_verdict_direction_and_noise_band():
    assert verdict("total_tps", 1 + SAME_WITHIN * 1.5) == "better" and verdict("ttft_ms", 1 + SAME_WITHIN * 1.5) == "worse"
    assert verdict("tbt_ms", 1 - SAME_WITHIN * 1.5) == "better" and verdict("per_request_tps", 0.5) == "worse"
    assert verdict("total_tps", 1 + SAME_WITHIN / 2) == "same" and verdict("ttft_ms", None) is None
    assert {m.key for m in METRICS} == set(FIELDS)


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_text_colours_better_green_worse_red(store):
    a, cells_a, _ = fill_run(store, seed=1, other=False)
    b, cells_b, _ = fill_run(store, {"engine": "sglang"}, scale=1.5, seed=2, other=False)
    console = Console(record=True, width=250, force_terminal=True, color_system="standard")
    render_compare_text(store, [a[:4], b], console)
    ansi = console.export_text(styles=True)
    key = next(iter(REFERENCE_VALID))
    for metric, label in (("total_tps", "better"), ("ttft_ms", "better")):
        ratio = getattr(cells_b[key][0], metric) / getattr(cells_a[key][0], metric)
        shown = f"×{ratio:.2f} ✓"
        on = Style.parse(VERDICT_STYLES[label]).render(shown, color_system=ColorSystem.STANDARD).split(shown)[0]
        assert on + shown in ansi
    c, _, _ = fill_run(store, {"engine": "slow"}, scale=0.5, seed=3, other=False)
    console = Console(record=True, width=250, force_terminal=True, color_system="standard")
    render_compare_text(store, [a, c], console)
    worse = Style.parse(VERDICT_STYLES["worse"]).render("x", color_system=ColorSystem.STANDARD).split("x")[0]
    assert worse + "×0.50 ✗" in console.export_text(styles=True)


def test_json_and_html(store):
    a, _, _ = fill_run(store, seed=1, other=False)
    b, _, _ = fill_run(store, {"engine": "sglang"}, scale=1.25, seed=2, other=False)
    doc = render_compare_json(store, [a, b])
    assert tuple(doc) == COMPARE_KEYS
    json.loads(json.dumps(doc))
    view = {(r[2], r[3], r[4]): r[7] for r in store.query("SELECT * FROM engine_comparison WHERE run_a = ? AND run_b = ?", [a, b])[1]}
    got = {(c["context_label"], c["concurrency"], m): v["ratio"] for c in doc["pairs"][0]["cells"] for m, v in c["metrics"].items()}
    assert got == view
    root = parse(render_compare_html(store, [a, b]))
    assert "<script" not in render_compare_html(store, [a, b]).lower()
    spans = [s for s in root.iter("span") if s.classes() & {"better", "worse", "same"}]
    assert spans and all(s.all_text().startswith("×") for s in spans)
    assert {"better"} == {cls for s in spans for cls in s.classes()}  # 1.25 x faster, 1/1.25 the latency
    assert len(charts(root)) >= 2


def test_compare_needs_two_distinct_runs(store):
    a, _, _ = fill_run(store, other=False)
    with pytest.raises(StoreError, match="at least two"):
        render_compare_markdown(store, [a])
    with pytest.raises(StoreError, match="twice"):
        render_compare_markdown(store, [a, a[:3]])


def test_imported_reference_against_a_sim_run(sim_run_db, tmp_path):
    db = tmp_path / "both.duckdb"
    shutil.copy(sim_run_db[0], db)
    with Store(db) as store:
        ref = import_page(store, REFERENCE_PAGE).run_id
        sim = sim_run_db[1]
        md = render_compare_markdown(store, [ref, sim])
        _, rows = store.query(
            "SELECT a.context_tokens, a.concurrency, a.total_tps, b.total_tps, a.ttft_ms, b.ttft_ms FROM decode_matrix a "
            "JOIN decode_matrix b USING (context_tokens, concurrency) WHERE a.run_id = ? AND b.run_id = ? "
            "AND a.status = 'valid' AND b.status = 'valid' ORDER BY 1, 2", [ref, sim])
    assert rows, "the sim run shares no valid cell with the reference (8K x 1 and 8K x 2 are in both)"
    for ctx, n, ta, tb, fa, fb in rows:
        pattern = (rf"\| {format_context(ctx)} \| {n} \| {re.escape(fmt_tps(ta))} \| {re.escape(fmt_tps(tb))} \| "
                   rf"×{tb / ta:.2f}( [✓✗])? \|.*\| {re.escape(fmt_ms(fa))} \| {re.escape(fmt_ms(fb))} \| ×{fb / fa:.2f}")
        assert re.search(pattern, md), pattern
    warning = next(x for x in md.splitlines() if "method differs" in x)
    assert "duration: A 30 s, B 3 s" in warning and "max output: A 4,096 tokens" in warning


def test_best_run_per_cell_names_no_winner_inside_the_noise_rule(store):
    """Issue 27 item 10: a lead of ×1.01 (inside SAME_WITHIN) named a winner; now the cell says "same"."""
    a, _, _ = fill_run(store, seed=1, other=False)
    b, _, _ = fill_run(store, {"engine": "sglang"}, scale=1 + SAME_WITHIN / 2, seed=1, other=False)
    c, _, _ = fill_run(store, {"engine": "trtllm"}, scale=1.5, seed=1, other=False)
    close = load_comparison(store, [a, b])
    assert close.best and all(x.same and x.best == b for x in close.best)
    doc = render_compare_json(store, [a, b])
    assert [x["same"] for x in doc["best"]] == [True] * len(close.best)
    md = render_compare_markdown(store, [a, b])
    header, _, *rows = md.split("## Best run per cell", 1)[1].split("\n\n")[2].splitlines()
    assert rows and all(cell.startswith("same (A B) ") and cell.endswith(" ×1.01") for r in rows for cell in r.strip("| ").split(" | ")[1:]
                        if cell != "—")
    far = load_comparison(store, [a, c])
    assert not any(x.same for x in far.best)
    assert all(cell.startswith("B ") for r in render_compare_markdown(store, [a, c]).split("## Best run per cell", 1)[1].split("\n\n")[2]
               .splitlines()[2:] for cell in r.strip("| ").split(" | ")[1:] if cell != "—")


def test_ratio_legend_only_when_a_cell_is_valid_in_both(store):
    """Issue 27 item 10: "Cells valid in both runs; ratio = …" printed under a comparison with no such cell."""
    a, _, _ = fill_run(store, seed=1, other=False)
    b = store.create_run({"engine": "sglang"})
    for key in REFERENCE_VALID:  # B tried A's cells and could run none of them
        store.save_cell(b, make_cell(*key, status="over_capacity", seed=2)[0])
    c, _, _ = fill_run(store, {"engine": "trtllm"}, scale=1.5, seed=1, other=False)
    for ids, shown in (([a, b], False), ([a, c], True), ([a, b, c], True)):
        out = io.StringIO()
        render_compare_text(store, ids, Console(file=out, width=300, color_system=None))
        pages = (out.getvalue(), render_compare_markdown(store, ids), render_compare_html(store, ids))
        assert [FOOTNOTE.split(";")[0] in p for p in pages] == [shown] * 3, ids
