"""Fidelity of the intervals (issue 30): a sim made noisy on purpose (``step_jitter``), 20 short cells, and each
cell's 95 % interval of total tok/s is judged against the sim's long-run rate — N × 1000 ÷ step_ms from its
profile (one token a step, no restarts in the window, a log-normal step factor of mean 1), never from the runs.
Honest intervals contain it in about 19 of 20 cells; bars.INTERVAL_MISSED_MAX says how many misses is a failure. A
cell the client verdict disowned has no interval and is not judged (bars.judged's rule; at most a few may be)."""

from __future__ import annotations

import duckdb
import pytest
from bars import INTERVAL_CELLS, INTERVAL_JUDGED_MIN, INTERVAL_MISSED_MAX
from imxtest import SimServer, run_cli
from profiles import write_profile

pytestmark = [pytest.mark.slow, pytest.mark.solo]  # starts a sim server and runs the CLI; solo: all 20 cells must be valid, and a neighbour test can bind one (tests/solo.py)

STEP_MS = 10.0  # profile input: every step 10 ms on average, whatever the batch (step_per_seq_ms = 0)
# 200 steps a window. 5 ms steps in 1 s windows hold as many in half the time, and passed alone (19 of 20 covered), but
# beside a CPU burner three of the 20 cells came out client_bound (20 streams at 5 ms is 4,000 chunks a second): kept at 10 ms.
WINDOW_S = 2


def test_total_tps_intervals_contain_the_noisy_sims_long_run_rate(tmp_path):
    profile = write_profile(tmp_path / "p.toml", step_base_ms=STEP_MS, step_per_seq_ms=0.0, spec_tokens=0, acceptance=0.0,
                            step_jitter=0.5, kv_tokens=262_144, max_num_seqs=64, max_model_len=8192)  # fmt: skip
    server = SimServer(str(profile), tmp_path / "sim.log")
    db = tmp_path / "i.duckdb"
    try:
        # Unstaggered 4,096-token requests (41 s) outlast every window: no restart, so N tokens every step.
        concurrency = ",".join(str(n) for n in range(1, INTERVAL_CELLS + 1))
        proc = run_cli("run", "--engine", "sim", "--base-url", server.base_url, "--contexts", "256", "--prefill-contexts", "256",
                       "--concurrency", concurrency, "--duration", str(WINDOW_S), "--max-output", "4096", "--set", "matrix.stagger=false",
                       "--db", str(db), timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        server.stop()
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT concurrency, value, lo, hi, method FROM cell_intervals WHERE metric = 'total_tps' ORDER BY concurrency").fetchall()
    statuses = con.execute("SELECT concurrency, status FROM cells WHERE status <> 'valid'").fetchall()
    assert all(status == "client_bound" for _, status in statuses), statuses  # disowned by the client verdict, nothing else
    assert sorted(n for n, *_ in rows) == sorted(set(range(1, INTERVAL_CELLS + 1)) - {n for n, _ in statuses}), (rows, statuses)
    assert len(rows) >= INTERVAL_JUDGED_MIN, (rows, statuses)
    covered = [n for n, _, lo, hi, _ in rows if lo <= n * 1000 / STEP_MS <= hi]
    report = [(n, round(v), round(lo), round(hi), n * 1000 / STEP_MS, m) for n, v, lo, hi, m in rows]
    print(f"covered {len(covered)} of {len(rows)} (disowned: {statuses}):", *report, sep="\n")
    assert len(rows) - len(covered) <= INTERVAL_MISSED_MAX, report
