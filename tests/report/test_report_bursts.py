"""Bursts and TTFO in every report format and in compare (docs/reports.md), from two real runs against the sim with a
reasoning profile: the Bursts section with its tail note, the Time to first answer token section beside TTFT, the JSON
rows equal to the views, compare's Bursts table for the bursts both runs ran alike, and the SLO keys ttfo_p<P>_ms and
e2e_p<P>_ms judging a burst (slo_points)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from infermatrix.core.report import render_markdown
from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import render_json
from infermatrix.core.report.sections.answer import ANSWER_TITLE
from infermatrix.core.report.sections.burst import BURSTS_TITLE
from infermatrix.core.report.text import render_text
from infermatrix.core.slo.spec import parse_slo
from infermatrix.core.store import Store
from infermatrix.core.store.slo_store import save_slos
from infermatrix.testing import run_matrix, sim_server
from compare_formats import compare_every_format

pytestmark = pytest.mark.slow

MATRIX = {"contexts": [256], "concurrency": [2], "duration_s": 1.0, "max_output": 48, "api": "chat", "prefill_contexts": []}
LOAD = [{"kind": "burst", "requests": 8, "concurrency": 2, "context": 256, "max_output": 48}]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    db = tmp_path_factory.mktemp("bursts") / "b.duckdb"
    ids = []
    with sim_server(reasoning_tokens=20) as sim:
        for _ in range(2):
            r = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix=MATRIX, config={"load": LOAD}, db=db)
            assert r.status == "completed", r.error
            ids.append(r.run_id)
    return db, ids


def test_every_format_shows_the_burst_and_ttfo_beside_ttft(two_runs):
    db, (a, _) = two_runs
    with Store(db, read_only=True) as s:
        (burst,) = s.query("SELECT * FROM burst_points WHERE run_id = ?", [a])[1:][0]  # one row
        doc = render_json(s, a)
        console = Console(file=io.StringIO(), width=250, color_system=None)
        render_text(s, a, console)
        text, md, html = console.file.getvalue(), render_markdown(s, a), render_html(s, a)
    assert burst and doc["bursts"][0]["requests"] == 8 and doc["bursts"][0]["concurrency"] == 2
    b = doc["bursts"][0]
    assert b["status"] in ("valid", "client_bound") and b["ttfo_p50_ms"] > b["ttft_p50_ms"]  # 20 reasoning tokens came first
    # A valid burst gets its tail note; one the client's own stall disowned (a loaded machine) gets its reason instead.
    notes = ("ran with fewer than 2 requests in flight", "the decode matrix sustained") if b["status"] == "valid" else ("event loop stalled",)
    for out in (text, md, html):
        assert BURSTS_TITLE in out and ANSWER_TITLE in out and "8@2 256" in out
        assert all(n in out for n in notes), (b["status"], b.get("reason"))


def _disowned(db, run_ids: list[str]) -> list[str]:
    """The reasons of the runs' bursts that are not valid: on a loaded machine the client's own stall can disown one
    (core/load/stall.py), and compare and the SLO judge valid bursts only."""
    with Store(db, read_only=True) as s:
        rows = s.query(f"SELECT status, reason FROM burst_points WHERE run_id IN ({', '.join('?' * len(run_ids))})", run_ids)[1]
    return [r for st, r in rows if st != "valid"]


def test_compare_lines_up_the_bursts_both_runs_ran(two_runs):
    db, (a, b) = two_runs
    doc, outs = compare_every_format(db, [a, b])
    if reasons := _disowned(db, [a, b]):  # bars.judged: a disowned burst is paired with nothing, and says why
        assert doc["bursts"] == [] and all("event loop stalled" in r for r in reasons), reasons
        return
    (pair,) = doc["bursts"]
    assert pair["run_a"] == a and pair["run_b"] == b and pair["a"]["requests"] == pair["b"]["requests"] == 8
    assert pair["ratios"]["duration_s"]["ratio"] == pytest.approx(pair["b"]["duration_s"] / pair["a"]["duration_s"])
    for out in outs:
        assert "Bursts" in out and "8@2 256" in out


def test_slo_keys_ttfo_and_e2e_judge_a_burst(two_runs):
    db, (a, _) = two_runs
    with Store(db) as s:
        (p,) = [dict(zip(["ttft_p99_ms", "ttfo_p50_ms", "e2e_p99_ms", "point"], r))
                for r in s.query("SELECT ttft_p99_ms, ttfo_p50_ms, e2e_p99_ms, point FROM burst_points WHERE run_id = ?", [a])[1]]
        between = (p["ttft_p99_ms"] + p["ttfo_p50_ms"]) / 2  # above every TTFT, below half the TTFOs
        specs = [parse_slo(f"ttft_p99_ms={between}"), parse_slo(f"ttfo_p99_ms={between}"), parse_slo(f"e2e_p99_ms={p['e2e_p99_ms'] * 2}")]
        names = save_slos(s, a, specs)
        got = dict(s.query("SELECT slo, meets FROM slo_points WHERE run_id = ? AND point = ?", [a, p["point"]])[1])
    if reasons := _disowned(db, [a]):  # an SLO judges valid points only (docs/slo.md): a disowned burst is not judged
        assert got == {} and all("event loop stalled" in r for r in reasons), (got, reasons)
        return
    assert [got[n] for n in names] == [True, False, True]
