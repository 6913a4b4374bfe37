"""Steady state: an engine that never runs N at once (admission limit) is flagged, with what it achieved —
through the metric names the engine's plugin declares. An engine that declares none is said to have none."""

from __future__ import annotations

import pytest
import json

import duckdb
from imxtest import run_cli
from profiles import write_profile

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI

NOT_FOUND = "engine metrics not found: steady state and engine-side token counts not checked"


def _run(server, db, kind):
    return run_cli(
        "run", "--engine", kind, "--base-url", server.base_url, "--contexts", "1K", "--concurrency", "2,4",
        "--duration", "1", "--max-output", "128", "--db", str(db), "--set", "matrix.steady_timeout_s=1",
        # What the engine admitted is the subject here, not whether this busy machine kept up (client_bound
        # cells get no flag notes in the report).
        "--set", "matrix.check_client=false",
    )


def test_admission_limited_cell_is_flagged(sim_factory, tmp_path):
    server = sim_factory(str(write_profile(tmp_path / "p.toml", max_num_seqs=2)))
    db = tmp_path / "s.duckdb"
    proc = _run(server, db, "sim")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert NOT_FOUND not in proc.stderr + proc.stdout
    con = duckdb.connect(str(db), read_only=True)
    flags = {n: json.loads(f) for n, f in con.execute("SELECT concurrency, flags FROM cells").fetchall()}
    assert flags[2]["steady_state"]["reached"] is True
    assert not flags[2].get("admission_limited")
    assert flags[4]["admission_limited"] is True
    assert flags[4]["achieved_concurrency"] == 2
    assert flags[4]["steady_state"]["engine_max_running"] == 2
    assert flags[4]["engine_gauges"] == {"state": "found", "failed_reads": 0}
    assert json.loads(con.execute("SELECT engine_metrics FROM runs").fetchone()[0])["found"] is True
    # ... and the report says so beside the numbers
    report = run_cli("report", "--db", str(db), "--format", "markdown")
    assert report.returncode == 0, report.stderr
    assert "never ran 4 at once (at most 2" in report.stdout


def test_generic_engine_says_engine_metrics_were_not_checked(sim_factory, tmp_path):
    """``openai`` declares no metrics (it knows no engine's names): nothing is flagged from them, and the run
    header, the store and the report say the engine side was not checked."""
    server = sim_factory(str(write_profile(tmp_path / "p.toml", max_num_seqs=2)))
    db = tmp_path / "o.duckdb"
    proc = _run(server, db, "openai")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert NOT_FOUND in " ".join((proc.stderr + proc.stdout).split())
    con = duckdb.connect(str(db), read_only=True)
    stored = json.loads(con.execute("SELECT engine_metrics FROM runs").fetchone()[0])
    assert stored["found"] is False and stored["note"] == NOT_FOUND
    flags = {n: json.loads(f) for n, f in con.execute("SELECT concurrency, flags FROM cells").fetchall()}
    assert flags[4]["steady_state"]["engine_metrics"] is False and flags[4]["tokens"]["engine"] is None
    # Standard fields only: no per-chunk usage asked, so tokens were recounted by the tokenizer.
    assert {s for (s,) in con.execute("SELECT token_source FROM cells WHERE status = 'valid'").fetchall()} <= {"tokenizer"}
    report = run_cli("report", "--db", str(db), "--format", "markdown")
    assert report.returncode == 0, report.stderr
    assert NOT_FOUND in report.stdout
