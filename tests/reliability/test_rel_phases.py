"""Every phase × every fault: the engine dies, stalls, resets the connection or answers 5xx *during*
that phase (the sim's phase selector, src/plugins/sim/phases.py), over real loopback HTTP into a real
DuckDB file. The run never raises; it completes with every unit stored with a final status, an
error unit says why, and a dead engine is restarted. The sim's own count proves the fault landed.

The run is driven in-process (``execute_run``, as the CLI does) to save a process start per case;
the CLI's side (exit codes, no traceback, no process left) is test_rel_kill.py's.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from rel_helpers import PACE_FREE, Sim, assert_nothing_left, cells, query, write_profile
from rich.console import Console

from infermatrix.core.registry import validate_config
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.run.runner import RunOutcome, execute_run
from infermatrix.core.store import Store
from infermatrix.plugins.sim.phases import PHASES

pytestmark = pytest.mark.slow

# Short cells; a client timeout short enough that a stall is seen quickly. Two cells, so there is a "between".
MATRIX = {"contexts": ["1K"], "prefill_contexts": ["1K"], "concurrency": [1, 2], "duration_s": 0.4, "max_output": 16,
          "check_client": False, "idle_timeout_s": 2.0, "ramp_timeout_s": 20.0, "steady_timeout_s": 5.0}  # fmt: skip
FINAL = {"valid", "error", "looped", "client_bound", "over_capacity"}
# The sim sees a drain when the client closes a stream it is still generating: with long outputs every
# stream is mid-answer when the window ends (2500 tokens take the tiny profile 5 s; the window is 0.4 s).
LONG = {"drain": 2500, "between": 2500}
# Reads with a fixed timeout of their own (metrics 5 s, /version 5 s) stall past it; the rest past idle_timeout_s.
STALL_S = {"describe": 6.0, "metrics": 6.0, "steady": 6.0, "window": 6.0, "drain": 6.0}


def rule(kind: str, phase: str, **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"kind": kind, "phase": phase, "limit": 1, **extra}
    if kind == "stall":
        r.update(stall_s=STALL_S.get(phase, 4.0), after_chunks=0)
    if kind == "http_error":
        r.update(status=503, message=f"injected 503 in {phase}")
    return r


def run_in_process(engine: dict[str, Any], db: Path, phase: str) -> tuple[RunOutcome, str]:
    pm = get_plugin_manager()
    cfg = validate_config(pm, {"engine": engine, "matrix": {**MATRIX, "max_output": LONG.get(phase, MATRIX["max_output"])},
                               "validity": PACE_FREE})  # fmt: skip
    store = Store(str(db))
    out = io.StringIO()
    try:
        outcome = anyio.run(lambda: execute_run(pm, cfg, store, Console(file=out, width=200)))
    finally:
        store.close()
    return outcome, out.getvalue()


def check_units(db: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """Every planned unit is stored with a final status; an error says why."""
    got = cells(db)
    assert set(got) == {(1024, 1), (1024, 2)}
    for key, c in got.items():
        assert c["status"] in FINAL, (key, c["status"], c["reason"])
        if c["status"] == "error":
            assert c["reason"], key
    prefill = query(db, "SELECT status, reason FROM prefill")
    assert len(prefill) == 1 and prefill[0][0] in FINAL and (prefill[0][0] != "error" or prefill[0][1]), prefill
    return got


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("phases")
    server = Sim(write_profile(tmp / "plain.json"), tmp / "sim.log")
    yield server
    server.stop()


@pytest.mark.parametrize("kind", ["stall", "reset", "http_error"])
@pytest.mark.parametrize("phase", PHASES)
def test_attached_engine_fails_in_phase(sim, tmp_path, phase, kind):
    faults = httpx.post(f"{sim.base_url}/debug/faults", json={"requests": [rule(kind, phase)]}, timeout=10).json()
    assert faults["hits"] == [0]
    outcome, log = run_in_process({"kind": "sim", "base_url": sim.base_url, "model": "sim-tiny", "reconnect_timeout_s": 30}, tmp_path / "r.duckdb", phase)
    hits = httpx.get(f"{sim.base_url}/debug/faults", timeout=10).json()["hits"]
    assert hits == [1], f"the {kind} never happened in {phase}: {httpx.get(f'{sim.base_url}/debug/faults', timeout=10).json()}\n{log}"
    assert outcome.status == "completed", f"{outcome.status}: {outcome.error}\n{log}"
    check_units(tmp_path / "r.duckdb")


@pytest.mark.parametrize("phase", PHASES)
def test_launched_engine_dies_in_phase(tmp_path, phase):
    # The sim exits (code 7) in the phase; the marker file keeps the restarted one well.
    once = tmp_path / "died-once"
    profile = write_profile(tmp_path / "dies.json", {"requests": [rule("exit", phase, code=7, once_file=str(once))]})
    db = tmp_path / "r.duckdb"
    outcome, log = run_in_process({"kind": "sim", "profile": str(profile), "ready_timeout_s": 60}, db, phase)
    assert once.exists(), f"the sim never died in {phase}:\n{log}"
    assert outcome.status == "completed", f"{outcome.status}: {outcome.error}\n{log}"
    got = check_units(db)
    run_id = query(db, "SELECT run_id FROM runs")[0][0]
    engine_log = (db.with_suffix(".runs") / run_id / "sim.log").read_text()
    assert engine_log.count("--- infermatrix: starting") == 2, engine_log[-2000:]  # died once, restarted once
    assert "restarted (1 of at most" in log, log
    reasons = [c["reason"] or "" for c in got.values() if c["status"] == "error"]
    reasons += [r or "" for r, in query(db, "SELECT reason FROM prefill WHERE status = 'error'")]
    blamed = [r for r in reasons if "engine down" in r]
    if phase in ("prefill", "warmup", "ramp", "steady", "window", "drain"):  # a unit was running: it carries the blame
        assert len(blamed) == 1 and "exited with code 7" in blamed[0], reasons
    elif phase in ("describe", "tokenize", "metrics"):  # start-up: asked again after the restart, nothing blamed
        assert "engine down during start-up" in log, log
    assert_nothing_left(tmp_path)
