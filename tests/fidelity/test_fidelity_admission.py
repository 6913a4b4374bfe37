"""A cell the engine did not run at N is never `valid` (issue 11): judged from the engine's own gauges and its
preemption counter, attached to a real sim server with no capacity flag given. (A server that seats fewer
than N: tests/fidelity/test_fidelity_steady.py.)"""

from __future__ import annotations

import json

import duckdb
import pytest
from imxtest import run_cli
from profiles import write_profile

pytestmark = pytest.mark.slow


def test_preempting_engine_gives_admission_limited_not_valid(sim_factory, tmp_path):
    # 4 × (1K prompt + 512 out) fits the KV reservation, but above 30 % KV usage (~200 tokens each into the
    # output) the sim preempts its youngest sequence, which waits for a finished one to come back.
    server = sim_factory(str(write_profile(tmp_path / "p.toml", kv_tokens=16_384, preempt_kv_usage=0.3)))
    db = tmp_path / "a.duckdb"
    proc = run_cli(
        "run", "--engine", "sim", "--base-url", server.base_url, "--contexts", "1K", "--concurrency", "2,4",
        "--duration", "2", "--max-output", "512", "--db", str(db),
        "--set", "matrix.steady_timeout_s=1", "--set", "matrix.check_client=false",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    rows = {n: (st, reason, json.loads(f)) for n, st, reason, f in con.execute("SELECT concurrency, status, reason, flags FROM cells").fetchall()}
    status2, _, flags2 = rows[2]
    assert status2 == "valid" and flags2["admission"]["preemptions"] == 0 and flags2["admission"]["limited"] is False
    status4, reason4, flags4 = rows[4]
    truth = server.truth()["counters"]["preemptions"]
    assert truth > 0
    assert status4 == "admission_limited", (status4, reason4)
    assert flags4["admission"]["preemptions"] > 0 and "preempted" in reason4
    report = run_cli("report", "--db", str(db), "--format", "markdown")
    assert report.returncode == 0, report.stderr
    assert "Admission limited" in report.stdout and "preempted" in report.stdout
