"""Fidelity: real matrices against real sim servers, every valid cell checked against the server's truth.

Scenarios cover both APIs, 1–3 tokens per chunk (speculative decoding), servers with and without
per-chunk usage (the tokenizer fallback), no usage at all, a reasoning stream and role-only first chunks.
Bars (issue 3): total/per-request tok/s and TBT within 1 %; TTFT and prefill within 3 %; avg_active within
5 % of N; prompt lengths within 0.5 %; over capacity exactly where the KV budget says.
A column the cell's own self-check marked doubtful (a client stalled on a busy machine) gets the bound the
cell states added to its bar (docs/metrics.md, expected error).
"""

from __future__ import annotations

import json
import re
import statistics

import duckdb
import pytest
from imxtest import SimServer, run_cli
from profiles import write_profile
from truthlib import cell_truth, rel_err

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI

MEASURED = {"valid", "client_bound"}
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
        prefill_tps=40_000.0, prefill_base_ms=300.0, **fields,
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


def _doubtful_bar(flags, col: str, bar: float) -> float:
    """The relative bar for ``col``: ``bar``, plus the bound the cell itself states when its own self-check
    marked the column doubtful ("within ±X %", docs/metrics.md: stalls of a busy client at the window's edges
    or at the stamps a rate is timed by). The stated bound covers the stalls only; the ordinary sources of
    error the bar is for remain. An unmarked column keeps the tight bar."""
    note = (flags.get("client") or {}).get("doubtful", {}).get(col) if flags else None
    m = re.search(r"within ±([0-9.]+) %", note or "")
    return bar + float(m.group(1)) / 100 if m else bar


def _truth_by_id(truth):
    return {r["request_id"]: r for r in truth["requests"] if r.get("request_id")}


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
    for ctx, n, st, total, per_req, ttft, tbt, active, ws, we, src, raw_flags in rows:
        if st not in MEASURED:
            continue
        flags = json.loads(raw_flags) if raw_flags else {}
        t = cell_truth(truth, ws, we)
        assert src == source, (name, ctx, n, src)
        assert rel_err(total, t.total_tps) < _doubtful_bar(flags, "total_tps", 0.01), (name, ctx, n, total, t.total_tps, flags.get("client"))
        assert rel_err(per_req, t.per_request_tps) < _doubtful_bar(flags, "per_request_tps", 0.01), (
            name, ctx, n, per_req, t.per_request_tps, flags.get("client"))
        assert rel_err(tbt, t.tbt_ms) < _doubtful_bar(flags, "tbt_ms", 0.01), (name, ctx, n, tbt, t.tbt_ms, flags.get("client"))
        if not (flags.get("admission") or {}).get("client_short"):  # a client that kept fewer in flight says so, and why
            assert abs(active - n) / n < 0.05, (name, ctx, n, active)
        # TTFT: the same requests on both sides, joined by X-Request-Id.
        # ttft_ms's population (docs/metrics.md): each stream's opening request and every restart sent before
        # the window closed (their first tokens waited for).
        reqs = con.execute(
            "SELECT stream_index, seq FROM requests WHERE run_id = ? AND context_tokens = ? AND concurrency = ? "
            "AND first_token IS NOT NULL AND sent <= ?", [run_id, ctx, n, we]
        ).fetchall()
        # The client's clock starts at the last byte written, so the server's starts at the body fully read
        # (`received`), not at the handler's start: a body read over a stall is client time on both sides.
        server_ttfts = [
            (r["first_token"] - r["received"]) * 1000
            for r in (by_id[f"{run_id}-decode-{ctx}-{n}-s{s}-r{q}"] for s, q in reqs)
        ]
        # 3 %, plus what N simultaneous starts queue on two shared cores before either clock sees the
        # request (measured ~20 ms at N = 8 under CI load): 2 ms per stream (docs/metrics.md, expected error).
        # Where the cell marked ttft_ms doubtful, its stated stamp-lag bound is added: the client was stalled
        # while stamping these very requests, and says by how much.
        truth_ttft = statistics.median(server_ttfts)
        client = flags.get("client") or {}
        lag = (client.get("ttft_lag_bound_ms") or 0.0) if "ttft_ms" in client.get("doubtful", {}) else 0.0
        assert abs(ttft - truth_ttft) < 0.03 * truth_ttft + 2.0 * n + lag, (name, ctx, n, ttft, truth_ttft, client)


def test_prefill_matches_truth(scenario):
    name, _, truth, con = scenario
    by_id = _truth_by_id(truth)
    rows = con.execute("SELECT context_tokens, prompt_tokens, prompt_tps, ttft_ms FROM prefill_list").fetchall()
    assert {r[0] for r in rows} == {1024, 4096}
    for ctx, prompt_tokens, tps, ttft in rows:
        assert abs(prompt_tokens - ctx) <= 0.005 * ctx, (name, ctx, prompt_tokens)
        ids = [r for (r,) in con.execute(
            "SELECT request_id FROM prefill_samples WHERE context_tokens = ? AND NOT throwaway", [ctx]).fetchall()]
        probes = [by_id[i] for i in ids]
        assert probes and all(p["cached_tokens"] == 0 for p in probes), "the prefill probes must be cold"
        server_ttft = statistics.median((p["first_token"] - p["received"]) * 1000 for p in probes)
        assert rel_err(ttft, server_ttft) < 0.03, (name, ctx, ttft, server_ttft)
        assert rel_err(tps, prompt_tokens / (server_ttft / 1000)) < 0.03


def test_role_only_first_chunk_is_never_the_ttft(scenario):
    name, _, truth, con = scenario
    # Every measured TTFT includes the 300 ms prefill base: a role-only chunk would arrive in ~1 ms.
    low = con.execute("SELECT min(ttft_ms) FROM requests WHERE ttft_ms IS NOT NULL").fetchone()[0]
    assert low > 100.0, (name, low)


def test_token_sources_reconcile(scenario):
    name, _, _, con = scenario
    rows = con.execute("SELECT flags->>'$.tokens' FROM cells WHERE status IN ('valid', 'client_bound')").fetchall()
    for (raw,) in rows:
        tokens = json.loads(raw)
        assert tokens["agree"], (name, tokens)
        assert tokens["engine"] is not None and tokens["tokenizer"] is not None
