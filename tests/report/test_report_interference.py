"""Interference points in every report format and in compare (docs/reports.md), from two real runs against the sim with
chunked prefill: the section with its stall note, the JSON rows equal to the view, compare's table for the points both
runs ran alike, and a point whose streams the server's KV cache cannot hold marked over capacity (not run, not sent)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from infermatrix.core.report import render_markdown
from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import render_json
from infermatrix.core.report.sections.interference import INTERFERENCE_TITLE
from infermatrix.core.report.text import render_text
from infermatrix.core.store import Store
from infermatrix.testing import run_matrix, sim_server
from compare_formats import compare_every_format

pytestmark = pytest.mark.slow

MATRIX = {"contexts": [], "prefill_contexts": [256], "prefill_samples": 1}
POINT = {"kind": "mixed", "decode_streams": 2, "decode_context": 256, "prefill_context": 2048, "prefills": 2,
         "decode_max_output": 512, "warmup_s": 0.2, "window_s": 0.5, "gap_s": 0.05}  # fmt: skip
# tiny holds 20,000 KV tokens: 9 × (1K + 1K) + 3,000 + 1 do not fit
TOO_BIG = {**POINT, "decode_streams": 9, "decode_context": 1024, "decode_max_output": 1024, "prefill_context": 3000}
AT_A_RATE = {**POINT, "prefill_rate": 20}  # two prompts 50 ms apart, each ~60 ms in the engine: they overlap


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    db = tmp_path_factory.mktemp("interference") / "i.duckdb"
    ids = []
    with sim_server(spec_tokens=0, max_num_batched_tokens=256, step_base_ms=5.0) as sim:
        for _ in range(2):
            r = run_matrix({"kind": "sim", "base_url": sim.base_url}, matrix=MATRIX, config={"load": [POINT, TOO_BIG, AT_A_RATE]}, db=db)
            assert r.status == "completed", r.error
            ids.append(r.run_id)
        truth = sim.truth()["requests"]
    assert not [t for t in truth if "-mixed-1-" in (t["request_id"] or "")]  # the point that cannot fit sent nothing
    return db, ids


def test_every_format_shows_the_interference_point_and_the_one_that_cannot_run(two_runs):
    db, (a, _) = two_runs
    with Store(db, read_only=True) as s:
        view = s.query("SELECT * FROM interference WHERE run_id = ? ORDER BY point", [a])
        doc = render_json(s, a)
        console = Console(file=io.StringIO(), width=250, color_system=None)
        render_text(s, a, console)
        text, md, html = console.file.getvalue(), render_markdown(s, a), render_html(s, a)
    rows = [dict(zip(view[0], r)) for r in view[1]]
    assert [r["status"] for r in rows] == ["valid", "over_capacity", "valid"]
    assert rows[2]["prefill_rate"] == 20 and rows[2]["during_gaps"] > 0
    assert "the streams need 21,433 KV tokens, the server holds 20,000" in rows[1]["reason"]
    assert [p["point"] for p in doc["interference"]] == [0, 1, 2]
    assert doc["interference"][0]["stall_max_ms"] == pytest.approx(rows[0]["stall_max_ms"])
    assert rows[0]["stall_max_ms"] > rows[0]["tbt_alone_ms"] and rows[0]["during_gaps"] > 0 and rows[0]["alone_gaps"] > 0
    for out in (text, md, html):
        assert INTERFERENCE_TITLE in out and "2@256 + 2×2K" in out and "9@1K + 2×3000" in out and "2×2K at 20/s" in out
        assert "stalled the decoders up to" in out and "the streams need 21,433 KV tokens" in out
        assert "poisson@" not in out  # not shown as an open-loop point


def test_compare_lines_up_the_points_both_runs_ran(two_runs):
    db, (a, b) = two_runs
    doc, outs = compare_every_format(db, [a, b])
    pair, at_rate = doc["interference"]  # the over-capacity point is valid in neither run
    assert at_rate["a"]["prefill_rate"] == at_rate["b"]["prefill_rate"] == 20
    assert pair["run_a"] == a and pair["run_b"] == b and pair["a"]["decode_streams"] == 2
    assert pair["ratios"]["stall_max_ms"]["ratio"] == pytest.approx(pair["b"]["stall_max_ms"] / pair["a"]["stall_max_ms"])
    for out in outs:
        assert INTERFERENCE_TITLE in out and "2@256 + 2×2K" in out
