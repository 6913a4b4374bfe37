"""Burst points against the sim over loopback (docs/load.md, "Bursts"): the server's own record (``/debug/truth``:
each request's ``received`` and ``finished``) holds exactly the point's requests, never more than its concurrency at
once, over the span the point stores — from the first request sent to the last one's end — and the tail the point
reports is the server's last requests running with fewer than ``concurrency`` in flight."""

import os
import re
import threading

import pytest
from bars import BURST_SPAN_MS, OPENLOOP_CAP_OVERLAP_S, judged
from imxtest import Freezer

from infermatrix.testing import run_matrix, sim_server

pytestmark = pytest.mark.slow

MATRIX = {"contexts": [], "prefill_contexts": [256], "prefill_samples": 1}
CONTRACT = ["run_id", "point", "requests", "concurrency", "context_tokens", "status", "duration_s", "request_rate", "output_tps",
            "ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "completed"]


def _max_in_flight(spans: list[tuple[float, float]]) -> int:
    """The most requests the server held at once (a request counts from receipt to finish; ends first at a tie)."""
    edges = sorted([(a + OPENLOOP_CAP_OVERLAP_S, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_burst_matrix_matches_the_servers_record_of_its_requests_and_span():
    load = [{"kind": "burst", "requests": [10], "concurrency": [3, 10], "context": 256, "max_output": 24}]
    with sim_server() as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix=MATRIX, config={"load": load})
        truth = sim.truth()["requests"]
    assert result.status == "completed", result.error
    rows = result.query("SELECT * FROM burst_points WHERE run_id = ? ORDER BY point", [result.run_id])
    assert list(rows[0])[: len(CONTRACT)] == CONTRACT
    assert [(r["requests"], r["concurrency"]) for r in rows] == [(10, 3), (10, 10)]  # the lists expanded, in order
    sends = result.query("SELECT point, sent FROM point_requests WHERE run_id = ?", [result.run_id])
    for b in rows:
        mine = [t for t in truth if f"-load-{b['point']}-r" in (t["request_id"] or "")]
        assert b["status"] in ("valid", "client_bound"), b["reason"]
        assert len(mine) == b["requests"] == b["completed"]  # the server saw every request, once
        assert all(t["output_tokens"] == 24 and t["prompt_tokens"] == 256 for t in mine)
        spans = [(t["received"], t["finished"]) for t in mine]
        assert _max_in_flight(spans) <= b["concurrency"]  # the cap held, on the server's side
        server_s = max(f for _, f in spans) - min(r for r, _ in spans)
        assert b["duration_s"] >= server_s, (b["duration_s"], server_s)
        # The span and tail bars hold a burst the client kept up with; one its own loop stall disowned says so (bars.judged).
        # The span starts at the first send, the server's at its first receipt, which the sim's own lateness may have
        # held (received_held_s: docs/sim.md); the client's span holds that wait.
        first = min(mine, key=lambda t: t["received"])
        excess_ms = (b["duration_s"] - server_s - first["received_held_s"]) * 1000
        assert judged(b["status"], excess_ms < BURST_SPAN_MS), (b["duration_s"], server_s, first["received_held_s"])
        assert b["status"] == "valid" or "the client's event loop stalled" in b["reason"], b["reason"]
        assert b["request_rate"] == pytest.approx(b["completed"] / b["duration_s"])
        assert b["output_tps"] == pytest.approx(sum(t["output_tokens"] for t in mine) / b["duration_s"])
        # The tail: from the first finish after the last request was sent to the last finish, the finishes on the
        # server's record. From the last *send*, as the tail is defined, not the server's last receipt: in one full
        # suite a starved sim took in the last of ten requests sent at once after others had finished (its tail 0,
        # the client's 38 ms, the span within its bar) — the server's intake lag, not the client's stamps. Client
        # and sim stamp one clock (time.monotonic: CLOCK_MONOTONIC, system-wide).
        last_sent = max(r["sent"] for r in sends if r["point"] == b["point"])
        server_tail = max(f for _, f in spans) - min(f for _, f in spans if f >= last_sent)
        assert judged(b["status"], abs(b["tail_s"] - server_tail) * 1000 < BURST_SPAN_MS), (b["tail_s"], server_tail)
    # Requests waited for a slot only where the cap was below the request count; that wait is not their latency.
    reqs = result.query("SELECT point, queue_ms, ttft_ms, ttft_sent_ms FROM point_requests WHERE run_id = ?", [result.run_id])
    waited = {b["point"]: max(r["queue_ms"] for r in reqs if r["point"] == b["point"]) for b in rows}
    assert waited[rows[0]["point"]] > waited[rows[1]["point"]]  # 10 at 3: seven waited for a slot; 10 at 10: none did
    assert all(r["ttft_ms"] >= r["ttft_sent_ms"] for r in reqs)


FREEZE_S = 1.0  # how long the client is stopped in mid-burst: longer than a 64-token request runs on the tiny sim (~0.2 s)


def _freeze_when_running(sim, pid: int, freeze_s: float, fired: threading.Event) -> None:
    """Stop process ``pid`` for ``freeze_s`` once the sim holds a burst request unfinished (a shell outside the process,
    started beforehand and told by a line on its stdin, does the stop and the resume): a client the kernel left off its
    cores that long, as one beside a CPU burner was. The sim says when (``GET /debug/wait``, an event on its own loop):
    until 2026-12-07 this thread polled /debug/truth every 20 ms, and in run AP (beside a CPU burner) the whole burst
    came and went between two of its polls."""
    with Freezer(pid, freeze_s) as freezer:
        if sim.wait_unfinished("-load-") is not None:
            fired.set()
            freezer.freeze()


def test_a_burst_whose_client_was_held_off_its_cores_is_the_clients_and_the_server_says_so_too():
    """The client check (core/load/stall.py): the whole client process stopped for 1 s in mid-burst, longer than a
    request runs (64 tokens: ~0.2 s on the tiny sim). The point is ``client_bound`` and its reason names the stall and
    the bound; the sim's record bears both out: the request running at the freeze finished on the server during it, so
    the client read its end late — by more than the bound and by no more than the stall (plus the span bar's loopback)."""
    load = [{"kind": "burst", "requests": [4], "concurrency": [2], "context": 256, "max_output": 64}]
    fired = threading.Event()
    with sim_server() as sim:
        watcher = threading.Thread(target=_freeze_when_running, args=(sim, os.getpid(), FREEZE_S, fired), daemon=True)
        watcher.start()
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix=MATRIX, config={"load": load})
        watcher.join(5)
        truth = {t["request_id"]: t for t in sim.truth()["requests"] if "-load-" in (t["request_id"] or "")}
    assert fired.is_set() and result.status == "completed", result.error
    (b,) = result.query("SELECT status, reason FROM burst_points WHERE run_id = ?", [result.run_id])
    assert b["status"] == "client_bound" and "the client's event loop stalled" in b["reason"], b
    reqs = result.query("SELECT request_id, e2e_sent_ms FROM point_requests WHERE run_id = ?", [result.run_id])
    excess = max(r["e2e_sent_ms"] - (truth[r["request_id"]]["finished"] - truth[r["request_id"]]["received"]) * 1000 for r in reqs)
    stall_ms, bound_ms = (float(x) for x in re.search(r"stalled (\d+) ms.*bound (\d+) ms", b["reason"]).groups())
    assert bound_ms < excess <= stall_ms + BURST_SPAN_MS, (excess, b["reason"])
