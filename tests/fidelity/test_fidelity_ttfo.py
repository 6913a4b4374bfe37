"""Time to the first answer token (TTFO; docs/metrics.md) against the sim's own record: a reasoning model's stream
(the sim's ``reasoning_tokens``: the first R tokens arrive as ``delta.reasoning_content``) stores when its first
answer token came; TTFO − TTFT is the server's time from its first emission to the emission that carried token
R + 1. A stream cut before its answer stores NULL; a stream without reasoning has TTFO = TTFT.

The client's stamps and the sim's are on one clock (the host's monotonic clock), so each is checked for causality
without a bar: the first token read after the sim's first emission, the first answer token read after the emission
that carried it. The gap TTFO − TTFT is two reads apart, each one loopback delivery late on a client with a core to
spare; the median request's gap is held to the server's within TTFO_GAP_MS (bars.py says why the median)."""

import pytest
from bars import OPENLOOP_MS_ROUNDING, TTFO_GAP_MS

from infermatrix.testing import run_matrix, sim_server

pytestmark = pytest.mark.slow

REASONING = 40
CHAT = {"contexts": ["256"], "concurrency": [2], "duration_s": 1, "max_output": 64, "api": "chat", "prefill_contexts": []}


def _answer_emission(truth: dict, reasoning: int) -> float | None:
    """When the sim emitted the first answer token (its monotonic clock; None: no emission carried one)."""
    cum = 0
    for t, n in truth["emissions"]:
        cum += n
        if cum > reasoning:
            return float(t)
    return None


def test_ttfo_is_the_servers_reasoning_time_after_ttft_and_null_without_an_answer():
    load = [{"rate": 4, "duration_s": 2, "context": 256, "max_output": 64},  # answers after 40 reasoning tokens
            {"rate": 4, "duration_s": 1, "context": 256, "max_output": 16}]  # cut inside the reasoning: no answer
    with sim_server(reasoning_tokens=REASONING) as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix=CHAT, config={"load": load})
        truth = {r["request_id"]: r for r in sim.truth()["requests"]}
    assert result.status == "completed", result.error
    reqs = result.query("SELECT * FROM point_requests WHERE run_id = ? ORDER BY point, request_no", [result.run_id])
    answered = [r for r in reqs if r["point"] == 0]
    assert len(answered) >= 3 and all(r["outcome"] == "ok" and r["reasoning"] for r in answered)
    assert all(r["reasoning_tokens"] == REASONING for r in answered)  # the server's own count, as its usage said it
    off_ms = []
    for r in answered:
        t = truth[r["request_id"]]
        answer_at = _answer_emission(t, REASONING)
        assert answer_at is not None
        server = (answer_at - t["emissions"][0][0]) * 1000.0  # the server's time from its first emission to the answer's
        assert server > 0
        # Read after it was emitted, each of the two (stored to the µs: OPENLOOP_MS_ROUNDING).
        assert (r["scheduled"] - t["emissions"][0][0]) * 1000 + r["ttft_ms"] >= -OPENLOOP_MS_ROUNDING, (r["request_id"], t["emissions"][0])
        assert (r["scheduled"] - answer_at) * 1000 + r["ttfo_ms"] >= -OPENLOOP_MS_ROUNDING, (r["request_id"], answer_at)
        off_ms.append((r["ttfo_ms"] - r["ttft_ms"]) - server)
    median = sorted(off_ms)[(len(off_ms) + 1) // 2 - 1]  # nearest rank
    assert abs(median) < TTFO_GAP_MS, sorted(off_ms)
    cut = [r for r in reqs if r["point"] == 1]
    assert cut and all(r["reasoning"] and r["ttfo_ms"] is None and r["ttft_ms"] is not None for r in cut)
    assert all(r["reasoning_tokens"] == r["output_tokens"] == 16 for r in cut if r["outcome"] == "ok")  # all of it reasoning
    assert all(_answer_emission(truth[r["request_id"]], REASONING) is None for r in cut)  # the server sent no answer either
    # The decode cell's requests store it too, and latency_percentiles has the metric beside TTFT.
    cells = result.query("SELECT ttft_ms, ttfo_ms, reasoning FROM requests WHERE run_id = ? AND ttft_ms IS NOT NULL", [result.run_id])
    assert cells and all(c["reasoning"] and c["ttfo_ms"] > c["ttft_ms"] for c in cells if c["ttfo_ms"] is not None)
    pct = {r["metric"]: r for r in result.query("SELECT * FROM latency_percentiles WHERE run_id = ?", [result.run_id])}
    assert pct["ttfo"]["p50"] > pct["ttft"]["p50"]


def test_a_stream_without_reasoning_has_ttfo_equal_to_ttft():
    """The completions API has no reasoning field (the sim sends every token as `text`): the first token is the answer's."""
    load = [{"rate": 4, "duration_s": 1, "context": 256, "max_output": 16}]
    with sim_server(reasoning_tokens=REASONING) as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix={**CHAT, "api": "completions"}, config={"load": load})
    assert result.status == "completed", result.error
    reqs = result.query("SELECT ttft_ms, ttfo_ms, reasoning FROM point_requests WHERE run_id = ?", [result.run_id])
    reqs += result.query("SELECT ttft_ms, ttfo_ms, reasoning FROM requests WHERE run_id = ? AND ttft_ms IS NOT NULL", [result.run_id])
    assert reqs and all(r["ttfo_ms"] == r["ttft_ms"] and r["reasoning"] is False for r in reqs)
