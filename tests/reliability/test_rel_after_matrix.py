"""An engine that dies inside a step after the matrix — a load point, the workload's pass — through the real CLI
and a launched sim: the step is stored as error with the reason, the engine is restarted, the run goes on
(the one step helper, core/engine/step.py, as a decode cell's; test_rel_crash.py is the cell's case)."""

from __future__ import annotations

import json

import pytest

from rel_helpers import PACE_FREE_ARGS, assert_nothing_left, query, run_cli, run_row, write_profile

pytestmark = pytest.mark.slow  # launches sims, runs the CLI


def _config(tmp_path, profile, extra: str, **matrix) -> str:
    m = {"contexts": [], "prefill_contexts": [], "concurrency": [1], "duration_s": 1.0, "max_output": 16, "check_client": False, **matrix}
    text = (f'[engine]\nkind = "sim"\nprofile = {json.dumps(str(profile))}\nready_timeout_s = 30\n[matrix]\n'
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in m.items()) + extra)  # fmt: skip
    path = tmp_path / "run.toml"
    path.write_text(text)
    return str(path)


def _died_once(tmp_path, db, cli) -> None:
    assert (tmp_path / "died-once").exists()
    run = run_row(db)
    assert run["status"] == "completed", run
    log = (db.with_suffix(".runs") / run["run_id"] / "sim.log").read_text()
    assert log.count("--- infermatrix: starting") == 2  # died once, restarted once
    assert "restarted" in cli.stderr
    assert_nothing_left(tmp_path)


def test_engine_dies_in_a_load_point_which_is_error_and_the_next_point_runs(tmp_path):
    # The sim dies at its 4th generation request: inside point 0 (20/s for 1 s); the restarted one stays up.
    profile = write_profile(tmp_path / "dies.json", {"exit": {"after_requests": 4, "code": 3, "once_file": str(tmp_path / "died-once")}})
    point = "[[load]]\nrate = 20\narrival = \"constant\"\nduration_s = 1.0\ncontext = 128\nmax_output = 8\n"
    db = tmp_path / "r.duckdb"
    cli = run_cli("run", _config(tmp_path, profile, point + point), "--db", str(db), *PACE_FREE_ARGS, cwd=tmp_path, timeout=180)
    assert cli.returncode == 0, cli.stderr[-3000:]
    points = {p: (status, reason or "") for p, status, reason in query(db, "SELECT point, status, reason FROM points ORDER BY point")}
    status, reason = points[0]
    assert status == "error" and "engine down during this cell (measure)" in reason and "exited with code 3" in reason, points
    assert query(db, "SELECT count(*) FROM point_requests WHERE point = 0")[0][0] > 0  # what it had sent is kept
    assert points[1][0] in ("valid", "client_bound"), points  # the engine was brought back: the next point ran on it
    _died_once(tmp_path, db, cli)


def test_engine_dies_in_the_workload_pass_which_is_error(tmp_path):
    # The multi-turn pass: the sim dies at its 3rd generation request, mid-conversation.
    profile = write_profile(tmp_path / "dies.json", {"exit": {"after_requests": 3, "code": 3, "once_file": str(tmp_path / "died-once")}})
    workload = "[workload]\nconversations = 2\nturns = 3\nuser_tokens = 40\noutput_tokens = 8\n"
    db = tmp_path / "r.duckdb"
    config = _config(tmp_path, profile, workload, workload="multi-turn", api="chat")
    cli = run_cli("run", config, "--db", str(db), *PACE_FREE_ARGS, cwd=tmp_path, timeout=180)
    assert cli.returncode == 0, cli.stderr[-3000:]
    [(status, reason, requests)] = query(db, "SELECT status, reason, requests FROM workload_passes")
    # the phase it is named in is measure or the closing metrics read: the pass's failed requests can end it first
    assert status == "error" and "engine down during this cell (" in reason and "exited with code 3" in reason, reason
    assert requests > 0  # what it had sent is kept
    _died_once(tmp_path, db, cli)
