"""The HTML report: one well-formed offline page, tables equal to the text report's, charts drawn
from the view rows (point counts and positions computed from the saved inputs)."""

from __future__ import annotations

import math
import re
from collections import defaultdict

from html_tree import charts, parse, table_rows, tables_by_class
from imx_factories import RUN_INFO, make_cell
from infermatrix.core.contexts import format_context
from infermatrix.core.importer import import_page
from infermatrix.core.report import render_html
from infermatrix.core.report.charts import CHART_IDS
from infermatrix.core.report.layout import LONG_COLUMNS
from report_expect import REFERENCE_PAGE, long_row, matrix_first_line, matrix_second_line, prefill_row


def chart_map(root):
    return {svg.attrs["id"]: svg for svg in charts(root)}


def test_page_is_self_contained_and_well_formed(filled):
    store, run_id, _, _ = filled
    html = render_html(store, run_id)
    assert html.startswith("<!DOCTYPE html>")
    root = parse(html)  # asserts every element is closed in order
    lowered = html.lower()
    assert "<script" not in lowered and "<link" not in lowered and "<img" not in lowered and "@import" not in lowered
    # the only URL is the SVG namespace, which browsers never fetch
    urls = set(re.findall(r"https?://[^\s\"')]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert not re.search(r"\bsrc\s*=", html)
    assert [n.all_text() for n in root.iter("title")][0].endswith(run_id)


def test_tables_match_inputs(filled):
    store, run_id, cells, prefill = filled
    root = parse(render_html(store, run_id))
    (long,) = tables_by_class(root, "long")
    header, rows = table_rows(long)
    assert header == list(LONG_COLUMNS)
    expected = [prefill_row(p) for p in sorted(prefill, key=lambda p: p.context_tokens)]
    expected += [long_row(c) for c, _ in sorted(cells.values(), key=lambda x: (x[0].context_tokens, x[0].concurrency))]
    assert rows == expected

    (matrix,) = tables_by_class(root, "matrix")
    header, rows = table_rows(matrix)
    concs = sorted({n for _, n in cells})
    assert header == ["Context", *map(str, concs)]
    for row in rows:
        ctx = next(c for c, _ in cells if format_context(c) == row[0])
        for n, shown in zip(concs, row[1:]):
            c = cells.get((ctx, n), (None,))[0]
            if c is None:
                assert shown == "—"
            elif c.status == "valid":
                assert shown == f"{matrix_first_line(c)} {matrix_second_line(c)}"
            else:
                assert shown == matrix_first_line(c)
    # each status has its own class on the matrix cell
    classes = {td.all_text(): td.classes() for td in matrix.iter("td")}
    for c, _ in cells.values():
        if c.status != "valid":
            assert f"st-{c.status}" in classes[matrix_first_line(c)]

    (pre,) = tables_by_class(root, "prefill")
    _, rows = table_rows(pre)
    assert [r[0] for r in rows] == [f"{format_context(p.context_tokens)} context" for p in sorted(prefill, key=lambda p: p.context_tokens)]


def test_charts_hold_every_valid_cell(filled):
    store, run_id, cells, prefill = filled
    found = chart_map(parse(render_html(store, run_id)))
    valid = [c for c, _ in cells.values() if c.status == "valid"]
    # and one frontier chart per context with valid cells (docs/slo.md), each with a dot per valid cell
    frontier = {f"frontier-{format_context(c.context_tokens)}" for c in valid}
    assert [c for c in found if c not in frontier] == [c for c in CHART_IDS if c in found] and set(found) == set(CHART_IDS) | frontier
    for fid in frontier:
        assert len(list(found[fid].iter("circle"))) == sum(f"frontier-{format_context(c.context_tokens)}" == fid for c in valid)
    for cid in ("total-tps", "per-request-tps", "ttft-percentiles", "tbt-percentiles"):
        assert len(list(found[cid].iter("circle"))) == len(valid), cid
    assert len(list(found["prefill-tps"].iter("circle"))) == sum(p.status == "valid" for p in prefill)
    heat = found["decode-heatmap"]
    groups = [g for g in heat.iter("g") if "data-cell" in g.attrs]
    assert len(groups) == len(cells)
    assert sum("imx-heat-cell" in g.classes() for g in groups) == len(valid)
    # series are the contexts, and each holds that context's valid cells
    series = {g.attrs["data-series"]: len(list(g.iter("circle"))) for g in found["total-tps"].iter("g") if "data-series" in g.attrs}
    want = defaultdict(int)
    for c in valid:
        want[f"{format_context(c.context_tokens)} context"] += 1
    assert {k: v for k, v in series.items() if v} == dict(want)


def test_points_sit_on_a_log2_axis_in_value_order(filled):
    store, run_id, cells, _ = filled
    svg = chart_map(parse(render_html(store, run_id)))["total-tps"]
    ctx = 8192
    mine = sorted((c for c, _ in cells.values() if c.context_tokens == ctx and c.status == "valid"), key=lambda c: c.concurrency)
    (group,) = [g for g in svg.iter("g") if g.attrs.get("data-series") == f"{format_context(ctx)} context"]
    pts = [(float(c.attrs["cx"]), float(c.attrs["cy"])) for c in group.iter("circle")]
    assert len(pts) == len(mine) >= 3
    # x distance is proportional to log2 of the concurrency ratio
    unit = (pts[1][0] - pts[0][0]) / math.log2(mine[1].concurrency / mine[0].concurrency)
    for (x0, _), (x1, _), a, b in zip(pts, pts[1:], mine, mine[1:]):
        assert abs((x1 - x0) - unit * math.log2(b.concurrency / a.concurrency)) < 0.2
    # more tok/s is higher on the page (smaller y)
    by_y = [c.total_tps for _, c in sorted(zip([y for _, y in pts], mine), key=lambda t: -t[0])]
    assert by_y == sorted(c.total_tps for c in mine)
    # and the height above the x axis (y = 0) is proportional to the value, for every point drawn
    (axis,) = [ln for ln in svg.iter("line") if "imx-axis" in ln.classes() and ln.attrs["y1"] == ln.attrs["y2"]]
    base = float(axis.attrs["y1"])
    valid = {(format_context(c.context_tokens), c.concurrency): c.total_tps for c, _ in cells.values() if c.status == "valid"}
    drawn = []
    for circle in svg.iter("circle"):
        label, n = re.match(r"(\S+) × (\d+):", circle.all_text()).groups()
        drawn.append((valid[(label, int(n))], base - float(circle.attrs["cy"])))
    k = max(h for _, h in drawn) / max(v for v, _ in drawn)
    assert all(abs(h - k * v) < 0.2 for v, h in drawn), drawn
    assert len(drawn) == len(valid)


def test_imported_page_has_charts_and_says_why_no_bands(tmp_path):
    from infermatrix.core.store import Store

    with Store(tmp_path / "ref.duckdb") as store:
        result = import_page(store, REFERENCE_PAGE)
        html = render_html(store, result.run_id)
    root = parse(html)
    found = chart_map(root)
    valid = [r for r in result.page.decode if r.status == "valid"]
    frontier = {f"frontier-{format_context(r.context_tokens)}" for r in valid}  # the page says its GPU count
    assert set(found) == (set(CHART_IDS) - {"ttft-percentiles", "tbt-percentiles"}) | frontier
    assert len(list(found["total-tps"].iter("circle"))) == len(valid)
    assert "imported page publishes medians only" in root.all_text()
    _, rows = table_rows(tables_by_class(root, "long")[0])
    assert len(rows) == len(result.page.prefill) + len(result.page.decode)


def test_user_text_is_escaped(store):
    run_id = store.create_run(dict(RUN_INFO, hardware={"gpu": "<b>A&B</b>"}, launch_command="serve --api-key <redacted> 'x<y'"))
    store.save_cell(run_id, make_cell(8192, 1, status="error", reason="<script>alert(1)</script>")[0])
    html = render_html(store, run_id)
    root = parse(html)
    assert "<script" not in html.lower()
    text = root.all_text()
    assert "<b>A&B</b>" in text and "serve --api-key <redacted> 'x<y'" in text and "<script>alert(1)</script>" in text
