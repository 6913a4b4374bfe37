"""Steady state: an engine that never runs N at once (admission limit) is flagged, with what it achieved."""

from __future__ import annotations

import json

import duckdb
from imxtest import run_cli
from profiles import write_profile


def test_admission_limited_cell_is_flagged(sim_factory, tmp_path):
    server = sim_factory(str(write_profile(tmp_path / "p.toml", max_num_seqs=2)))
    db = tmp_path / "s.duckdb"
    proc = run_cli(
        "run", "--engine", "openai", "--base-url", server.base_url, "--contexts", "1K", "--concurrency", "2,4",
        "--duration", "1", "--max-output", "128", "--db", str(db), "--set", "matrix.steady_timeout_s=1",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    flags = {n: json.loads(f) for n, f in con.execute("SELECT concurrency, flags FROM cells").fetchall()}
    assert flags[2]["steady_state"]["reached"] is True
    assert not flags[2].get("admission_limited")
    assert flags[4]["admission_limited"] is True
    assert flags[4]["achieved_concurrency"] == 2
    assert flags[4]["steady_state"]["engine_max_running"] == 2
    # ... and the report says so beside the numbers
    report = run_cli("report", "--db", str(db), "--format", "markdown")
    assert report.returncode == 0, report.stderr
    assert "never ran 4 at once (at most 2" in report.stdout
