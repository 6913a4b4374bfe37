"""`infermatrix report --sweep SWEEP_ID` (issue 29 item 5; docs/tuning.md, "The report") over a real settings sweep on
the sim, through the real command line, in the four formats: the settings table is sweep_runs, what the engine
reported is the sim's own /debug/profile, the chart's points are sweep_frontier's, the best setting is best_setting's
row, and every "why" line is true of the stored cells (checked here in SQL of its own); `--slo` stores an SLO with
the sweep's runs and the choice is made again without rerunning. Bad input is one line, exit 2."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import duckdb
import pytest
from imxtest import ROOT, run_cli

SLO = "ttft_p99_ms=200"
# One context, three loads, 1 s windows: max_num_seqs=2 cannot hold 4 streams (over capacity there), 16 can.
MATRIX = ['--set', 'matrix.contexts=["1K"]', "--set", "matrix.prefill_contexts=[]", "--set", "matrix.concurrency=[1,2,4]",
          "--set", "matrix.duration_s=1", "--set", "matrix.check_client=false"]  # fmt: skip


def _rows(db: Path, sql: str, *params) -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute(sql, list(params))
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, str]:
    """A database holding one real sweep of the demo sim over max_num_seqs=2,16 under an SLO: (path, sweep id)."""
    tmp = tmp_path_factory.mktemp("sweepreport")
    db = tmp / "sweep.duckdb"
    res = run_cli("sweep", str(ROOT / "configs/demo-sim.toml"), "--grid", "engine.args.max_num_seqs=2,16", "--slo", SLO,
                  *MATRIX, "--db", str(db), cwd=tmp, timeout=400)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    (sweep,) = _rows(db, "SELECT sweep_id FROM sweeps")
    return db, sweep["sweep_id"]


def _report(db: Path, *args: str) -> str:
    res = run_cli("report", "--db", str(db), *args)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


@pytest.mark.slow
def test_the_json_report_is_the_views_and_its_why_lines_are_true_of_the_cells(swept):
    db, sid = swept
    got = json.loads(_report(db, "--sweep", sid, "--format", "json"))
    assert got["format"] == "infermatrix.sweep_report" and got["sweep"]["sweep_id"] == sid
    runs = _rows(db, "SELECT run_id, setting, status, k FROM sweep_runs WHERE sweep_id = ? ORDER BY k", sid)
    assert [{k: s[k] for k in ("run_id", "setting", "status", "k")} for s in got["settings"]] == runs
    assert [r["setting"] for r in runs] == ["engine.args.max_num_seqs=2", "engine.args.max_num_seqs=16"]
    for s in got["settings"]:  # what the engine reported: the sim's own profile, as it served it
        (profile,) = _rows(db, "SELECT engine_extra->'$.profile.max_num_seqs' AS seqs, engine_extra->>'$.startup_s' AS up "
                           "FROM runs WHERE run_id = ?", s["run_id"])  # fmt: skip
        assert s["reported"] == [{"name": "max_num_seqs", "value": str(profile["seqs"]), "asked": None}]
        assert s["setting"].endswith(f"={profile['seqs']}") and s["startup_s"] == float(profile["up"]) > 0
    front = _rows(db, "SELECT run_id, context_label, concurrency, tps_per_gpu, tps_per_user, on_frontier FROM sweep_frontier "
                  "WHERE sweep_id = ?", sid)  # fmt: skip
    key = lambda p: (p["run_id"], p["concurrency"])  # noqa: E731
    assert sorted(({k: p[k] for k in front[0]} for p in got["frontier"]), key=key) == sorted(front, key=key)
    best = _rows(db, "SELECT slo, context_label, objective, run_id, setting, value, runner_up_setting, margin, beyond_noise "
                 "FROM best_setting WHERE sweep_id = ? ORDER BY slo, context_tokens, objective", sid)  # fmt: skip
    assert [{k: b[k] for k in best[0]} for b in got["best"]] == best and {b["slo"] for b in best} == {SLO}
    (winner,) = [b for b in best if b["objective"] == "goodput"]
    assert len(got["why"]) == 1  # one loser, in one context, under one SLO
    (why,) = got["why"]
    loser = next(r for r in runs if r["run_id"] != winner["run_id"])
    assert why["run_id"] == loser["run_id"] and why["best_setting"] == winner["setting"]
    over = _rows(db, "SELECT min(concurrency) AS n FROM decode_matrix WHERE run_id = ? AND status IN ('over_capacity', "
                 "'admission_limited')", loser["run_id"])  # fmt: skip
    lost = _rows(db, "SELECT min(concurrency) AS n FROM slo_cells WHERE run_id = ? AND slo = ? AND NOT meets", loser["run_id"], SLO)
    assert why["over_capacity_at"] == over[0]["n"] and why["slo_lost_at"] == lost[0]["n"]
    if loser["setting"].endswith("=2"):  # the sim's batch cap of 2 cannot hold 4 streams at once (its model; stored as such)
        assert why["over_capacity_at"] == 4
    (score,) = _rows(db, "SELECT max(token_goodput) / 1 AS v FROM slo_cells WHERE run_id = ? AND slo = ? AND meets", loser["run_id"], SLO)
    assert why["value"] == pytest.approx(score["v"]) and why["shortfall"] == pytest.approx(1 - score["v"] / winner["value"])
    assert "slower per GPU" in why["line"] or why["value"] is None


@pytest.mark.slow
def test_text_and_markdown_show_every_setting_the_best_and_why(swept):
    db, sid = swept
    got = json.loads(_report(db, "--sweep", sid, "--format", "json"))
    for fmt in ("text", "markdown"):
        page = _report(db, "--sweep", sid, "--format", fmt)
        for s in got["settings"]:
            assert s["run_id"] in page and s["setting"] in page
        for w in got["why"]:
            assert w["line"] in page.replace("\\", ""), (fmt, w["line"])
        assert "Best setting" in page and "Frontier — 1K context" in page
        assert "GPU count unknown" not in page  # the sim reports its parallelism


def _svg_points(html: str) -> list[tuple[str, int, bool]]:
    """(series, N, on the envelope) of every dot of the page's frontier charts."""
    out = []
    for series, body in re.findall(r'<g class="imx-series" data-series="([^"]+)"[^>]*>(.*?)</g>', html):
        for cls, title in re.findall(r'<circle class="imx-point( imx-on-frontier)?"[^>]*><title>([^<]*)</title>', body):
            out.append((unescape(series), int(re.search(r"N=(\d+)", unescape(title)).group(1)), bool(cls)))
    return out


@pytest.mark.slow
def test_the_html_chart_draws_sweep_frontiers_points_with_the_envelope(swept, tmp_path):
    db, sid = swept
    out = tmp_path / "sweep.html"
    _report(db, "--sweep", sid, "--format", "html", "-o", str(out))
    html = out.read_text()
    front = _rows(db, "SELECT setting, concurrency, on_frontier FROM sweep_frontier WHERE sweep_id = ? AND tps_per_gpu IS NOT NULL", sid)
    assert sorted(_svg_points(html)) == sorted((p["setting"], p["concurrency"], p["on_frontier"]) for p in front)
    (envelope,) = re.findall(r'class="imx-line imx-envelope"[^>]* d="([^"]+)"', html)
    assert envelope.count("L") + 1 == sum(p["on_frontier"] for p in front)  # one line through the envelope's dots
    assert len({s for s, _, _ in _svg_points(html)}) == 2  # a colour (a series) per setting
    assert "<script" not in html


@pytest.mark.slow
def test_an_slo_given_to_the_report_is_stored_with_the_sweeps_runs_and_decides_again(swept, tmp_path):
    db, sid = swept
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(db.read_bytes())
    loose = "ttft_p99_ms=100000"
    page = _report(copy, "--sweep", sid[:4], "--slo", loose, "--format", "markdown")
    assert loose in page
    best = _rows(copy, "SELECT run_id FROM best_setting WHERE sweep_id = ? AND slo = ? AND objective = 'goodput'", sid, loose)
    assert len(best) == 1  # chosen again from the stored cells: nothing was rerun
    assert _rows(copy, "SELECT count(*) AS n FROM runs")[0]["n"] == 2
    assert _rows(copy, "SELECT count(DISTINCT run_id) AS n FROM slo_limits WHERE slo = ?", loose)[0]["n"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["RUN", "--sweep", "SWEEP"], "not both"),
    (["--sweep", "szzzzzz"], "no sweep 'szzzzzz'"),
    (["--sweep", "RUN"], "is a run, not a sweep"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2(swept, args, says):
    db, sid = swept
    run = _rows(db, "SELECT run_id FROM runs ORDER BY run_id LIMIT 1")[0]["run_id"]
    res = run_cli("report", "--db", str(db), *(run if a == "RUN" else sid if a == "SWEEP" else a for a in args))
    assert res.returncode == 2 and says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
