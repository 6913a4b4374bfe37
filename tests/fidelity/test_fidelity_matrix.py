"""Fidelity: real matrices against real sim servers, every valid cell checked against the server's truth.

Scenarios cover both APIs, 1–3 tokens per chunk (speculative decoding), servers with and without
per-chunk usage (the tokenizer fallback), no usage at all, a reasoning stream and role-only first chunks.
Bars (tests/fidelity/bars.py, docs/metrics.md "Expected error"): total/per-request tok/s and TBT within 1 %;
TTFT and prefill within 3 %; avg_active within 5 % of N; prompt lengths within 0.5 %; over capacity exactly
where the KV budget says. A column the cell's own self-check marked doubtful is held to the same bar: only a
cell the product disowned (`client_bound`) may miss it (bars.judged) — except a doubtful decode TTFT, widened by
the lateness of its stamps as the sim's record measures it, never by the bound the product states (docs/metrics.md,
"Doubtful columns are held to the same bar"); and at least one `valid` cell per scenario meets the TTFT bar unwidened.
"""

from __future__ import annotations

import json

import duckdb
import pytest
from bars import (
    AVG_ACTIVE, DECODE_TTFT, DECODE_TTFT_MS_PER_STREAM, PER_REQUEST_TPS, PREFILL_TTFT, TBT, TOTAL_TPS, judged, prompt_len_bar,
)
from imxtest import SimServer, run_cli
from profiles import write_profile
from truthlib import cell_truth, check_mark_covers, decode_request_id, median_range, receipt_ttft_ms, rel_err, stamp_lateness_ms

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI

MEASURED = {"valid", "client_bound"}
PREFILL_BASE_MS = 300.0  # profile input: every request's prefill takes at least this, so a role-only chunk comes well before the first token
KV = 14_000  # 8 x (1024 + 512) = 12,288 fits; 8 x (2048 + 512) = 20,480 does not
SCENARIOS = {
    # name: (api, profile fields, expected token source)
    "completions-spec2": ("completions", {"spec_tokens": 2, "acceptance": 0.6}, "usage"),
    "chat-reasoning": ("chat", {"spec_tokens": 1, "acceptance": 0.5, "reasoning_tokens": 12}, "usage"),
    "completions-no-continuous-usage": ("completions", {"spec_tokens": 2, "acceptance": 0.7, "continuous_usage_stats": False}, "tokenizer"),
    "chat-no-usage": ("chat", {"spec_tokens": 1, "acceptance": 0.6, "usage": False, "reasoning_tokens": 4}, "tokenizer"),
}


@pytest.fixture(scope="module", params=list(SCENARIOS))
def scenario(request, tmp_path_factory):
    api, fields, source = SCENARIOS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    # Slow prefill (300 ms base) so TTFT dwarfs the client-side HTTP overhead (1–3 ms on 2 busy cores).
    profile = write_profile(
        tmp / "p.toml", max_model_len=8192, kv_tokens=KV, step_base_ms=6.0, step_per_seq_ms=0.4,
        prefill_tps=40_000.0, prefill_base_ms=PREFILL_BASE_MS, **fields,
    )
    server = SimServer(str(profile), tmp / "sim.log")
    try:
        db = tmp / "f.duckdb"
        proc = run_cli(
            "run", "--engine", "sim", "--base-url", server.base_url, "--api", api,
            "--contexts", "1K,2K", "--prefill-contexts", "1K,4K", "--concurrency", "1,4,8",
            # 3 s windows and 512-token requests: long request segments, so arrival jitter on a busy
            # 2-core machine stays far below the 1 % bar.
            "--duration", "3", "--max-output", "512", "--db", str(db),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield request.param, source, server.truth(), duckdb.connect(str(db), read_only=True)
    finally:
        server.stop()


def _truth_by_id(truth):
    return {r["request_id"]: r for r in truth["requests"] if r.get("request_id")}


def _edges(con, by_id: dict, run_id: str, ctx: int, n: int, ws: float, we: float) -> list[tuple]:
    """For a failure's message: each request of the cell seen in its window, client against sim, in ms from the
    window's start — (stream-seq, client first token, sim first emission in the window, client end, sim last emission
    in the window). Says whether a span differed at its start or its end, and by how much (run N, 2026-12-06)."""
    ms = lambda t: None if t is None else round((t - ws) * 1000, 1)  # noqa: E731
    out = []
    for s, q, first, ended in con.execute("SELECT stream_index, seq, first_token, ended FROM requests WHERE run_id = ? AND "
                                          "context_tokens = ? AND concurrency = ? ORDER BY sent", [run_id, ctx, n]).fetchall():  # fmt: skip
        em = [t for t, _ in by_id.get(decode_request_id(run_id, ctx, n, s, q), {}).get("emissions", []) if ws <= t <= we]
        if em or (first is not None and first <= we and (ended or we) >= ws):
            out.append((f"{s}-{q}", ms(first), ms(em[0]) if em else None, ms(ended), ms(em[-1]) if em else None))
    return out


def test_decode_cells_match_truth(scenario):
    name, source, truth, con = scenario
    run_id = con.execute("SELECT run_id FROM runs").fetchone()[0]
    by_id = _truth_by_id(truth)
    rows = con.execute(
        "SELECT context_tokens, concurrency, status, total_tps, per_request_tps, ttft_ms, tbt_ms, avg_active, "
        "window_start, window_end, token_source, flags FROM cells"
    ).fetchall()
    statuses = {(c, n): st for c, n, st, *_ in rows}
    expected_over = {(c, n) for c in (1024, 2048) for n in (1, 4, 8) if n * (c + 512) > KV}
    assert {k for k, v in statuses.items() if v == "over_capacity"} == expected_over
    # client_bound: this 2-core machine was too busy for the client at that moment (see docs/metrics.md); the
    # cell's numbers are kept in `cells` and must still be right.
    assert all(v in MEASURED for k, v in statuses.items() if k not in expected_over), statuses
    strict = 0
    for ctx, n, st, total, per_req, ttft, tbt, active, ws, we, src, raw_flags in rows:
        if st not in MEASURED:
            continue
        flags = json.loads(raw_flags) if raw_flags else {}
        t = cell_truth(truth, ws, we)
        where = (name, ctx, n, st, flags.get("client"))
        assert src == source, (name, ctx, n, src)
        assert judged(st, rel_err(total, t.total_tps) < TOTAL_TPS), (*where, total, t.total_tps)
        per_req_ok = judged(st, rel_err(per_req, t.per_request_tps) < PER_REQUEST_TPS)
        if not per_req_ok:  # printed whole (pytest shortens an assertion's message): shown with the failure
            print("edges, ms from the window's start:", _edges(con, by_id, run_id, ctx, n, ws, we))
        assert per_req_ok, (*where, per_req, t.per_request_tps)
        assert judged(st, rel_err(tbt, t.tbt_ms) < TBT), (*where, tbt, t.tbt_ms)
        if not (flags.get("admission") or {}).get("client_short"):  # a client that kept fewer in flight says so, and why
            assert abs(active - n) / n < AVG_ACTIVE, (name, ctx, n, active)
        # TTFT: the same requests on both sides, joined by X-Request-Id.
        # ttft_ms's population (docs/metrics.md): each stream's opening request and every restart sent before
        # the window closed (their first tokens waited for).
        reqs = con.execute(
            "SELECT stream_index, seq, sent, first_token FROM requests WHERE run_id = ? AND context_tokens = ? AND concurrency = ? "
            "AND first_token IS NOT NULL AND sent <= ?", [run_id, ctx, n, we]
        ).fetchall()
        server = [by_id[decode_request_id(run_id, ctx, n, s, q)] for s, q, _, _ in reqs]
        # The client's clock starts as the request is handed to its connection, so the server's starts at the body fully read
        # (`received`), not at the handler's start: a body read over a stall is client time on both sides.
        # As a range: that, and that plus the sim's own lateness at the receipt, which the client's TTFT holds
        # (truthlib.receipt_ttft_ms).
        ranges = [receipt_ttft_ms(r) for r in server]
        lo, hi = median_range(ranges)
        # 3 %, plus what N simultaneous starts queue before either clock sees the request: 2 ms per stream (bars.py).
        bar = DECODE_TTFT * lo + DECODE_TTFT_MS_PER_STREAM * n
        if lo - bar < ttft < hi + bar:
            strict += st == "valid"
            continue
        # Outside the bar. A valid cell passes only where it marked ttft_ms doubtful and the sim's record shows why:
        # its requests' stamps late against the server's own times for them (truthlib.stamp_lateness_ms), each by no
        # more than the cell's stated bound and a loopback delivery, a send also N's queue (truthlib.check_mark_covers).
        # The widening is the server's measure of the client, never the product's word about itself, and a mark the
        # server contradicts fails (docs/metrics.md, "Doubtful columns are held to the same bar").
        late = [stamp_lateness_ms(r, sent, first) for r, (_, _, sent, first) in zip(server, reqs)]
        client = flags.get("client") or {}
        if st == "valid" and "ttft_ms" in (client.get("doubtful") or {}):
            check_mark_covers(late, client, DECODE_TTFT_MS_PER_STREAM * n)
            _, hi_late = median_range([(a, z + send + read) for (a, z), (send, read) in zip(ranges, late)])
            assert lo - bar < ttft < hi_late + bar, (*where, ttft, lo, hi, hi_late)
            continue
        assert judged(st, False), (*where, ttft, lo, hi, late)
    # A test that can fail: some valid cell of every scenario had its TTFT judged at the bar, excused neither as
    # client_bound nor by its stamps' lateness.
    assert strict >= 1, (name, statuses)


def test_prefill_matches_truth(scenario):
    name, _, truth, con = scenario
    by_id = _truth_by_id(truth)
    rows = con.execute("SELECT context_tokens, prompt_tokens, prompt_tps, ttft_ms, status, reason FROM prefill").fetchall()
    assert {r[0] for r in rows} == {1024, 4096}
    for ctx, prompt_tokens, tps, ttft, status, reason in rows:
        assert abs(prompt_tokens - ctx) <= prompt_len_bar(ctx), (name, ctx, prompt_tokens)
        # The point's TTFT is the median of its unheld cold probes (outcome ok; a probe the client's own loop held is
        # kept with its reason and replaced: run/prefill.py); a point with too many held says so (bars.judged).
        assert status == "valid" or (status == "client_bound" and "the client's event loop held" in reason), (status, reason)
        ids = [r for (r,) in con.execute("SELECT request_id FROM prefill_samples WHERE context_tokens = ? AND NOT throwaway "
                                         "AND (outcome = 'ok' OR ? <> 'valid')", [ctx, status]).fetchall()]  # fmt: skip
        probes = [by_id[i] for i in ids]
        assert probes and all(p["cached_tokens"] == 0 for p in probes), "the prefill probes must be cold"
        # The server's TTFT as a range: receipt to first token, and that plus the sim's own lateness at the receipt
        # (truthlib.receipt_ttft_ms), which the client's TTFT holds.
        lo, hi = median_range([receipt_ttft_ms(p) for p in probes])
        assert judged(status, lo * (1 - PREFILL_TTFT) < ttft < hi * (1 + PREFILL_TTFT)), (name, ctx, ttft, lo, hi)
        assert judged(status, prompt_tokens / (hi * (1 + PREFILL_TTFT) / 1000) < tps < prompt_tokens / (lo * (1 - PREFILL_TTFT) / 1000))
    assert any(r[4] == "valid" for r in rows), (name, rows)  # at least one point judged


def test_role_only_first_chunk_is_never_the_ttft(scenario):
    name, _, truth, con = scenario
    by_id = _truth_by_id(truth)
    run_id = con.execute("SELECT run_id FROM runs").fetchone()[0]
    rows = con.execute(
        "SELECT context_tokens, concurrency, stream_index, seq, first_token FROM requests WHERE first_token IS NOT NULL"
    ).fetchall()
    assert rows
    # Causality on one clock, no tolerance: a first token cannot reach the client before the server emitted it
    # (its own record). The role-only chunk goes out before prefill (~300 ms earlier): taken for the first token,
    # it would arrive before the server's first_token.
    for ctx, n, s, q, first in rows:
        server = by_id[decode_request_id(run_id, ctx, n, s, q)]
        assert first >= server["first_token"], (name, ctx, n, s, q, first, server["first_token"])


def test_token_sources_reconcile(scenario):
    name, _, _, con = scenario
    rows = con.execute("SELECT flags->>'$.tokens' FROM cells WHERE status IN ('valid', 'client_bound')").fetchall()
    for (raw,) in rows:
        tokens = json.loads(raw)
        assert tokens["agree"], (name, tokens)
        assert tokens["engine"] is not None and tokens["tokenizer"] is not None
