"""Per-request faults through the real CLI against a real sim: every fault is recorded as its own
outcome, counted in the cell's statistics, and turns the cell into an error (never a clean number)."""

from __future__ import annotations

import json

import httpx
import pytest
from rel_helpers import Sim, assert_nothing_left, cells, query, run_cli, run_row, write_profile

from infermatrix.plugins.sim.faults import FaultState, SimFaults

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI

# 1K x 1 runs first: one stream, so request numbers are its requests in order and no two faults
# are back to back (a stream that fails 3 times in a row stops). 1K x 2's first warm-up fails.
FAULTS = {
    "requests": [
        {"kind": "stall", "first": 3, "limit": 1, "after_chunks": 1, "stall_s": 60},
        {"kind": "reset", "first": 5, "limit": 1, "after_chunks": 1},
        {"kind": "truncate", "first": 7, "limit": 1, "after_chunks": 1},
        {"kind": "stream_error", "first": 9, "limit": 1, "after_chunks": 1, "message": "engine hiccup"},
        {"kind": "http_error", "status": 500, "first": 11, "limit": 1},
        {"kind": "http_error", "status": 429, "first": 13, "limit": 1, "message": "slow down"},
        {"kind": "http_error", "status": 503, "first": 2, "limit": 1, "max_tokens": 1, "message": "warming up"},
    ]
}
EXPECTED = {  # outcome -> a piece of the error text the request row must keep
    "http_error": "HTTP 500",
    "stream_error": "engine hiccup",
    "truncated": "before [DONE]",
    "reset": "ReadError",
    "idle_timeout": "ReadTimeout",
}


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    sim = Sim(write_profile(tmp / "faulty.json", FAULTS), tmp / "sim.log")
    try:
        db = tmp / "r.duckdb"
        proc = run_cli(
            "run", "--engine", "openai", "--base-url", sim.base_url, "--model", "sim-tiny", "--contexts", "1K",
            "--concurrency", "1,2", "--duration", "3", "--max-output", "16", "--db", str(db),
            "--set", "matrix.idle_timeout_s=1", "--set", "matrix.check_client=false", cwd=tmp,
        )
        yield tmp, db, proc
    finally:
        sim.stop()


def test_every_fault_is_its_own_outcome(faulty_run):
    tmp, db, proc = faulty_run
    assert proc.returncode == 0, proc.stderr[-3000:]  # a completed run, with an error cell in it
    assert run_row(db)["status"] == "completed"
    rows = query(db, "SELECT outcome, error FROM requests")
    by_outcome: dict[str, list[str]] = {}
    for outcome, error in rows:
        by_outcome.setdefault(outcome, []).append(error or "")
    for outcome, text in EXPECTED.items():
        assert outcome in by_outcome, (outcome, sorted(by_outcome))
        assert any(text in e for e in by_outcome[outcome]), (outcome, by_outcome[outcome][:3])
    http = by_outcome["http_error"]
    assert any(e.startswith("HTTP 429") and "slow down" in e for e in http), http  # status and body both kept
    assert any(e.startswith("HTTP 503") and "warming up" in e for e in http), http
    assert "ok" in by_outcome
    assert_nothing_left(db.with_suffix(".runs"))  # attach mode launched nothing (the sim is the test's own)


@pytest.mark.parametrize("n", [1, 2])
def test_failures_count_in_the_cell(faulty_run, n):
    _, db, _ = faulty_run
    cell = cells(db)[(1024, n)]
    f = cell["flags"]
    assert cell["status"] == "error" and "failed" in cell["reason"]
    stored = query(db, "SELECT outcome, count(*) FROM requests WHERE context_tokens = 1024 AND concurrency = ? GROUP BY 1", [n])
    counts = dict(stored)
    assert f["requests"] == sum(counts.values())  # every request is stored, none dropped
    assert f["outcomes"] == counts
    failed = sum(v for k, v in counts.items() if k not in ("ok", "cancelled"))
    assert f["failed_requests"] == failed > 0
    assert f["success_rate"] == pytest.approx((f["requests"] - failed) / f["requests"], abs=1e-3)
    assert f["validity"]["checks"]["error_rate"]["ok"] is False
    if n == 2:
        assert f["warmup_failed"] == 1 and f["warmup_requests"] == 2  # the failed warm-up is counted too
    # Never a clean number: the contract view hides an error cell's numbers.
    (row,) = query(db, "SELECT status, total_tps, ttft_ms, tbt_ms FROM decode_matrix WHERE concurrency = ?", [n])
    assert row == ("error", None, None, None)


def test_rules_pick_requests_deterministically():
    faults = SimFaults.model_validate({"seed": 7, "requests": [
        {"kind": "http_error", "every": 3, "first": 4, "limit": 2},
        {"kind": "truncate", "probability": 0.5},
    ]})  # fmt: skip
    def kinds() -> list[str | None]:
        state = FaultState(faults, api_key="")
        return [(r.kind if r else None) for r in (state.on_request() for _ in range(12))]

    picks, again = kinds(), kinds()
    assert picks == again  # seeded
    assert [i + 1 for i, k in enumerate(picks) if k == "http_error"] == [6, 9]  # every 3rd from 4 on, twice
    assert 0 < picks.count("truncate") < 10


@pytest.mark.anyio
async def test_api_key_guard_in_process():
    from infermatrix.plugins.sim.profile import load_profile
    from infermatrix.plugins.sim.server import create_app

    app = create_app(load_profile("tiny"))
    app.state.faults.api_key = "k-123456"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as c:
        assert (await c.get("/health")).status_code == 200  # like vLLM: only /v1 needs the key
        denied = await c.get("/v1/models")
        assert denied.status_code == 401 and "k-123456" not in denied.text
        assert (await c.get("/v1/models", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await c.get("/v1/models", headers={"Authorization": "Bearer k-123456"})).status_code == 200
    assert json.loads(denied.text)["error"]["code"] == 401
