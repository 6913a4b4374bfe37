"""The engine SIGKILLed for real, in every phase, through the real CLI: attached (a server the test
runs, replaced by a fresh one on the same port) and launched (the run restarts it).

The sim holds the phase open (a ``stall`` rule with a ``phase``, phases.py) and says so in its log;
the test kills it then. Afterwards: no traceback, exit code 0 (the run recovered and completed,
docs/reliability.md), every planned cell and probe stored with a final status, nothing left running.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from rel_helpers import Cli, Sim, assert_nothing_left, cells, free_port, query, run_row, write_config, write_profile

from infermatrix.plugins.sim.phases import PHASES

pytestmark = pytest.mark.slow  # starts sim servers and runs the CLI

FINAL = {"valid", "error", "looped", "client_bound", "over_capacity"}
# A drain is seen when the client closes streams the sim still generates: long outputs (test_rel_phases.py).
LONG = {"drain": 2500, "between": 2500}


def matrix(phase: str) -> dict:
    return {"contexts": ["1K"], "prefill_contexts": ["1K"], "concurrency": [1, 2], "duration_s": 0.4,
            "max_output": LONG.get(phase, 16), "check_client": False}  # fmt: skip


def hold(phase: str, once: Path | None = None) -> dict:
    """A fault that holds the phase open (nothing answers for 10 minutes) until the test kills the server."""
    rule = {"kind": "stall", "phase": phase, "limit": 1, "stall_s": 600, "after_chunks": 0}
    if once is not None:
        rule["once_file"] = str(once)
    return {"requests": [rule]}


def held(log: Path, phase: str) -> bool:
    try:
        return re.search(rf"injected fault: stall in {phase} ", log.read_text(errors="replace")) is not None
    except OSError:
        return False


def check_after(cli: Cli, db: Path, rc: int) -> None:
    assert "Traceback" not in cli.stderr and "Traceback" not in cli.stdout, cli.stderr[-3000:]
    assert rc == 0, cli.stderr[-3000:]
    assert run_row(db)["status"] == "completed"
    got = cells(db)
    assert set(got) == {(1024, 1), (1024, 2)}, got
    assert all(c["status"] in FINAL and (c["status"] != "error" or c["reason"]) for c in got.values()), got
    prefill = query(db, "SELECT status, reason FROM prefill")
    assert len(prefill) == 1 and prefill[0][0] in FINAL, prefill


@pytest.mark.parametrize("phase", PHASES)
def test_attached_server_killed_in_phase(tmp_path, phase):
    port = free_port()
    log = tmp_path / "sim.log"
    first = Sim(write_profile(tmp_path / "holds.json", hold(phase)), log, port=port)
    second = None
    try:
        db = tmp_path / "r.duckdb"
        config = write_config(tmp_path / "run.toml", engine={"kind": "sim", "base_url": first.base_url, "model": "sim-tiny",
                              "reconnect_timeout_s": 60}, matrix=matrix(phase))  # fmt: skip
        cli = Cli("run", str(config), "--db", str(db), cwd=tmp_path)
        cli.wait_for(lambda: held(log, phase), f"the sim to hold {phase}", timeout=60)
        os.kill(first.proc.pid, signal.SIGKILL)
        assert first.proc.wait(10) == -signal.SIGKILL
        second = Sim(write_profile(tmp_path / "fine.json"), tmp_path / "sim2.log", port=port)
        check_after(cli, db, cli.wait(120))
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert_nothing_left(tmp_path, cli)


@pytest.mark.parametrize("phase", PHASES)
def test_launched_engine_killed_in_phase(tmp_path, phase):
    profile = write_profile(tmp_path / "holds.json", hold(phase, once=tmp_path / "held-once"))
    db = tmp_path / "r.duckdb"
    config = write_config(tmp_path / "run.toml", engine={"kind": "sim", "profile": str(profile), "ready_timeout_s": 60}, matrix=matrix(phase))
    cli = Cli("run", str(config), "--db", str(db), cwd=tmp_path)

    def engine_log() -> Path | None:
        found = list(db.with_suffix(".runs").glob("*/sim.log"))
        return found[0] if found and held(found[0], phase) else None

    log = cli.wait_for(engine_log, f"the sim to hold {phase}", timeout=60)
    sims = [p for p in cli.descendants() if "serve" in " ".join(p.cmdline())]
    assert len(sims) == 1, sims
    sims[0].send_signal(signal.SIGKILL)
    check_after(cli, db, cli.wait(120))
    assert log.read_text().count("--- infermatrix: starting") == 2  # killed once, restarted once
    assert_nothing_left(tmp_path, cli)  # at once: the CLI waited for its engine before exiting
