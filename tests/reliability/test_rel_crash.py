"""An engine that dies, never gets ready, or rejects everything — through the real CLI, real processes."""

from __future__ import annotations

import pytest
import signal

from rel_helpers import (
    PACE_FREE_ARGS,
    Cli, Sim, assert_nothing_left, cells, free_port, query, run_cli, run_row, sim_config, write_profile,
)

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI


def test_launched_engine_crash_is_recorded_and_restarted(tmp_path):
    # The sim dies (exit code 3) when its 6th generation request arrives: inside the first cell's window.
    # The marker file keeps the restarted sim alive.
    once = tmp_path / "crashed-once"
    profile = write_profile(tmp_path / "crashy.json", {"exit": {"after_requests": 6, "code": 3, "once_file": str(once)}})
    db = tmp_path / "r.duckdb"
    cli = Cli("run", str(sim_config(tmp_path, profile, duration_s=1.5)), "--db", str(db), cwd=tmp_path)
    rc = cli.wait(90)
    assert rc == 0, cli.stderr[-3000:]  # the run goes on and completes
    assert once.exists()
    run = run_row(db)
    assert run["status"] == "completed"
    got = cells(db)
    crashed, after = got[(1024, 1)], got[(1024, 2)]
    assert crashed["status"] == "error"
    assert "engine down during this cell" in crashed["reason"] and "exited with code 3" in crashed["reason"]
    assert "injected fault: exiting with code 3" in crashed["reason"]  # the log's last line, in the reason
    assert "injected fault" in crashed["flags"]["engine_log_tail"]
    assert crashed["flags"]["requests"] > 0  # the requests it had sent are kept, as evidence
    assert crashed["flags"]["requests"] == query(db, "SELECT count(*) FROM requests WHERE concurrency = 1")[0][0]
    assert after["status"] == "valid", after["reason"]
    log = (db.with_suffix(".runs") / run["run_id"] / "sim.log").read_text()
    assert log.count("--- infermatrix: starting") == 2  # started, crashed, restarted once
    assert "restarted" in cli.stderr
    assert_nothing_left(tmp_path, cli)


def test_attached_endpoint_comes_back(tmp_path):
    # Someone else's server dies mid-cell; the run waits for it, a new one comes up on the same port, the run goes on.
    port = free_port()
    first = Sim(write_profile(tmp_path / "dies.json", {"exit": {"after_requests": 6, "code": 3}}), tmp_path / "sim.log", port=port)
    second = None
    try:
        db = tmp_path / "r.duckdb"
        cli = Cli("run", "--engine", "openai", "--base-url", first.base_url, "--model", "sim-tiny", "--contexts", "1K",
                  "--concurrency", "1,2", "--duration", "1.5", "--max-output", "16", "--db", str(db),
                  "--set", "engine.reconnect_timeout_s=60", "--set", "matrix.check_client=false", *PACE_FREE_ARGS, cwd=tmp_path)  # fmt: skip
        cli.wait_stderr(r"waiting up to 60 s for http://127\.0\.0\.1:\d+ to come back", timeout=60)
        assert first.proc.wait(10) == 3
        second = Sim(write_profile(tmp_path / "fine.json"), tmp_path / "sim.log", port=port)
        rc = cli.wait(60)
        assert rc == 0, cli.stderr[-3000:]
        got = cells(db)
        assert got[(1024, 1)]["status"] == "error"
        assert "stopped answering" in got[(1024, 1)]["reason"] and "health probe" in got[(1024, 1)]["reason"]
        assert got[(1024, 1)]["flags"]["outcomes"].get("connect_error", 0) > 0
        assert got[(1024, 2)]["status"] == "valid", got[(1024, 2)]["reason"]
        assert run_row(db)["status"] == "completed"
        assert_nothing_left(db.with_suffix(".runs"), cli)
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_attached_endpoint_gone_for_good_then_resumed(tmp_path):
    # The server dies and stays down past engine.reconnect_timeout_s: the run stops cleanly as failed,
    # keeping what it measured; once a server is back, resume runs only what is missing.
    port = free_port()
    first = Sim(write_profile(tmp_path / "dies.json", {"exit": {"after_requests": 6, "code": 3}}), tmp_path / "sim.log", port=port)
    second = None
    try:
        db = tmp_path / "r.duckdb"
        proc = run_cli("run", "--engine", "openai", "--base-url", first.base_url, "--model", "sim-tiny",
                       "--contexts", "1K", "--concurrency", "1,2", "--duration", "1.5", "--max-output", "16",
                       "--db", str(db), "--set", "engine.reconnect_timeout_s=1", "--set", "matrix.check_client=false", *PACE_FREE_ARGS,
                       cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-3000:]
        line = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert line and "did not come back within 1 s" in line[0] and "resume with" in proc.stderr
        run = run_row(db)
        assert run["status"] == "failed" and "did not come back" in run["error"]
        assert set(cells(db)) == {(1024, 1)} and cells(db)[(1024, 1)]["status"] == "error"
        first.proc.wait(10)

        second = Sim(write_profile(tmp_path / "fine.json"), tmp_path / "sim.log", port=port)
        proc = run_cli("resume", run["run_id"], "--db", str(db), "--retry-errors", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = cells(db)
        assert got[(1024, 1)]["status"] == got[(1024, 2)]["status"] == "valid"
        assert run_row(db)["status"] == "completed" and run_row(db)["error"] is None
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_engine_that_never_gets_ready(tmp_path):
    profile = write_profile(tmp_path / "stuck.json", {"never_ready": True})
    db = tmp_path / "r.duckdb"
    cfg = sim_config(tmp_path, profile)
    cli = Cli("run", str(cfg), "--db", str(db), "--set", "engine.ready_timeout_s=2", cwd=tmp_path)
    rc = cli.wait(60)
    assert rc == 1
    (line,) = [ln for ln in cli.stderr.splitlines() if ln.startswith("error:")]
    assert "not ready after 2 s" in line and "/health answered 503" in line
    assert "last lines of its log" in line and "resume with" in cli.stderr
    run = run_row(db)
    assert run["status"] == "failed" and "not ready" in run["error"]
    assert cells(db) == {}
    assert_nothing_left(tmp_path, cli)


def test_signal_while_waiting_for_readiness(tmp_path):
    profile = write_profile(tmp_path / "stuck.json", {"never_ready": True})
    db = tmp_path / "r.duckdb"
    cli = Cli("run", str(sim_config(tmp_path, profile)), "--db", str(db), cwd=tmp_path)
    cli.engine_port()  # the engine process exists: we are waiting for it to get ready
    cli.signal(signal.SIGTERM)
    assert cli.wait(30) == 130, cli.stderr[-3000:]
    assert run_row(db)["status"] == "interrupted"
    assert_nothing_left(tmp_path, cli)


def test_engine_that_answers_health_but_rejects_requests(tmp_path):
    profile = write_profile(tmp_path / "rejects.json", {"requests": [{"kind": "http_error", "status": 503, "message": "overloaded"}]})
    db = tmp_path / "r.duckdb"
    cfg = sim_config(tmp_path, profile, prefill_contexts=["1K"], concurrency=[1, 2, 4, 8])
    cli = Cli("run", str(cfg), "--db", str(db), cwd=tmp_path)
    rc = cli.wait(60)
    assert rc == 1, cli.stderr[-3000:]
    assert "failed every request of the last 3 cells/probes" in cli.stderr
    run = run_row(db)
    assert run["status"] == "failed" and "HTTP 503" in run["error"]
    (prefill,) = query(db, "SELECT status, reason FROM prefill")
    assert prefill[0] == "error" and "HTTP 503" in prefill[1]
    got = cells(db)
    assert set(got) == {(1024, 1), (1024, 2)}  # stopped after three units that all failed: no hour of errors
    for cell in got.values():
        f = cell["flags"]
        assert cell["status"] == "error" and f["success_rate"] == 0.0
        assert f["outcomes"] == {"http_error": f["requests"]} and f["requests"] == cell["concurrency"]
    assert_nothing_left(tmp_path, cli)
