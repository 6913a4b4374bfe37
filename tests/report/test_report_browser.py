"""The HTML reports as a browser draws them: headless Chromium loads the page (offline), a probe
script added to a copy of it reads the laid-out tables and charts back, and a screenshot is taken.

Needs Chromium (Debian: `apt-get install chromium`; .ci/run installs it). Without it these tests
are skipped, saying so."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from infermatrix.core.contexts import parse_context

from imx_factories import fill_run
from infermatrix.core.importer import import_page
from infermatrix.core.report import render_compare_html, render_html
from infermatrix.core.report.data import load_intervals, load_prefill_intervals
from infermatrix.core.report.fmt import fmt_ms_pm, fmt_tps_pm, status_label
from infermatrix.core.report.layout import DOUBTFUL_MARK
from infermatrix.core.store import Store
from infermatrix.core.store.points import save_point
from report_expect import REFERENCE_PAGE
from test_report_load_sections import BOUND, VALID, VALID_2, fill_load_run

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "chrome")) if p), None)
pytestmark = [
    pytest.mark.slow,  # starts headless Chromium
    pytest.mark.skipif(
        CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium), so the HTML render check can't run"
    ),
]
WIDTH, HEIGHT = 1400, 3200

PROBE = """<script>
window.addEventListener('load', () => {
  const box = e => { const r = e.getBoundingClientRect(); return {w: r.width, h: r.height}; };
  const charts = [...document.querySelectorAll('figure.chart svg.imx-chart')].map(s => ({
    id: s.id, ...box(s), points: s.querySelectorAll('circle').length, cells: s.querySelectorAll('g[data-cell]').length }));
  const tables = [...document.querySelectorAll('table')].map(t => ({cls: t.className,
    rows: [...t.querySelectorAll('tr')].map(tr => [...tr.children].map(c => c.innerText.split(/\\s+/).join(' ').trim()))}));
  const out = document.createElement('pre');
  out.id = 'imx-probe';
  out.textContent = JSON.stringify({charts, tables, scrollWidth: document.documentElement.scrollWidth, innerWidth});
  document.body.appendChild(out);
});
</script>"""


def chromium(tmp: Path, *args: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={tmp / 'chrome-profile'}", f"--window-size={WIDTH},{HEIGHT}", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def render(page: str, tmp: Path, name: str) -> tuple[dict, Path]:
    """Probe results and a screenshot of ``page`` as Chromium lays it out."""
    probed = tmp / f"{name}-probe.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = chromium(tmp, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    m = re.search(r'<pre id="imx-probe">(.*?)</pre>', dom, re.S)
    assert m, "the probe did not run: the page did not load"
    plain = tmp / f"{name}.html"
    plain.write_text(page, encoding="utf-8")
    shot = tmp / f"{name}.png"
    chromium(tmp, f"--screenshot={shot}", plain.as_uri())
    return json.loads(html.unescape(m.group(1))), shot


def check_screenshot(shot: Path) -> None:
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (WIDTH, HEIGHT)
    assert len(data) > 40_000, "the screenshot is nearly blank"


def check_charts(probe: dict, want_ids: set[str], total_points: int) -> None:
    drawn = {c["id"]: c for c in probe["charts"] if c["w"] > 300 and c["h"] > 150}
    assert len(drawn) >= 4 and want_ids <= set(drawn), probe["charts"]
    assert all(c["points"] or c["cells"] for c in drawn.values())
    assert drawn["total-tps"]["points"] == total_points
    assert probe["scrollWidth"] <= probe["innerWidth"], "the page is wider than the window"


def rows_of(probe: dict, cls: str) -> list[list[str]]:
    (table,) = [t for t in probe["tables"] if cls in t["cls"].split()]
    return table["rows"]


def expected_matrix_cells(store: Store, run_id: str) -> dict[tuple[str, str], str]:
    cols, rows = store.query("SELECT context_label, concurrency, status, total_tps, ttft_ms, doubtful FROM decode_matrix WHERE run_id = ?", [run_id])

    def mark(col: str, doubtful: list[str] | None) -> str:  # a number the client verdict marked doubtful
        return DOUBTFUL_MARK if col in (doubtful or []) else ""

    ivs = load_intervals(store, run_id)  # (context tokens, concurrency) -> metric -> interval

    def bounds(label: str, n: int, metric: str) -> tuple | None:  # the stored interval, shown as ± where wider than printed
        iv = ivs.get((parse_context(label), n), {}).get(metric)
        return None if iv is None else (iv.lo, iv.hi)

    return {(label, str(n)): (f"{mark('total_tps', d)}{fmt_tps_pm(tps, bounds(label, n, 'total_tps'))} "
                              f"{mark('ttft_ms', d)}{fmt_ms_pm(ttft, bounds(label, n, 'ttft_ms'))} TTFT" if status == "valid" else status_label(status))
            for label, n, status, tps, ttft, d in rows}  # fmt: skip


def check_matrix(probe: dict, want: dict[tuple[str, str], str]) -> None:
    header, *body = rows_of(probe, "matrix")
    got = {(row[0], n): cell for row in body for n, cell in zip(header[1:], row[1:]) if (row[0], n) in want}
    assert got == want


def printed_unit(cell: str) -> float:
    """One unit of a table cell's last printed digit, in the number's own unit: ``"27.7K ±0.3K"`` -> 100.0,
    ``"296 ms"`` -> 1.0, ``"7,950.5"`` -> 0.1."""
    number = cell.split(" ")[0].replace(",", "")
    scale = {"K": 1e3, "M": 1e6}.get(number[-1], 1.0)
    digits = number.rstrip("KM")
    return scale * 10.0 ** -(len(digits.split(".")[1]) if "." in digits else 0)


def test_sim_run_report_renders(sim_run_db, tmp_path):
    db, run_id = sim_run_db
    with Store(db, read_only=True) as store:
        page = render_html(store, run_id)
        want = expected_matrix_cells(store, run_id)
        valid = store.query("SELECT count(*) FROM decode_matrix WHERE run_id = ? AND status = 'valid'", [run_id])[1][0][0]
        prefill = store.query("SELECT context_label, prompt_tps, ttft_ms, context_tokens FROM prefill_list WHERE run_id = ? AND status = 'valid'", [run_id])[1]
        prefill_ivs = load_prefill_intervals(store, run_id)  # the point's ± from its cold probes
    probe, shot = render(page, tmp_path, "sim")
    check_screenshot(shot)
    check_charts(probe, {"total-tps", "per-request-tps", "prefill-tps", "prefill-ttft", "decode-heatmap", "ttft-percentiles"}, valid)
    check_matrix(probe, want)
    shown = rows_of(probe, "prefill")
    for label, tps, ttft, ctx in prefill:
        ivs = prefill_ivs[ctx]
        assert all(ivs[m].lo is not None and ivs[m].hi is not None and ivs[m].n >= 2 for m in ("prompt_tps", "ttft_ms")), ivs
        row = [f"{label} context", fmt_tps_pm(tps, (ivs["prompt_tps"].lo, ivs["prompt_tps"].hi)), fmt_ms_pm(ttft, (ivs["ttft_ms"].lo, ivs["ttft_ms"].hi)), "Valid"]
        assert row in shown, (row, shown)
        # ± shows where the stored interval is as wide as the number's last printed digit and not where it rounds away
        # (docs/reports.md). The fitted sim has no jitter: a point's kept probes can agree to a tenth of a millisecond.
        for cell, value, iv in ((row[1], tps, ivs["prompt_tps"]), (row[2], ttft, ivs["ttft_ms"])):
            half, unit = max(iv.hi - value, value - iv.lo), printed_unit(cell)
            if half >= unit:
                assert "±" in cell, (cell, half, unit)
            elif half < unit / 2:  # between the two it depends on rounding: either is right
                assert "±" not in cell, (cell, half, unit)


def test_open_loop_sections_and_chart_render(tmp_path):
    with Store(tmp_path / "load.duckdb") as store:
        page = render_html(store, fill_load_run(store))
    probe, shot = render(page, tmp_path, "load")
    (chart,) = [c for c in probe["charts"] if c["id"] == "openloop-latency"]
    assert chart["w"] > 300 and chart["h"] > 150 and chart["points"] == 4  # 2 valid points × (p50, p99)
    assert probe["scrollWidth"] <= probe["innerWidth"], "the page is wider than the window"
    assert ["gamma:0.5 1K ≤1", "20", "9.10", "2,437", "99.0", "—", "31/40", "client_bound"] in rows_of(probe, "open-loop")
    assert rows_of(probe, "trace-replay")[1][:3] == ["trace mini (mooncake)", "3/4", "1.60"]
    assert len(shot.read_bytes()) > 20_000


def test_imported_reference_report_renders(tmp_path):
    with Store(tmp_path / "ref.duckdb") as store:
        rid = import_page(store, REFERENCE_PAGE).run_id
        page = render_html(store, rid)
        want = expected_matrix_cells(store, rid)
    probe, shot = render(page, tmp_path, "reference")
    check_screenshot(shot)
    text = REFERENCE_PAGE.read_text(encoding="utf-8")
    valid_rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
                  if line.startswith("| Sustained decode") and "| Valid |" in line]
    check_charts(probe, {"total-tps", "per-request-tps", "prefill-tps", "prefill-ttft", "decode-heatmap"}, len(valid_rows))
    check_matrix(probe, want)
    long = rows_of(probe, "long")
    assert all(row in long for row in valid_rows)  # the page's own rows, as the browser shows ours


def test_compare_page_renders(sim_run_db, tmp_path):
    db = tmp_path / "both.duckdb"
    shutil.copy(sim_run_db[0], db)
    with Store(db) as store:
        ref = import_page(store, REFERENCE_PAGE).run_id
        page = render_compare_html(store, [ref, sim_run_db[1]])
        common = store.query("SELECT count(DISTINCT (context_label, concurrency)) FROM engine_comparison WHERE run_a = ? AND run_b = ?",
                             [ref, sim_run_db[1]])[1][0][0]
    probe, shot = render(page, tmp_path, "compare")
    check_screenshot(shot)
    header, *body = rows_of(probe, "compare")
    assert len(body) == common >= 1
    assert all(re.fullmatch(r"×\d+\.\d\d( [✓✗])?", row[4]) for row in body)
    assert {c["id"] for c in probe["charts"] if c["w"] > 300} >= {"compare-total-tps", "ratio-b"}


SCALE_PROBE = """<script>
window.addEventListener('load', () => {
  const charts = [...document.querySelectorAll('figure.chart')].map(f => {
    const s = f.querySelector('svg.imx-chart'), tick = s.querySelector('text.imx-tick');
    return {id: f.dataset.chart, title: f.querySelector('figcaption b').innerText, viewbox: s.viewBox.baseVal.width,
            w: s.getBoundingClientRect().width, font: parseFloat(getComputedStyle(tick).fontSize),
            tick_h: tick.getBoundingClientRect().height};
  });
  const out = document.createElement('pre');
  out.id = 'imx-probe';
  out.textContent = JSON.stringify({charts, scrollWidth: document.documentElement.scrollWidth, innerWidth});
  document.body.appendChild(out);
});
</script>"""


def test_every_chart_is_captioned_and_drawn_at_one_scale(tmp_path):
    """Issue 27 item 11: the frontier charts were each captioned only "Frontier" (the context was in data-chart), and
    the latency-vs-rate chart, alone in its row, was stretched to the page's width: axis text about twice the size
    of every other chart's. Now each frontier caption names its context, and every chart's tick labels are drawn
    at the same size (the SVG's rendered width over its viewBox width, times the tick's font size)."""
    with Store(tmp_path / "all.duckdb") as store:
        rid, _, _ = fill_run(store, seed=1)  # 3 contexts, 4 GPUs: three frontier charts
        for p in (VALID, VALID_2, BOUND):
            save_point(store, rid, p, [])
        contexts = [r[0] for r in store.query("SELECT DISTINCT context_label, context_tokens FROM frontier ORDER BY 2")[1]]
        page = render_html(store, rid)
    probed = tmp_path / "scale-probe.html"
    probed.write_text(page.replace("</body>", SCALE_PROBE + "</body>"), encoding="utf-8")
    dom = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    m = re.search(r'<pre id="imx-probe">(.*?)</pre>', dom, re.S)
    assert m, "the probe did not run: the page did not load"
    probe = json.loads(html.unescape(m.group(1)))
    charts = {c["id"]: c for c in probe["charts"]}
    assert [charts[f"frontier-{c}"]["title"] for c in contexts] == [f"Frontier — {c} context" for c in contexts] and len(contexts) == 3
    assert "openloop-latency" in charts and "total-tps" in charts
    # the rendered size of a tick label's font, px: one for every chart of the page's width (the heatmap is wider)
    sizes = {cid: c["font"] * c["w"] / c["viewbox"] for cid, c in charts.items() if c["viewbox"] == 640}
    assert len(sizes) >= 8, sizes
    assert max(sizes.values()) / min(sizes.values()) < 1.02, sizes
    assert charts["openloop-latency"]["tick_h"] == pytest.approx(charts["total-tps"]["tick_h"], rel=0.05)
    assert probe["scrollWidth"] <= probe["innerWidth"]
    shot = tmp_path / "all.png"
    plain = tmp_path / "all.html"
    plain.write_text(page, encoding="utf-8")
    chromium(tmp_path, f"--screenshot={shot}", plain.as_uri())
    check_screenshot(shot)
