"""Ctrl-C, SIGTERM, a second signal and kill -9, sent to the real CLI mid-cell: what is kept, the exit
code, and that no engine process outlives the run; then resume runs only what is missing."""

from __future__ import annotations

import pytest
import signal
import time

import psutil
from rel_helpers import Cli, assert_nothing_left, cells, is_sim, processes_mentioning, query, run_cli, run_row, running_requests, sim_config, write_profile

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI


def _mid_second_cell(tmp_path, profile, db, **matrix) -> Cli:
    """A launch-mode run of 1K x 1 then 1K x 2, caught once 1K x 1 is saved and 1K x 2 has requests in flight."""
    cfg = sim_config(tmp_path, profile, **{"concurrency": [1, 2], "duration_s": 2.0, **matrix})
    cli = Cli("run", str(cfg), "--db", str(db), cwd=tmp_path)
    port = cli.engine_port()
    cli.wait_stderr(r"decode 1K × 1\s+valid", timeout=60)
    cli.wait_for(lambda: running_requests(port) >= 2, "1K x 2 to have its requests in flight")
    return cli


def _check_interrupted(db, cli: Cli) -> dict:
    run = run_row(db)
    assert run["status"] == "interrupted"
    got = cells(db)
    assert got[(1024, 1)]["status"] == "valid"
    partial = got[(1024, 2)]
    assert partial["status"] == "interrupted" and "interrupted" in partial["reason"]
    assert partial["total_tps"] is None
    f = partial["flags"]
    assert f["requests"] > 0 and f["outcomes"].get("cancelled", 0) >= 1  # the open streams, closed and kept
    assert f["requests"] == query(db, "SELECT count(*) FROM requests WHERE concurrency = 2")[0][0]
    assert "resume" in cli.stderr
    return run


def test_sigint_mid_cell_then_run_resume(tmp_path):
    db = tmp_path / "r.duckdb"
    cli = _mid_second_cell(tmp_path, write_profile(tmp_path / "p.json"), db)
    cli.signal(signal.SIGINT)
    assert cli.wait(30) == 130, cli.stderr[-3000:]
    assert_nothing_left(tmp_path, cli)
    run = _check_interrupted(db, cli)
    assert "Speed test matrix" in cli.stdout  # the report of what was kept is printed
    before = query(db, "SELECT saved_at FROM cells WHERE concurrency = 1")[0][0]
    n_before = query(db, "SELECT count(*) FROM requests WHERE concurrency = 1")[0][0]

    proc = run_cli("run", "--resume", run["run_id"], "--db", str(db), "--set", "matrix.duration_s=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "decode 1K × 1" not in proc.stderr  # only the missing cell ran
    got = cells(db)
    assert got[(1024, 2)]["status"] == "valid"
    assert query(db, "SELECT saved_at FROM cells WHERE concurrency = 1")[0][0] == before
    assert query(db, "SELECT count(*) FROM requests WHERE concurrency = 1")[0][0] == n_before
    assert run_row(db)["status"] == "completed"
    assert_nothing_left(tmp_path)
    again = run_cli("resume", run["run_id"][:4], "--db", str(db), cwd=tmp_path)  # a prefix is enough
    assert again.returncode == 0 and "nothing to run" in again.stderr and "starting" not in again.stderr


def test_sigterm_mid_cell(tmp_path):
    db = tmp_path / "r.duckdb"
    cli = _mid_second_cell(tmp_path, write_profile(tmp_path / "p.json"), db)
    cli.signal(signal.SIGTERM)
    assert cli.wait(30) == 130, cli.stderr[-3000:]
    assert "SIGTERM" in cli.stderr
    assert_nothing_left(tmp_path, cli)
    _check_interrupted(db, cli)


def test_second_signal_stops_at_once(tmp_path):
    # An engine that takes a minute to shut down and ignores signals meanwhile: the first Ctrl-C waits
    # for it (grace periods, then SIGKILL: over 10 s); the second kills it and exits at once.
    db = tmp_path / "r.duckdb"
    profile = write_profile(tmp_path / "slow-exit.json", {"shutdown_delay_s": 60})
    cli = _mid_second_cell(tmp_path, profile, db)
    cli.signal(signal.SIGINT)
    cli.wait_stderr(r"stopping sim …")
    sim_log = lambda: "".join(p.read_text() for p in db.with_suffix(".runs").glob("*/sim.log"))  # noqa: E731
    cli.wait_for(lambda: "shutting down in 60 s" in sim_log(), "the engine to get the first signal")
    t0 = time.monotonic()
    cli.signal(signal.SIGINT)
    assert cli.wait(30) == 130
    assert time.monotonic() - t0 < 6, "the second signal should not wait out the engine's grace periods"
    assert "again: killing the engine" in cli.stderr and "stopped at once" in cli.stderr
    assert "Speed test matrix" not in cli.stdout  # at once: no report
    assert_nothing_left(tmp_path, cli)
    _check_interrupted(db, cli)


def test_kill_9_leaves_no_engine_and_resume_finishes(tmp_path):
    # Nothing can run after SIGKILL; the engine still goes (it asked Linux for SIGTERM when its parent
    # dies), the finished cell is in the database, and resume picks the run up.
    db = tmp_path / "r.duckdb"
    cli = _mid_second_cell(tmp_path, write_profile(tmp_path / "p.json"), db)
    engine = [p for p in cli.descendants() if is_sim(p.cmdline())]
    assert engine
    cli.signal(signal.SIGKILL)
    assert cli.wait(10) == -signal.SIGKILL
    gone, alive = psutil.wait_procs(engine, timeout=15)
    assert not alive and not processes_mentioning(str(tmp_path)), "the engine outlived a kill -9 of the CLI"
    assert run_row(db)["status"] == "running"  # nobody could say otherwise
    assert cells(db)[(1024, 1)]["status"] == "valid"

    proc = run_cli("resume", run_row(db)["run_id"], "--db", str(db), "--set", "matrix.duration_s=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = cells(db)
    assert got[(1024, 1)]["status"] == got[(1024, 2)]["status"] == "valid"
    assert run_row(db)["status"] == "completed"
    assert_nothing_left(tmp_path)
