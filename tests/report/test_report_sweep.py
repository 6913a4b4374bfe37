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
from html_tree import charts, parse, table_rows, tables_by_class
from imxtest import ROOT, run_cli

from infermatrix.core.report.fmt import fmt_share

SLO = "ttft_p99_ms=200"
# One context, three loads, 1 s windows: max_num_seqs=2 cannot hold 4 streams (over capacity there), 16 can.
MATRIX = ['--set', 'matrix.contexts=["1K"]', "--set", "matrix.prefill_contexts=[]", "--set", "matrix.concurrency=[1,2,4]",
          "--set", "matrix.duration_s=1", "--set", "matrix.max_output=32", "--set", "matrix.check_client=false"]  # fmt: skip
# (short answers, so requests end inside a 1 s window and the SLO has something to judge)


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
    assert f"infermatrix report --sweep {sweep['sweep_id']}" in res.stdout  # the sweep's summary says where its report is
    return db, sweep["sweep_id"]


def _check_why(q, got: dict, sid: str) -> None:
    """Every why row of a JSON sweep report is true of the stored cells, asked here in SQL of its own."""
    winners = {(b["slo"], b["context_label"]): b for b in q("SELECT * FROM best_setting WHERE sweep_id = ? AND objective = 'goodput'", sid)}
    ran = [r["run_id"] for r in q("SELECT run_id FROM sweep_runs WHERE sweep_id = ? AND status = 'completed'", sid)]
    assert len(got["why"]) == len(winners) * (len(ran) - 1) > 0
    for w in got["why"]:
        win = winners[(w["slo"], w["context_label"])]
        assert w["run_id"] != win["run_id"] and w["run_id"] in ran and w["best_setting"] == win["setting"]
        args = (w["run_id"], w["context_label"])
        (over,) = q("SELECT min(concurrency) AS n FROM decode_matrix WHERE run_id = ? AND context_label = ? "
                    "AND status IN ('over_capacity', 'admission_limited')", *args)  # fmt: skip
        (lost,) = q("SELECT min(concurrency) AS n FROM slo_cells WHERE run_id = ? AND context_label = ? AND slo = ? AND NOT meets",
                    *args, w["slo"])  # fmt: skip
        (good,) = q("SELECT max(c.token_goodput / g.gpus) AS v FROM slo_cells c JOIN run_gpus g USING (run_id) WHERE c.run_id = ? "
                    "AND c.context_label = ? AND c.slo = ? AND c.meets", *args, w["slo"])  # fmt: skip
        assert (w["over_capacity_at"], w["slo_lost_at"]) == (over["n"], lost["n"]), w
        assert w["value"] == pytest.approx(good["v"]) and w["shortfall"] == pytest.approx(1 - good["v"] / win["value"]), w
        for words, n in (("over capacity at", over["n"]), ("SLO lost at", lost["n"])):
            assert (f"{words} {n}" in w["line"]) is (n is not None), w["line"]
        assert ("slower per GPU" in w["line"]) is (good["v"] < win["value"]), w["line"]


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
    assert len(got["why"]) == 1  # one loser, in one context, under one SLO
    _check_why(lambda sql, *p: _rows(db, sql, *p), got, sid)
    (why,) = got["why"]
    if why["setting"].endswith("=2"):  # the sim's batch cap of 2 cannot hold 4 streams at once (its model; stored as such)
        assert why["over_capacity_at"] == 4


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
        for b in got["best"]:  # best_setting's rows, as the Markdown table and the terminal print them
            cells = [b["slo"], b["context_label"], b["objective"], b["setting"], b["runner_up_setting"] or "—",
                     "—" if b["margin"] is None else f"+{fmt_share(b['margin'])}"]  # fmt: skip
            line = next((ln for ln in page.splitlines() if all(c in ln for c in cells[:4])), "")
            assert all(c in line for c in cells), (fmt, cells, line)
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
    root = parse(html)  # every element closed in order
    (settings,) = tables_by_class(root, "sweep-settings")
    runs = _rows(db, "SELECT k, setting, status, run_id FROM sweep_runs WHERE sweep_id = ? ORDER BY k", sid)
    assert [row[:4] for row in table_rows(settings)[1]] == [[str(r["k"]), r["setting"], r["status"], r["run_id"]] for r in runs]
    assert [c.attrs["id"] for c in charts(root)] == ["frontier-1K"]


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


def _made_up_sweep(store, gpus: int | None) -> str:
    """A sweep of three made-up runs (tests/store/test_sweep_views.py) with or without a GPU count."""
    from test_sweep_views import _run, _sweep

    runs = {"2": _run(store, 1.0, 0.01, gpus=gpus), "16": _run(store, 1.3, 0.01, concurrency=(1, 8), gpus=gpus),
            "64": _run(store, 0.7, 0.01, gpus=gpus)}  # fmt: skip
    return _sweep(store, runs, slo="ttft_p99_ms=250")


def _four(store, sid: str) -> dict[str, str]:
    from rich.console import Console

    from infermatrix.core.report import sweep_report as sr

    console = Console(record=True, width=200)
    sr.render_sweep_text(store, sid, console)
    return {"text": console.export_text(), "markdown": sr.render_sweep_markdown(store, sid), "html": sr.render_sweep_html(store, sid),
            "json": json.dumps(sr.render_sweep_json(store, sid))}


HOW = "give it with --set hardware.gpus=N"


def test_the_why_lines_of_a_made_up_sweep_are_true_of_its_cells(store):
    from infermatrix.core.report.sweep_report import render_sweep_json

    sid = _made_up_sweep(store, 4)
    got = render_sweep_json(store, sid)
    _check_why(lambda sql, *p: [dict(zip(c, r)) for c, rows in [store.query(sql, list(p))] for r in rows], got, sid)
    assert {w["slo_lost_at"] for w in got["why"]} == {8}  # TTFT 60 ms x N ÷ speed: over 250 ms at 8 streams, not at 2


def test_every_format_of_a_sweep_report_says_where_the_gpu_count_is_unknown_and_how_to_give_it(store):
    sid = _made_up_sweep(store, None)
    pages = _four(store, sid)
    for fmt in ("text", "markdown", "html"):
        page = " ".join(unescape(pages[fmt]).replace("\\", "").split())  # a terminal folds long lines
        assert "tok/s per GPU, the frontier and the cost per token cannot be shown without it" in page and HOW in page, fmt
        assert "goodput is per server, not per GPU" in page and "tok/s per server" in page, fmt  # best_setting's own note
    assert "<svg" not in pages["html"]  # nothing to draw: said instead
    got = json.loads(pages["json"])
    assert all(s["gpus"] is None for s in got["settings"]) and all(f["gpus_note"] and HOW in f["gpus_note"] for f in got["frontier"])
    known = _four(store, _made_up_sweep_known(store))
    assert all("GPU count unknown" not in p for p in known.values()) and "<svg" in known["html"] and "imx-envelope" in known["html"]


def _made_up_sweep_known(store) -> str:
    from test_sweep_views import _run, _sweep

    return _sweep(store, {"2": _run(store, 1.0, 0.01), "16": _run(store, 1.3, 0.01)}, sweep_id="s7654321", slo="ttft_p99_ms=250")


def test_the_run_report_and_compare_say_it_where_per_gpu_figures_and_the_chart_would_be(store):
    from rich.console import Console

    from infermatrix.core import report
    from infermatrix.core.slo import parse_slo
    from infermatrix.core.store.slo_store import save_slos
    from test_sweep_views import _run

    unknown, known = _run(store, 1.0, 0.01, gpus=None), _run(store, 1.3, 0.01)
    for rid in (unknown, known):
        save_slos(store, rid, [parse_slo("ttft_p99_ms=250")])
    console = Console(record=True, width=200)
    report.render_compare_text(store, [unknown, known], console)
    for page in (report.render_markdown(store, unknown), report.render_html(store, unknown), console.export_text(),
                 report.render_compare_markdown(store, [unknown, known]), report.render_compare_html(store, [unknown, known])):
        page = " ".join(unescape(page).replace("\\", "").split())
        assert f"GPU count unknown for {unknown} (an attached server on a CPU" in page and HOW in page
        assert "tok/s per GPU cannot be shown without it" in page  # under the capacity table's tok/s per GPU
        assert known not in page.split("GPU count unknown for ")[1].split(":")[0]  # only the run that lacks it
    html = unescape(report.render_compare_html(store, [unknown, known]))
    assert "the frontier chart (tok/s per GPU against tok/s per user) cannot be shown without it" in html  # where the chart is left out
    assert "GPU count unknown" not in report.render_html(store, known)


def test_latest_names_the_newest_sweep_and_a_store_without_sweeps_says_so(store):
    from infermatrix.core.report.sweep_data import resolve_sweep_arg
    from infermatrix.core.store import StoreError

    with pytest.raises(StoreError, match="no sweep in .* yet"):
        resolve_sweep_arg(store, "latest")
    first = _made_up_sweep(store, 4)
    assert resolve_sweep_arg(store, "latest") == first
    second = _made_up_sweep_known(store)
    assert resolve_sweep_arg(store, "latest") == second and resolve_sweep_arg(store, first[:5]) == first
