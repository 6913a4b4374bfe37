"""Warm-up is bounded and sized from the measured prefill rate: a slow warm-up is progress, not an error
(issue 11). Real sim server over loopback; what the server saw is the truth."""

from __future__ import annotations

import json

import duckdb
import httpx
import pytest
from imxtest import run_cli
from profiles import write_profile

pytestmark = pytest.mark.slow

PREFILL_TPS = 10_000.0  # profile input: the sim's prefill rate


def _run(server, db, *extra):
    return run_cli(
        "run", "--engine", "sim", "--base-url", server.base_url, "--contexts", "2K", "--concurrency", "8",
        "--duration", "1", "--max-output", "256", "--db", str(db), "--set", "matrix.check_client=false",
        # One second of silence ends a request: 8 cold 2K prompts at once take 8 × ~0.2 s in the sim's serial
        # prefill, so the last ones would time out if they were all sent under this timeout.
        "--set", "matrix.idle_timeout_s=1", *extra,
    )


def _most_in_flight(truth, marker):
    spans = [(r["arrived"], r["finished"]) for r in truth["requests"] if marker in (r.get("request_id") or "")]
    events = sorted([(a, 1) for a, _ in spans] + [(f, -1) for _, f in spans])
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most, len(spans)


def test_slow_warm_up_is_sized_not_failed(sim_factory, tmp_path):
    server = sim_factory(str(write_profile(tmp_path / "p.toml", prefill_tps=PREFILL_TPS, prefill_base_ms=2.0)))
    db = tmp_path / "w.duckdb"
    proc = _run(server, db)
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    status, flags = con.execute("SELECT status, flags FROM cells").fetchone()
    flags = json.loads(flags)
    assert status == "valid", flags
    assert flags["warmup_failed"] == 0
    # The first prompt went alone and measured the rate; the rest got a timeout sized from it.
    plan = flags["warmup_plan"]
    assert plan["concurrency"] == 8 and plan["timeout_s"] > 3 * 7 * 2048 / PREFILL_TPS
    con.close()

    # Bounded: at most warmup_concurrency warm-ups inside the server at once (cold prompts again: cache reset).
    httpx.post(f"{server.base_url}/debug/reset", params={"cache": "1"}, timeout=10)
    db2 = tmp_path / "w2.duckdb"
    proc = _run(server, db2, "--set", "matrix.warmup_concurrency=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    most, count = _most_in_flight(server.truth(), "-warm-")
    assert count == 8 and most <= 2
