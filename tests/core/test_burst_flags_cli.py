"""`infermatrix run --burst REQUESTS[@CONCURRENCY],…` and ``[[load]] kind = "burst"`` (docs/load.md, "Bursts"): the flags
reach the run as burst points through the real command line against a launched sim, a burst matrix expands in order,
and every mistake is one line (exit 2) before anything starts."""

from __future__ import annotations

import duckdb
import pytest
from imxtest import run_cli

from infermatrix.cli.burst_flags import apply_burst_flags
from infermatrix.core.config import BurstLoadConfig, ConfigError, expand_bursts

SMALL = ("--engine", "sim", "--set", "engine.profile=tiny", "--contexts", "1K", "--concurrency", "1",
         "--duration", "1", "--max-output", "16")  # fmt: skip


def test_flags_become_burst_points_requests_by_concurrency_by_context():
    assert apply_burst_flags({}, "8@2, 4", "256,1K") == [
        {"kind": "burst", "requests": 8, "concurrency": 2, "context": 256}, {"kind": "burst", "requests": 8, "concurrency": 2, "context": 1024},
        {"kind": "burst", "requests": 4, "context": 256}, {"kind": "burst", "requests": 4, "context": 1024},
    ]  # fmt: skip
    assert apply_burst_flags({}, None, None) == []
    with pytest.raises(ConfigError, match="--burst-context: give --burst too"):
        apply_burst_flags({}, None, "1K")


def test_a_burst_table_with_lists_is_a_burst_matrix():
    got = expand_bursts([{"rate": 2}, {"kind": "burst", "requests": [10, 100], "concurrency": [1, 8], "context": "1K"}])
    assert got[0] == {"rate": 2}
    assert [(p["requests"], p["concurrency"]) for p in got[1:]] == [(10, 1), (10, 8), (100, 1), (100, 8)]
    assert BurstLoadConfig(requests=5).in_flight == 5 and BurstLoadConfig(requests=5, concurrency=64).in_flight == 5


@pytest.mark.slow  # launches the sim through the command line
def test_burst_flag_runs_burst_points(tmp_path):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", *SMALL, "--burst", "6@2,3", "--burst-context", "256", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT requests, concurrency, context_tokens, completed, status, reason FROM burst_points ORDER BY point").fetchall()
    sent = con.execute("SELECT count(*), max(output_tokens) FROM point_requests").fetchone()
    con.close()
    assert [r[:4] for r in rows] == [(6, 2, 256, 6), (3, 3, 256, 3)]
    # valid, or disowned for the client's own stall on a loaded machine (core/load/stall.py): never an error
    assert all(r[4] == "valid" or (r[4] == "client_bound" and "event loop stalled" in r[5]) for r in rows), rows
    assert sent == (9, 16)  # --max-output reaches the bursts


@pytest.mark.slow  # the real command line, as a process
@pytest.mark.parametrize(
    "args, says",
    [
        (("--burst", "0"), "--burst: '0': requests must be at least 1"),
        (("--burst", "10@0"), "--burst: '10@0': concurrency must be at least 1"),
        (("--burst", "ten@2"), "--burst: 'ten@2': requests 'ten' is not a whole number"),
        (("--burst", "10@"), "--burst: '10@': concurrency '' is not a whole number"),
        (("--burst", ","), "--burst: empty"),
        (("--burst-context", "1K"), "--burst-context: give --burst too"),
        (("--set", "load=[{kind='burst', requests=0}]"), "load.0.requests"),
        (("--set", "load=[{kind='burst', requests=4, concurrency=0}]"), "load.0.concurrency"),
    ],
)
def test_bad_bursts_are_one_line(tmp_path, args, says):
    proc = run_cli("run", *SMALL, *args, "--db", str(tmp_path / "b.duckdb"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert says in line, line
    assert not (tmp_path / "b.duckdb").exists()  # found before anything started
