"""Issue 17: N streams mean the engine ran N, and a client that fell behind is never `valid`.

Judged by the server, not by the client: the sim's own record of each cell's window (``GET /debug/window``: its
per-step batch and emitted tokens, on the client's monotonic clock over loopback) is the truth.

* Staggered phases: at N = 128 with requests shorter than the window, the sim's mean decode batch (and the requests
  it held) over the window is at least BATCH_STAGGERED of N (bars.py) (docs/metrics.md, "Staggered phases").
* 1K × 128 and 1K × 256 on a 2 ms-step sim with 2,048-token outputs, with the default reader and with httpx
  forced: each cell is either `valid` with total and per-request tok/s within their bars of the sim's record and the
  sim's mean batch at least BATCH_VALID of N (bars.py) — or `client_bound` with its reason. Never `valid` otherwise
  (docs/metrics.md, "Client verdict").
"""

from __future__ import annotations

import json

import duckdb
import httpx
import pytest
import bars
from imxtest import SimServer, run_cli
from profiles import write_profile

pytestmark = [pytest.mark.slow, pytest.mark.solo]  # solo: 256 streams need both cores to keep the client ahead of the sim (tests/solo.py)

# Bars: tests/fidelity/bars.py (TOTAL_TPS, PER_REQUEST_TPS, BATCH_VALID, BATCH_STAGGERED, MOST_ENDS_PER_STEP).
# The issue's own windows. The client's stamps at the two edges can differ by ~15-20 ms at 256 streams on two cores
# (the chunks of one 256-sequence step take that long to read): 1 % of a 2 s window (seen: +1.03 % total, valid), 0.3 %
# of a 6 s one. The product's window check cannot settle a 2 s count that finely either (docs/metrics.md, "Client
# verdict": its tolerance carries the gauge reads' own timing, 1.9-3.4 % there).
HIGH_N_WINDOW_S = 6
RAMP_TIMEOUT_S = 60  # httpx at 256 streams on a starved 2-core machine took 105 s to give every stream a first token
# Staggered: requests of ~7.5 s (448 tokens at 16.6 ms steps) in an 8 s window. Each restart leaves its stream's slot
# empty for the client's turnaround plus the sim's intake and join (half a step): tens of ms on two loaded cores, a
# share of the request's length -- so the longer the request, the closer the engine stays to N.
STAGGER_OUTPUT = 448
STAGGER_WINDOW_S = 8


def _fast_profile(path, step_base_ms=2):
    """A sim fast enough that the client, not the engine, is the question: 2 ms + 0.005 ms per sequence a step, one
    token per step, room for 256 × (1K + 2K) tokens and every prompt cached."""
    return write_profile(path, max_model_len=8192, kv_tokens=2_000_000, max_num_seqs=512, step_base_ms=step_base_ms,
                         step_per_seq_ms=0.005, spec_tokens=0, prefix_cache_tokens=1_000_000)  # fmt: skip


def _window(server: SimServer, ws: float, we: float) -> dict:
    return httpx.get(f"{server.base_url}/debug/window", params={"start": ws, "end": we}, timeout=60).json()


def _cells(db) -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        cols = ["concurrency", "status", "reason", "total_tps", "per_request_tps", "window_start", "window_end", "flags"]
        return [dict(zip(cols, r)) for r in con.execute(f"SELECT {', '.join(cols)} FROM cells ORDER BY concurrency").fetchall()]


def _run(server: SimServer, db, *args: str) -> list[dict]:
    proc = run_cli("run", "--engine", "sim", "--base-url", server.base_url, "--contexts", "1K", "--db", str(db), *args, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "client transport: " in proc.stdout + proc.stderr  # the run header says how the streams are read, and why
    return _cells(db)


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("behind")
    server = SimServer(str(_fast_profile(tmp / "p.toml")), tmp / "sim.log")
    try:
        yield server, tmp
    finally:
        server.stop()


@pytest.mark.parametrize("transport", ["auto", "httpx"])
def test_high_n_cells_are_right_or_client_bound(fast_sim, transport):
    server, tmp = fast_sim
    cells = _run(server, tmp / f"{transport}.duckdb", "--concurrency", "128,256", "--duration", str(HIGH_N_WINDOW_S),
                 "--max-output", "2048", "--set", f"matrix.transport={transport}", "--set", f"matrix.ramp_timeout_s={RAMP_TIMEOUT_S}")  # fmt: skip
    assert [c["concurrency"] for c in cells] == [128, 256]
    for c in cells:
        n, flags = c["concurrency"], json.loads(c["flags"])
        seen = (transport, n, c["status"], c["reason"])
        assert c["status"] in ("valid", "client_bound"), seen  # first: an error cell carries no transport flag to read
        assert flags["transport"]["used"] == ("raw" if transport == "auto" else "httpx"), seen
        if not flags["ramp_ok"]:
            # httpx on a starved machine: the ramp outlasted RAMP_TIMEOUT_S. The engine is fast here, so the tokens it
            # generated and the client had not read must make the cell client_bound (measure/ramp_check.py), not error.
            print(seen, flags["ramp_check"])
            assert c["status"] == "client_bound" and flags["ramp_check"]["behind"] and "fell behind" in c["reason"], seen
            continue
        w = _window(server, c["window_start"], c["window_end"])
        total_err = c["total_tps"] / w["total_tps"] - 1
        per_err = c["per_request_tps"] / w["per_request_tps"] - 1
        batch = w["mean_batch"] / n
        seen += (f"total {100 * total_err:+.2f} %", f"per-request {100 * per_err:+.2f} %", f"sim batch {batch:.3f} N", flags.get("batch"))
        print(seen)
        assert c["status"] in ("valid", "client_bound"), seen
        if c["status"] == "valid":
            assert abs(total_err) <= bars.TOTAL_TPS and abs(per_err) <= bars.PER_REQUEST_TPS and batch >= bars.BATCH_VALID, seen
            assert not {"total_tps", "per_request_tps", "tbt_ms"} & set(flags["client"]["doubtful"]), seen
        else:
            assert c["reason"], seen  # the reason says what showed the client behind
        # The engine's running count is stored beside the client's in-flight count, over the same reads. A read that
        # takes over 1 s says little about its moment and is dropped: on a starved machine a 2 s window may keep one,
        # or none -- then only in a cell the client verdict disowned, and the reads that got no answer are counted
        # (failed, or late: answered, or still unanswered when cut, after 1 s -- measure/steady.py; a run beside a
        # CPU burner once stored none kept and none counted, when a read cut short unanswered was not counted).
        b = flags["batch"]
        if b is None:
            assert c["status"] == "client_bound" and flags["engine_gauges"]["failed_reads"] >= 1, seen
            continue
        assert b["reads"] >= 1 and b["engine_running_mean"] > 0 and b["client_in_flight_mean"] > 0, seen


def test_staggered_streams_keep_the_engine_at_n(tmp_path):
    """Requests of ~7.5 s in an 8 s window: every stream restarts inside it, the restarts never bunch, and the engine
    holds and decodes N. 16 ms steps: 128 streams are ~8,000 chunks a second, which a shared 2-core machine serves
    on schedule."""
    n, out = 128, STAGGER_OUTPUT
    server = SimServer(str(_fast_profile(tmp_path / "p.toml", step_base_ms=16)), tmp_path / "sim.log")
    try:
        (cell,) = _run(server, tmp_path / "s.duckdb", "--concurrency", str(n), "--duration", str(STAGGER_WINDOW_S), "--max-output", str(out))
        w = _window(server, cell["window_start"], cell["window_end"])
        every = _window(server, cell["window_start"] - 60, cell["window_end"])["requests"]
    finally:
        server.stop()
    seen = {k: w[k] for k in ("mean_held", "mean_batch", "finished_in_window", "most_finished_in_a_step")}, cell["status"], cell["reason"]
    print(seen)
    assert w["finished_in_window"] >= n - n // 10, seen  # requests shorter than the window: (nearly) every stream restarted in it
    # Spread: in lockstep all N end at one step; staggered, one generation (~448 steps) holds N ends.
    assert w["most_finished_in_a_step"] <= bars.MOST_ENDS_PER_STEP, seen
    assert w["mean_held"] >= bars.BATCH_STAGGERED * n, seen  # the engine held N: the client kept the streams there
    assert w["mean_batch"] >= bars.BATCH_STAGGERED * n, seen  # ... and decoded them, its own intake and join latency included
    # Stream i's first request asked for 16 + (out − 16) × (i + 1) / N tokens; every later one for out (measure/stagger.py).
    decode = [(r["request_id"].rsplit("-s", 1)[1].split("-r"), r["max_tokens"]) for r in every if "-decode-" in (r["request_id"] or "")]
    firsts = {int(s): k for (s, q), k in decode if q == "0"}
    assert firsts == {i: 16 + -(-(out - 16) * (i + 1) // n) for i in range(n)}
    assert {k for (_, q), k in decode if q != "0"} == {out}
