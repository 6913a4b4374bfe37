"""Trace replay against the sim over loopback (docs/load.md, "Trace replay"): the sample traces the repo's
script writes, replayed at their timestamps; checked against the sim's own record (``/debug/truth``: when
each request arrived, its prompt_tokens, max_tokens, and its prompt's KV block hashes)."""

from pathlib import Path

import bars
import pytest
from truthlib import arrived

from infermatrix.core.load.openloop import lag_bound_ms
from infermatrix.core.load.traces import read_trace
from infermatrix.testing import run_matrix, sim_server

pytestmark = pytest.mark.slow

MATRIX = {"contexts": [], "prefill_contexts": [256], "prefill_samples": 1}
SIM_BLOCK = 16  # the sim profile's KV block (its prefix-cache hash unit)
SCALE = 0.8  # 40 requests at ~2/s over ~20 s, replayed a little faster: ~16 s, lag bound 40 ms (10 % of the mean gap)


@pytest.fixture(scope="module")
def samples(sample_traces):
    return sample_traces(40)


def _replay(path: Path, api: str = "completions", **point):
    load = [{"kind": "trace", "path": str(path), "time_scale": SCALE, **point}]
    # The sample's longest prompt is ~5K tokens; a prefix cache that holds the whole replay (nothing evicted).
    with sim_server(max_model_len=8192, kv_tokens=200_000, prefix_cache_tokens=1_000_000, record_prompt_blocks=True) as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix={**MATRIX, "api": api}, config={"load": load})
        truth = {r["request_id"]: r for r in sim.truth(blocks=True)["requests"]}
    assert result.status == "completed", result.error
    (p,) = result.query("SELECT * FROM points WHERE run_id = ?", [result.run_id])
    reqs = result.query(
        "SELECT * FROM point_requests JOIN trace_requests USING (run_id, point, request_no) WHERE run_id = ? ORDER BY request_no",
        [result.run_id],
    )
    (t,) = result.query("SELECT * FROM trace_points WHERE run_id = ?", [result.run_id])
    return result, p, t, reqs, truth


def _common_blocks(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_mooncake_sample_replays_on_time_with_exact_lengths_and_real_shared_prefixes(samples):
    path = samples / "mooncake.jsonl"
    trace = read_trace(path)
    result, p, t, reqs, truth = _replay(path)
    assert p["status"] == "valid", p["reason"]
    assert p["arrival"] == "trace" and p["sent"] == p["scheduled"] == p["completed"] == len(trace) == t["replayed"]
    # The documented bound at the trace's own rate, from the test's input (the file), not from the point.
    rate = (len(trace) - 1) / ((trace[-1].at_s - trace[0].at_s) * SCALE)
    bound = lag_bound_ms(rate)
    assert p["requested_rate"] == pytest.approx(rate) and p["lag_bound_ms"] == pytest.approx(bound)
    for r in reqs:
        server = truth[r["request_id"]]
        want = trace[r["trace_index"]]
        # On its (scaled) timestamp: scheduled at origin + the trace's offset; received by the server within the bound
        # (less the sim's own lateness at the receipt, received_held_s: docs/sim.md).
        assert r["scheduled"] - p["origin"] == pytest.approx(want.at_s * SCALE, abs=bars.TRACE_SCHEDULE_S)
        assert 0 <= (server["received"] - r["scheduled"]) * 1000
        assert (arrived(server) - r["scheduled"]) * 1000 <= bound, (server["received_held_s"], r["lag_ms"])
        assert 0 <= r["lag_ms"] <= bound
        # Lengths exact, by the server's own count: prompt = input_length, max_tokens = output_length.
        assert server["prompt_tokens"] == want.input_tokens == r["prompt_tokens"] == r["built_prompt_tokens"]
        assert server["max_tokens"] == want.output_tokens
    assert t["inexact_prompts"] == 0 and t["skipped_failed"] == 0
    # Shared prefixes token for token: two requests agreeing on k leading hash_ids have the same first
    # k·512 prompt tokens (the sim's chain hashes over 16-token blocks agree that far) and differ right after.
    by_no = {r["request_no"]: (trace[r["trace_index"]], truth[r["request_id"]]["blocks"]) for r in reqs}
    pairs = shared = 0
    for i, (a, ha) in by_no.items():
        for j, (b, hb) in by_no.items():
            if j <= i:
                continue
            k = _common_blocks(list(a.hash_ids), list(b.hash_ids))
            common = _common_blocks(ha, hb)
            # Agreement covers k·512 tokens of words (after any leading tokens the API adds, the same for
            # all), and ends inside the first block where the ids differ.
            full = min(k * 512, a.input_tokens, b.input_tokens) // SIM_BLOCK
            assert common >= full - 1, (i, j, k, common)
            if k < min(len(a.hash_ids), len(b.hash_ids)):
                assert common <= (k * 512 + 16) // SIM_BLOCK, (i, j, k, common)
            pairs += 1
            shared += k > 0
    assert shared >= 5, "the sample trace should have requests that share leading blocks"
    # The stored expected shared prefix: the most leading prompt words (one token each) a request shares with
    # an earlier one, from the trace's ids: min(k·512, both word counts), words = input − the API's overhead.
    words = {r["request_no"]: trace[r["trace_index"]].input_tokens - t["prompt_overhead"] for r in reqs}
    for r in reqs:
        i, a = r["request_no"], trace[r["trace_index"]]
        want = max((min(_common_blocks(list(a.hash_ids), list(by_no[j][0].hash_ids)) * 512, words[i], words[j]) for j in range(i)), default=0)
        assert r["shared_prefix_tokens"] == want, i
    assert sum(r["shared_prefix_tokens"] for r in reqs) == t["shared_prefix_tokens"] > 0
    # The engine's own prefix cache reused what the trace implies: never more per request (to its 16-token
    # block), and within 2 % in all (the sim's prefill runs at 500K tok/s: a shared prompt is cached ~10 ms after
    # it arrives, before the next request that shares it comes in this sample; measured: equal).
    for r in reqs:
        assert truth[r["request_id"]]["cached_tokens"] <= r["shared_prefix_tokens"] + SIM_BLOCK
    cached = sum(truth[r["request_id"]]["cached_tokens"] for r in reqs)
    assert abs(cached - t["shared_prefix_tokens"]) <= bars.TRACE_PREFIX_REUSE * t["shared_prefix_tokens"], (cached, t["shared_prefix_tokens"])
    arrivals = result.query("SELECT * FROM trace_arrivals WHERE run_id = ? ORDER BY second", [result.run_id])
    assert sum(a["requested"] for a in arrivals) == sum(a["sent"] for a in arrivals) == len(trace)
    # Due per second is the trace's own count per second of scaled time.
    due = {}
    for r in trace:
        due[int(r.at_s * SCALE)] = due.get(int(r.at_s * SCALE), 0) + 1
    assert {a["second"]: a["requested"] for a in arrivals if a["requested"]} == due
    _check_reports(result, p, len(trace))


def _check_reports(result, p, n):
    """The text report's trace section and the JSON report's ``trace`` key, from the stored run."""
    import io

    from rich.console import Console

    from infermatrix.core.report.json_report import render_json
    from infermatrix.core.report.text import render_text
    from infermatrix.core.store import Store

    with Store(result.db, read_only=True) as store:
        out = io.StringIO()
        render_text(store, result.run_id, Console(file=out, width=200, color_system=None))
        doc = render_json(store, result.run_id)
    text = out.getvalue()
    assert "Trace replay" in text and "arrivals over time" in text and f"{n}/{n}" in text, text
    assert "Open-loop points" not in text  # the trace point is shown once, in its own section
    (t,) = doc["trace"]
    assert t["status"] == p["status"] and t["replayed"] == n and sum(a["sent"] for a in t["arrivals"]) == n
    assert t["lag_p99_ms"] == p["lag_p99_ms"] and t["trace_rate"] == pytest.approx(p["requested_rate"])
    # docs/load.md's trace query runs as written (with this run's id) and answers one row per request.
    doc = (Path(__file__).resolve().parents[2] / "docs" / "load.md").read_text()
    (sql,) = [b for b in doc.split("```sql")[1:] if "trace replay: did each request" in b]
    rows = result.query(sql.split("```")[0].replace("'3fa2c1d0'", "?"), [result.run_id])
    assert len(rows) == n and all(r["prompt_tokens"] == r["trace_input_tokens"] for r in rows)


@pytest.mark.parametrize("name, api", [("azure.csv", "chat"), ("burstgpt.csv", "completions")])
def test_csv_samples_replay_with_exact_lengths(samples, name, api):
    """Exact by the server's count through the chat template too (its 7 tokens measured, the words fewer)."""
    path = samples / name
    trace = read_trace(path)
    kept = [r for r in trace if not r.failed and r.output_tokens > 0]
    result, p, t, reqs, truth = _replay(path, api, max_requests=15)
    assert t["prompt_overhead"] == (7 if api == "chat" else 0)  # the sim's ChatML: 4 per message + 3 priming
    assert p["status"] == "valid", p["reason"]
    assert t["format"] == name.split(".")[0] and len(reqs) == 15 == t["replayed"]
    assert t["cut"] == len(kept) - 15
    failed_rows = sum(r.failed for r in trace)
    assert t["skipped_failed"] == failed_rows and (failed_rows > 0) == (name == "burstgpt.csv")
    for r in reqs:
        server, want = truth[r["request_id"]], trace[r["trace_index"]]
        assert not want.failed
        assert server["prompt_tokens"] == want.input_tokens and server["max_tokens"] == want.output_tokens
        assert r["shared_prefix_tokens"] == 0  # no hash_ids: nothing shared
