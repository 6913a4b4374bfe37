"""A burst on real llama.cpp (CPU) against the server's own log (issue 31 item 1's done-when: "the server's own request
count and span matching the point's"). llama-server logs each task's slot being taken (``launch_slot_``) and freed
(``release``, with the tokens the slot then holds) on a clock of its own (minutes.seconds.ms.µs since it started):
exactly the burst's requests ran, never more than its concurrency at once, and the point's duration — the first request's
send (before its write) to the last stream read — spans the server's first take to its last task's done (the last
``print_timing`` line, logged before the final response is posted) plus at most a few loopback deliveries (when the
burst's start was a stamp after the write, this test caught it up to 31 ms short). Not to its last ``release``: the server
logs that after posting the final response, so a client may have read it first — beside a CPU burner, 1.2 ms first.
"""

from __future__ import annotations

import duckdb
import pytest
from llamacpp_helpers import TINY_CONFIG, cli, launch_args, processes_using, server_log, server_tasks

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow, pytest.mark.timeout(600)]

REQUESTS, CONCURRENCY, CONTEXT = 8, 2, 256
# Two loopback deliveries (the first body read, the last chunk written) and the first connect, 5 ms as the sim's burst bar allows
# (tests/fidelity/bars.py LOOPBACK_MS); a llamacpp test runs solo, so nothing else is on the cores. Measured: 1.3 ms.
SPAN_SLACK_MS = 10.0


def test_a_burst_matches_llama_servers_own_log_of_its_requests_and_span(llama_server, tiny_gguf, tmp_path):
    db = tmp_path / "burst.duckdb"
    res = cli("run", str(TINY_CONFIG), *launch_args(llama_server, tiny_gguf), "--set", "matrix.contexts=[]",
              "--set", f"matrix.prefill_contexts=[{CONTEXT}]", "--burst", f"{REQUESTS}@{CONCURRENCY}", "--burst-context",
              str(CONTEXT), "--db", str(db), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert processes_using(str(tiny_gguf)) == []
    con = duckdb.connect(str(db), read_only=True)
    (run_id,) = con.execute("SELECT run_id FROM runs").fetchone()
    b = dict(zip(("status", "reason", "requests", "completed", "duration_s"), con.execute(
        "SELECT status, reason, requests, completed, duration_s FROM burst_points").fetchone()))  # fmt: skip
    sent = con.execute("SELECT prompt_tokens + output_tokens - 1 FROM point_requests").fetchall()
    con.close()
    assert b["status"] in ("valid", "client_bound") and b["requests"] == b["completed"] == REQUESTS == len(sent), b
    log = server_log(db, run_id)
    # The burst is the run's last step (after the prefill probe): its tasks are the server's last REQUESTS.
    tasks = sorted(server_tasks(log).values(), key=lambda t: t["start"])
    burst = tasks[-REQUESTS:]
    assert all("end" in t for t in tasks)  # every task the server took, it released
    # each holds what the client counted: its prompt and every output token but the last (sampled, never evaluated)
    assert sorted(t["n_tokens"] for t in burst) == sorted(n for (n,) in sent)
    assert all(t["n_tokens"] != burst[0]["n_tokens"] for t in tasks[:-REQUESTS])  # the probe before was not burst-shaped
    edges = sorted([(t["start"], 1) for t in burst] + [(t["end"], -1) for t in burst], key=lambda e: (e[0], e[1]))
    held = [sum(step for _, step in edges[: i + 1]) for i in range(len(edges))]
    assert max(held) == CONCURRENCY  # the cap held on the server's side, and was used
    # causal, so without allowance: the first take follows the first send, the last final response precedes the last read
    assert all(t["start"] < t["done"] <= t["end"] for t in burst), burst
    server_s = max(t["done"] for t in burst) - min(t["start"] for t in burst)
    assert b["duration_s"] >= server_s, (b["duration_s"], server_s)
    # The span's bar holds a burst the client kept up with; one whose loop stalled mid-burst is client_bound and says so
    # (tests/fidelity/bars.py `judged`).
    if b["status"] == "valid":
        assert (b["duration_s"] - server_s) * 1000 < SPAN_SLACK_MS, (b["duration_s"], server_s)
    else:
        assert "the client's event loop stalled" in b["reason"], b
