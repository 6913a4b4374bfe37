"""The compare page's frontier chart as headless Chromium lays it out: two engines measured for real (the sim
launched as engine ``sim``, and the same kind of server attached as plain ``openai``) on one context's chart,
every valid cell a dot inside the plot, and the SLO-infeasible band drawn. Without Chromium: skipped, saying so."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imxtest import run_cli
from infermatrix.core.report import render_compare_html
from infermatrix.core.store import Store

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "chrome")) if p), None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium): the frontier render check can't run"),
]

PROBE = """<script>
window.addEventListener('load', () => {
  const box = e => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  const charts = [...document.querySelectorAll('svg.imx-frontier')].map(s => ({
    id: s.id, box: box(s),
    runs: [...s.querySelectorAll('g[data-run]')].map(g => ({run: g.dataset.run, label: g.dataset.series,
            dots: [...g.querySelectorAll('circle')].map(box)})),
    shade: [...s.querySelectorAll('rect.imx-infeasible')].map(box) }));
  const out = document.createElement('pre');
  out.id = 'imx-probe';
  out.textContent = JSON.stringify(charts);
  document.body.appendChild(out);
});
</script>"""


def probe(page: str, tmp: Path) -> list[dict]:
    f = tmp / "compare-probe.html"
    f.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp / 'chrome'}",
                           "--window-size=1400,3000", "--virtual-time-budget=5000", "--dump-dom", f.as_uri()],
                          capture_output=True, text=True, timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'<pre id="imx-probe">(.*?)</pre>', done.stdout, re.S)
    assert m, "the probe did not run: the page did not load"
    return json.loads(html.unescape(m.group(1)))


def test_two_engines_on_one_contexts_frontier(sim_factory, tmp_path):
    db = tmp_path / "two.duckdb"
    common = ("--contexts", "1K", "--concurrency", "1,2,4", "--duration", "2", "--max-output", "128", "--db", str(db))
    sim = sim_factory("demo")
    first = run_cli("run", "--engine", "sim", "--base-url", sim.base_url, "--model", "sim-demo", *common)
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_cli("run", "--engine", "openai", "--base-url", sim.base_url, "--model", "sim-demo", "--set", "hardware.gpus=1", *common)
    assert second.returncode == 0, second.stderr[-2000:]
    with Store(db, read_only=True) as s:
        runs = {rid: engine for rid, engine in s.query("SELECT run_id, engine FROM runs")[1]}
    assert sorted(runs.values()) == ["openai", "sim"]
    report = run_cli("compare", *runs, "--db", str(db), "--slo", "tpot_p99_ms=7", "--format", "html", "-o", str(tmp_path / "c.html"))
    assert report.returncode == 0, report.stderr
    with Store(db, read_only=True) as s:
        valid = dict(s.query("SELECT run_id, count(*) FROM frontier WHERE context_label = '1K' GROUP BY run_id")[1])
        page = render_compare_html(s, list(runs))
    assert (tmp_path / "c.html").read_text(encoding="utf-8").count('id="frontier-1K"') == 1
    (chart,) = [c for c in probe(page, tmp_path) if c["id"] == "frontier-1K"]
    plot = chart["box"]
    assert plot["w"] > 300 and plot["h"] > 150
    assert {r["run"] for r in chart["runs"]} == set(runs) and all(len(r["dots"]) == valid[r["run"]] > 0 for r in chart["runs"])
    for r in chart["runs"]:
        for d in r["dots"]:  # every dot drawn inside the chart
            assert plot["x"] <= d["x"] and d["x"] + d["w"] <= plot["x"] + plot["w"] and plot["y"] <= d["y"] <= plot["y"] + plot["h"]
    (shade,) = chart["shade"]
    assert shade["w"] > 0 and shade["h"] > 0 and shade["x"] >= plot["x"]
