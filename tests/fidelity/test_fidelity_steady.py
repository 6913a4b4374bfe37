"""Steady state: an engine that never runs N at once (admission limit) is flagged, with what it achieved —
through the metric names the engine's plugin declares. An engine that declares none is said to have none."""

from __future__ import annotations

import pytest
import json

import duckdb
from bars import AVG_ROUNDING
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
    # avg_active (docs/metrics.md): the client's in-flight mean less the engine's mean waiting gauge, where it has
    # one — what the engine ran, not what the client sent (4 sent, 2 seated, 2 queued in the server).
    avg4 = con.execute("SELECT avg_active FROM cells WHERE concurrency = 4").fetchone()[0]
    assert flags[4]["avg_active_source"] == "engine" and flags[4]["admission"]["waiting_mean"] > 0, flags[4]
    assert avg4 == pytest.approx(max(0.0, flags[4]["client_active"] - flags[4]["admission"]["waiting_mean"]), abs=AVG_ROUNDING)
    assert flags[4]["client_active"] > avg4
    assert json.loads(con.execute("SELECT engine_metrics FROM runs").fetchone()[0])["found"] is True
    # Never a valid N = 4: the cell has a status of its own, its numbers kept in cells, none in decode_matrix.
    status = dict(con.execute("SELECT concurrency, status FROM decode_matrix").fetchall())
    assert status == {2: "valid", 4: "admission_limited"}
    assert con.execute("SELECT total_tps IS NULL, ran_at_most FROM decode_matrix WHERE concurrency = 4").fetchone() == (True, 2)
    assert con.execute("SELECT total_tps FROM cells WHERE concurrency = 4").fetchone()[0] > 0
    # ... and the report says what ran
    report = run_cli("report", "--db", str(db), "--format", "markdown")
    assert report.returncode == 0, report.stderr
    assert "ran at most 2 of 4" in report.stdout


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
    # Nothing to judge admission by: the cell's flags say it was not checked.
    assert flags[4]["admission"]["checked"] is False and "not checked" in flags[4]["admission"]["why"]
    # Standard fields only: no per-chunk usage asked, so tokens were recounted by the tokenizer.
    assert {s for (s,) in con.execute("SELECT token_source FROM cells WHERE status = 'valid'").fetchall()} <= {"tokenizer"}
    report = run_cli("report", "--db", str(db), "--format", "markdown")
    assert report.returncode == 0, report.stderr
    assert NOT_FOUND in report.stdout
