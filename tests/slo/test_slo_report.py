"""The SLO sections of the reports: text and Markdown list the frontier points and the SLO tables, the HTML
report and compare draw one frontier chart per context with every run on it and the SLO-infeasible band."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))

from imx_factories import REFERENCE_VALID, fill_run, make_cell  # noqa: E402

from infermatrix.core.contexts import format_context  # noqa: E402
from infermatrix.core.report import render_compare_html, render_html, render_markdown  # noqa: E402
from infermatrix.core.report.fmt import fmt_tps  # noqa: E402
from infermatrix.core.slo import parse_slo  # noqa: E402
from infermatrix.core.store import Store  # noqa: E402
from infermatrix.core.store.slo_store import save_gpu_hour_price, save_slos  # noqa: E402

SLO = "ttft_p99_ms=2000,tpot_p99_ms=12"


@pytest.fixture
def two_engines(tmp_path):
    s = Store(tmp_path / "two.duckdb")
    a, _, _ = fill_run(s, seed=1)  # vllm, 4 GPUs
    b = s.create_run({"engine": "sglang", "model": "qwen", "hardware": {"gpu": "H100", "gpu_count": 8}})
    for key in REFERENCE_VALID:
        s.save_cell(b, make_cell(*key, seed=2, scale=1.3)[0])
    for rid in (a, b):
        save_slos(s, rid, [parse_slo(SLO)])
        save_gpu_hour_price(s, rid, 2.0)
    yield s, a, b
    s.close()


def svg_of(page: str, chart_id: str) -> str:
    m = re.search(rf'<svg id="{re.escape(chart_id)}".*?</svg>', page, re.S)
    assert m, f"no chart {chart_id}"
    return m.group(0)


def test_compare_draws_both_engines_on_each_contexts_frontier(two_engines):
    s, a, b = two_engines
    page = render_compare_html(s, [a, b])
    for ctx in sorted({k[0] for k in REFERENCE_VALID}):
        svg = svg_of(page, f"frontier-{format_context(ctx)}")
        groups = re.findall(r'<g class="imx-series" data-series="([^"]*)" data-run="([^"]+)">(.*?)</g>', svg, re.S)
        assert {run for _, run, _ in groups} == {a, b}
        for _, run, body in groups:
            want = s.query("SELECT count(*), count(*) FILTER (WHERE on_frontier) FROM frontier WHERE run_id = ? AND context_tokens = ?",
                           [run, ctx])[1][0]  # fmt: skip
            assert (body.count("<circle"), body.count("imx-on-frontier")) == want
        # the band no cell can meet: interactivity below 1000 / 12 ms = 83.3 tok/s per user
        shade = re.search(r'<rect class="imx-infeasible" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
        assert shade and float(shade.group(2)) > 0
        assert "83.3 tok/s per user" in svg


def test_report_lists_frontier_points_slo_and_capacity(two_engines):
    s, a, _ = two_engines
    md = render_markdown(s, a)
    section = md.split("## Throughput–interactivity frontier", 1)[1].split("\n## ", 1)[0]
    points = s.query("SELECT context_label, concurrency, tps_per_gpu, tps_per_user FROM frontier WHERE run_id = ? AND on_frontier", [a])[1]
    assert points
    for label, n, gpu, user in points:
        assert f"| {label} | {n} | {fmt_tps(gpu)} | {fmt_tps(user)} |" in section
    assert f"## SLO {SLO}" in md and "## SLO capacity" in md
    html = render_html(s, a)
    assert 'id="frontier-8K"' in html and "imx-infeasible" in html
