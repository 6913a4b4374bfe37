"""The telemetry views and the Engine and GPU report section on a run whose reads are known (tests/store/imx_telemetry.py):
engine_cells and gpu_cells give back the numbers the reads were made from, and text, Markdown and JSON show them."""

from __future__ import annotations

import json

import pytest

from imx_telemetry import add_telemetry
from infermatrix.core.report import render_html, render_markdown
from infermatrix.core.report.fmt import fmt_ratio
from infermatrix.core.report.json_report import render_json

POWER_W = 400.0


@pytest.fixture
def with_telemetry(filled):
    store, run_id, cells, _ = filled
    valid = {k: v for k, v in cells.items() if v[0].status == "valid"}
    some = sorted(valid)
    add_telemetry(store, run_id, valid, power_w=POWER_W, preempting={some[0]}, throttled={some[1]})
    store.query("UPDATE runs SET config = json_merge_patch(config, '{\"hardware\": {\"kwh_usd\": 0.25}}') WHERE run_id = ?", [run_id])
    return store, run_id, valid, some


def _rows(store, sql, params):
    cols, rows = store.query(sql, params)
    return {(r[cols.index("context_tokens")], r[cols.index("concurrency")]): dict(zip(cols, r)) for r in rows}


def test_engine_cells_give_back_the_engine_rate_and_flag_the_preempting_cell(with_telemetry):
    store, run_id, valid, some = with_telemetry
    got = _rows(store, "SELECT * FROM engine_cells WHERE run_id = ?", [run_id])
    for key, (c, _) in valid.items():
        e = got[key]
        assert e["engine_tps"] == pytest.approx(c.total_tps) and e["engine_vs_client"] == pytest.approx(0, abs=1e-9)
        assert e["samples"] == 31 and e["kv_peak_pct"] == 50.0  # reads at ws, ws+1 … ws+30
        assert e["held_back"] is (key == some[0])
        assert e["preemptions"] == (60.0 if key == some[0] else 0.0) and e["waiting_max"] == (3.0 if key == some[0] else 0.0)


def test_gpu_cells_give_back_the_energy_and_the_throttle(with_telemetry):
    store, run_id, valid, some = with_telemetry
    got = _rows(store, "SELECT * FROM gpu_cells WHERE run_id = ?", [run_id])
    for key, (c, _) in valid.items():
        g = got[key]
        assert g["energy_j"] == pytest.approx(POWER_W * 30) and g["avg_w_per_gpu"] == pytest.approx(POWER_W)
        assert g["j_per_mtok"] == pytest.approx(1e6 * POWER_W / c.total_tps) and g["tok_per_j"] == pytest.approx(c.total_tps / POWER_W)
        assert g["throttled"] is (key == some[1]) and g["throttle_reasons"] == ("sw_power_cap" if key == some[1] else None)
    frontier = _rows(store, "SELECT f.*, f.context_tokens FROM frontier f WHERE run_id = ?", [run_id])
    for key, f in frontier.items():
        j = got[key]["j_per_mtok"]
        assert f["joules_per_mtok"] == pytest.approx(j) and f["energy_usd_per_mtok"] == pytest.approx(j / 3.6e6 * 0.25)


def test_markdown_and_json_show_the_engine_and_energy_columns(with_telemetry):
    store, run_id, valid, some = with_telemetry
    md = render_markdown(store, run_id)
    section = md.split("## Engine and GPU", 1)[1].split("\n## ", 1)[0]
    assert "| Context | N | Engine tok/s | vs client | KV peak | Preempted | Waiting max | Held back | W per GPU | J / M tok | tok / J | Throttled |" in section
    assert section.count("| yes |") == 1 and "yes (sw_power_cap)" in section and "400 W" in section
    assert "the engine held the load back (60 preemptions, up to 3 waiting)" in section
    doc = json.loads(json.dumps(render_json(store, run_id), default=str))
    rows = {(r["context_tokens"], r["concurrency"]): r for r in doc["decode"]}
    assert rows[some[0]]["telemetry"]["engine"]["held_back"] is True and rows[some[1]]["telemetry"]["energy"]["throttled"] is True
    assert rows[some[1]]["telemetry"]["energy"]["energy_j"] == pytest.approx(POWER_W * 30)
    assert rows[some[0]]["engine"] == "vllm"  # the decode row's own columns stay as they were


def test_a_run_without_telemetry_has_no_such_section(filled):
    store, run_id, _, _ = filled
    assert "## Engine and GPU" not in render_markdown(store, run_id)
    assert all(r["telemetry"] == {"engine": None, "energy": None} for r in render_json(store, run_id)["decode"])


def test_html_draws_each_cells_timeline_and_markdown_does_not(with_telemetry):
    store, run_id, valid, _ = with_telemetry
    html = render_html(store, run_id)
    for ctx, n in valid:
        assert f'id="timeline-{ctx}-{n}"' in html and f'id="timeline-{ctx}-{n}-power"' in html
    assert html.count('data-series="GPU 0"') == len(valid) and html.count('data-series="KV %"') == len(valid)
    assert "timeline-" not in render_markdown(store, run_id)


def test_compare_shows_both_runs_engine_and_energy_in_every_format(store):
    """compare (issue 32 item 5): for cells with telemetry in both runs, each engine's own tok/s, preemptions and held-back
    flag and each run's joules per million tokens, with other/A — the numbers the two runs' reads were made from."""
    from imx_factories import fill_run

    from infermatrix.core.report import render_compare_html, render_compare_markdown
    from infermatrix.core.report.json_report import render_compare_json

    a, cells_a, _ = fill_run(store, seed=1, other=False)
    b, cells_b, _ = fill_run(store, {"engine": "sglang"}, scale=1.25, seed=2, other=False)
    both = sorted(k for k, v in cells_a.items() if v[0].status == "valid" and k in cells_b and cells_b[k][0].status == "valid")
    shared = both[:3]
    add_telemetry(store, a, {k: cells_a[k] for k in shared}, power_w=POWER_W, preempting={shared[0]})
    add_telemetry(store, b, {k: cells_b[k] for k in shared + both[3:4]}, power_w=2 * POWER_W)  # one cell only B read
    doc = render_compare_json(store, [a, b])
    got = {(r["context_tokens"], r["concurrency"]): r for r in doc["telemetry"]}
    assert sorted(got) == shared  # cells read in both runs only
    for key, r in got.items():
        ta, tb = cells_a[key][0].total_tps, cells_b[key][0].total_tps
        assert r["a"]["engine"]["engine_tps"] == pytest.approx(ta) and r["b"]["engine"]["engine_tps"] == pytest.approx(tb)
        assert r["a"]["engine"]["held_back"] is (key == shared[0]) and r["b"]["engine"]["held_back"] is False
        assert r["b"]["gpu"]["j_per_mtok"] == pytest.approx(1e6 * 2 * POWER_W / tb)
        assert "timeline" not in r["a"]
    md = render_compare_markdown(store, [a, b])
    section = md.split("## Engine and GPU", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith(("| Context", "| ---"))]
    assert len(lines) == len(shared)
    first = [c.strip() for c in lines[0].strip("|").split("|")]
    ja, jb = 1e6 * POWER_W / cells_a[shared[0]][0].total_tps, 1e6 * 2 * POWER_W / cells_b[shared[0]][0].total_tps
    assert first[6:10] == ["60", "0", "yes", "no"] and first[-1] == fmt_ratio(jb / ja)
    assert "Engine and GPU" in render_compare_html(store, [a, b])
