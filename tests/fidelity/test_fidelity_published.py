"""Every published number means what it says (issue 11), against a sim that sends 1–3 tokens per chunk,
reasoning tokens first and no per-chunk usage; the server's own step record (each request's emissions,
stamped at its steps' ends on the same monotonic clock) is the truth, over each cell's stored window.

* per_request_tps and tbt_ms within 0.5 % of the server's at N = 1, 2, 8, 16 (token-weighted over
  in-window spans, docs/metrics.md); total_tps as before.
* cold prefill TTFT within 2 % or 1 ms of the server's receipt-to-first-token, 1K to 16K, plus on the client's
  side a fixed allowance for one loopback delivery at each end (bars.PREFILL_TTFT_DELIVERY_MS): the median of the kept probes against the median of the
  same probes on the server, joined by X-Request-Id.
* ttft_ms's two populations: N opening requests, and every restart sent before the window closed has a
  first token (waited for, not dropped).
"""

from __future__ import annotations

import statistics

import duckdb
import pytest
from bars import PER_REQUEST_TPS_LONG_SPANS, PREFILL_TTFT_DELIVERY_MS, PREFILL_TTFT_FLOOR_MS, PREFILL_TTFT_TIGHT, TBT_LONG_SPANS, TOTAL_TPS, judged
from imxtest import SimServer, run_cli
from profiles import write_profile
from truthlib import cell_truth, median_range, receipt_ttft_ms, rel_err

pytestmark = pytest.mark.slow

NS = (1, 2, 8, 16)
PREFILL = {1024: "1K", 2048: "2K", 4096: "4K", 8192: "8K", 16384: "16K"}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("published")
    profile = write_profile(
        tmp / "p.toml", max_model_len=20_480, kv_tokens=65_536, step_base_ms=6.0, step_per_seq_ms=0.4,
        spec_tokens=2, acceptance=0.6, reasoning_tokens=24, continuous_usage_stats=False,
        prefill_tps=10_000.0, prefill_base_ms=2.0,  # 1K ≈ 100 ms: the bar is 2 % or 1 ms
    )
    server = SimServer(str(profile), tmp / "sim.log")
    try:
        db = tmp / "p.duckdb"
        proc = run_cli(
            "run", "--engine", "sim", "--base-url", server.base_url, "--api", "chat",
            "--contexts", "1K", "--prefill-contexts", ",".join(PREFILL.values()), "--concurrency", ",".join(map(str, NS)),
            # 4 s windows of 1,024-token requests: at N = 1 a request restarts inside the window (fragments);
            # at N = 16 most run the whole window.
            "--duration", "4", "--max-output", "1024", "--db", str(db),
            # What is checked here is the numbers against the server; a busy machine's client_bound verdict
            # keeps them in `cells` either way.
            "--set", "matrix.check_client=false",
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield server.truth(), duckdb.connect(str(db), read_only=True)
    finally:
        server.stop()


def test_per_request_rate_and_tbt_within_half_a_percent(published):
    truth, con = published
    rows = con.execute(
        "SELECT concurrency, status, total_tps, per_request_tps, tbt_ms, window_start, window_end, token_source "
        "FROM cells ORDER BY concurrency"
    ).fetchall()
    assert [r[0] for r in rows] == list(NS)
    for n, status, total, per_req, tbt, ws, we, source in rows:
        assert status == "valid", (n, status)
        assert source == "tokenizer"  # no per-chunk usage: counted by the server's tokenizer at the edges
        t = cell_truth(truth, ws, we)
        assert rel_err(total, t.total_tps) < TOTAL_TPS, (n, total, t.total_tps)
        assert rel_err(per_req, t.per_request_tps) < PER_REQUEST_TPS_LONG_SPANS, (n, per_req, t.per_request_tps)
        assert rel_err(tbt, t.tbt_ms) < TBT_LONG_SPANS, (n, tbt, t.tbt_ms)
        assert tbt == pytest.approx(1000.0 / per_req)
    # One stream: per-request is the stream's own decode rate — the window's tokens less each request's first
    # arrival, over the window less the restart gaps — so on the server's record it is above total_tps only where
    # the gaps' share of the time outweighs the first arrivals' share of the tokens (here ~0.3 %: a ~13 ms restart
    # gap against 2-4 tokens). Asserting total <= per-request on the client's figures was a bar of ~0.3 % on
    # per-request, tighter than the 0.5 % it is held to: run S beside a CPU burner stored 339.18 against 338.81
    # tok/s. Each figure is held to the server's record above, at its stated bar.


def test_cold_prefill_ttft_matches_server_receipt_to_first_token(published):
    truth, con = published
    by_id = {r["request_id"]: r for r in truth["requests"] if r.get("request_id")}
    points = con.execute("SELECT context_tokens, ttft_ms, prompt_tps, samples, prompt_tokens, status, reason FROM prefill ORDER BY 1").fetchall()
    # The run's measured round trip of an empty request is stored (docs/metrics.md); it widens no bar below.
    overhead = con.execute("SELECT client_overhead_ms FROM runs").fetchone()[0]
    assert overhead is not None and overhead > 0
    assert [p[0] for p in points] == list(PREFILL)
    for ctx, ttft, tps, samples, prompt_tokens, status, reason in points:
        rows = con.execute(
            "SELECT request_id, ttft_ms, throwaway, outcome FROM prefill_samples WHERE context_tokens = ? ORDER BY sample_no", [ctx]
        ).fetchall()
        # A probe the client's own loop held is kept with its reason and replaced (run/prefill.py): the point is the
        # median of the unheld ones; a point with too many held is disowned, client_bound (bars.judged).
        assert status == "valid" or (status == "client_bound" and reason.startswith("the client's event loop held")), (ctx, status, reason)
        assert rows[0][2] is True and not any(r[2] for r in rows[1:])
        kept = [r for r in rows[1:] if r[3] == "ok" or status != "valid"]
        assert samples == len(kept) and (status != "valid" or samples == 3), (samples, rows)
        assert all(r[3] == "ok" or r[3].startswith("held: ") for r in rows[1:]), rows
        assert ttft == pytest.approx(statistics.median(r[1] for r in kept))
        for rid, _, _, _ in rows:
            probe = by_id[rid]
            assert probe["cached_tokens"] == 0, "every probe must be cold, the throwaway too"
        # Receipt: the request's body fully read. (Its handler starts before: a client that stalls between writing the
        # headers and the body — seen on this busy machine, 140 ms once — is not server time.) As a range: receipt to
        # first token, and that plus the sim's own lateness at the receipt, which the client's TTFT holds (truthlib).
        server = [receipt_ttft_ms(by_id[rid]) for rid, _, _, _ in kept]
        lo, hi = median_range(server)
        # 2 % or 1 ms either way; above it, on the client's side only, a fixed allowance for the loopback delivery and
        # both event loops at each end (bars.py).
        bar = max(PREFILL_TTFT_TIGHT * lo, PREFILL_TTFT_FLOOR_MS)
        assert judged(status, -bar <= ttft - lo and ttft - hi <= bar + PREFILL_TTFT_DELIVERY_MS), (ctx, ttft, lo, hi, overhead, rows, server)
        assert tps == pytest.approx(prompt_tokens / (ttft / 1000.0))


def test_ttft_populations_and_restarts_waited_for(published):
    _, con = published
    for n, burst_n, restart_n, missing, sent_in_window in con.execute(
        "SELECT c.concurrency, c.ttft_burst_n, c.ttft_restart_n, (c.flags->>'$.ttft_without_first_token')::INT, "
        "(SELECT count(*) FROM requests q WHERE q.run_id = c.run_id AND q.concurrency = c.concurrency AND q.seq > 0 "
        " AND q.sent <= c.window_end) FROM cells c ORDER BY 1"
    ).fetchall():
        assert burst_n == n, (n, burst_n)
        assert missing == 0, n  # every request sent before the window closed got its first token
        assert restart_n == sent_in_window, (n, restart_n, sent_in_window)
    # At one stream, 1,024 tokens at ~2.2 tokens per ~6.4 ms step take ~3 s: a 4 s window holds restarts.
    assert con.execute("SELECT ttft_restart_n FROM cells WHERE concurrency = 1").fetchone()[0] >= 1


def test_chunks_without_usage_on_a_usage_stream_are_never_counted_twice(sim_factory, tmp_path):
    """Every third chunk carries no usage: it counts as one token, and the next usage delta does not count it
    again — without a tokenizer to fix it afterwards (1–3 tokens per chunk, so one is not always right, but the
    stream's total is the server's exactly)."""
    import anyio
    import httpx
    import orjson

    from infermatrix.core.stream.client import stream_request
    from infermatrix.core.types import RequestRecord

    server = sim_factory(str(write_profile(tmp_path / "g.toml", spec_tokens=2, acceptance=0.6, usage_gap_every=3)))

    async def one() -> RequestRecord:
        rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
        body = {"model": "sim-tiny", "prompt": "Tell me a story.", "max_tokens": 300, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        async with httpx.AsyncClient(timeout=30) as client:
            model = (await client.get(server.base_url + "/v1/models")).json()["data"][0]["id"]
            body["model"] = model
            return await stream_request(client, server.base_url + "/v1/completions", orjson.dumps(body), rec,
                                        headers={"X-Request-Id": "gap-1"})  # fmt: skip

    rec = anyio.run(one)
    (truth,) = [r for r in server.truth()["requests"] if r["request_id"] == "gap-1"]
    assert rec.outcome == "ok" and rec.token_source == "chunks"  # some chunks had no usage
    assert rec.output_tokens == truth["output_tokens"] == 300
    assert len(rec.events) == len(truth["emissions"])
