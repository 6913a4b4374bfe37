"""Interference points against the sim's chunked-prefill model (docs/sim.md, "Chunked prefill"; docs/load.md,
"Interference"). The model is computed here from the profile, without running: with ``max_num_batched_tokens`` = B and
d decoders running, a prompt of P uncached tokens is computed in chunks of B − d tokens (the last one what is left),
one per step, and each such step lasts ``step_base_ms + step_per_seq_ms·d + prefill_base_ms + 1000·chunk/prefill_tps``.
The sim's record (``/debug/truth``: each step's planned time, batch and prefill tokens; each request's receipt, prefill
span and emissions) must follow the model, and the point's stored figures the record; a small budget must stall the
decoders less per gap and make the prompt's TTFT longer than a large one."""

import pytest
from truthlib import median_range, receipt_ttft_ms
from bars import INTERFERENCE_GAP_MS, INTERFERENCE_TTFT_MS

from infermatrix.testing import run_matrix, sim_server

# solo: the bars hold the sim to its step clock and the client to one loopback delivery; a neighbour test on the same two
# cores makes both late by tens of ms (seen: 44 ms of step lateness with a sim suite beside it; tests/solo.py)
pytestmark = [pytest.mark.slow, pytest.mark.solo]

# The experiment's inputs: a sim without speculation or jitter, 40 ms decode steps, 80 µs per prefill token (long beside a busy host's hiccups).
PROFILE = {"spec_tokens": 0, "step_base_ms": 40.0, "step_per_seq_ms": 0.0, "step_per_1k_ctx_ms": 0.0, "step_jitter": 0.0,
           "prefill_tps": 12_500.0, "prefill_base_ms": 1.0, "prefill_attn_ms": 0.0, "max_num_seqs": 8}  # fmt: skip
STREAMS, DECODE_CTX, PREFILL_CTX = 4, 256, 3000
POINT = {"kind": "mixed", "decode_streams": STREAMS, "decode_context": DECODE_CTX, "prefill_context": PREFILL_CTX, "prefills": 3,
         "decode_max_output": 1024, "warmup_s": 0.3, "window_s": 1.0, "gap_s": 0.1}  # fmt: skip
MATRIX = {"contexts": [], "prefill_contexts": [256], "prefill_samples": 1}
CONTRACT = ["run_id", "point", "decode_streams", "prefill_context", "tbt_alone_ms", "tbt_during_ms", "tbt_p99_during_ms",
            "stall_max_ms", "prefill_ttft_ms", "prefill_ttft_alone_ms"]  # fmt: skip


def plain_ms(decoders: int) -> float:
    return PROFILE["step_base_ms"] + PROFILE["step_per_seq_ms"] * decoders


def chunk_steps(budget: int, prompt: int, decoders: int) -> list[tuple[int, float]]:
    """The model: (prefill tokens, ms) of each step that computes a prompt of ``prompt`` uncached tokens."""
    size = budget - decoders
    chunks = [size] * (prompt // size) + ([prompt % size] if prompt % size else [])
    decode = plain_ms(decoders) if decoders else 0.0
    return [(n, decode + PROFILE["prefill_base_ms"] + 1000 * n / PROFILE["prefill_tps"]) for n in chunks]


def _gaps_during(emissions: list[list[float]], intervals: list[tuple[float, float]]) -> list[float]:
    ts = [t for t, _n in emissions]
    return [(b - a) * 1000 for a, b in zip(ts, ts[1:]) if any(b > s and a < f for s, f in intervals)]


def _median(xs: list[float]) -> float:
    return sorted(xs)[(len(xs) + 1) // 2 - 1]  # nearest rank, as docs/metrics.md


def measure(budget: int) -> tuple[dict, dict]:
    with sim_server(**PROFILE, max_num_batched_tokens=budget) as sim:
        result = run_matrix({"kind": "sim", "base_url": sim.base_url}, matrix=MATRIX, config={"load": [POINT]})
        truth = sim.truth()
    assert result.status == "completed", result.error
    (row,) = result.query("SELECT * FROM interference WHERE run_id = ?", [result.run_id])
    assert list(row)[: len(CONTRACT)] == CONTRACT
    assert row["status"] == "valid", row["reason"]
    return row, truth


def check_against_the_model(budget: int, row: dict, truth: dict) -> None:
    reqs = {r["request_id"].rsplit("-", 1)[-1]: r for r in truth["requests"] if "-mixed-0-" in (r["request_id"] or "")}
    prefills = [reqs[f"p{i}"] for i in range(POINT["prefills"])]
    # How late the sim's steps ended while a prompt was in the engine (its own record): what a step's duration may
    # differ from the model by. Beyond one plain step the host was too busy for the bars below to mean anything.
    spans = [(p["received"], p["finished"]) for p in [*prefills, reqs["alone"]]]
    lag_ms = max(s["lag_s"] for s in truth["steps"] if any(s["t_start"] + s["duration_s"] >= a and s["t_start"] <= b for a, b in spans)) * 1000
    assert lag_ms < plain_ms(STREAMS), f"the sim's steps ran {lag_ms:.1f} ms late: the host was too busy to judge"
    for p, decoders in [*((p, STREAMS) for p in prefills), (reqs["alone"], 0)]:
        assert p["cached_tokens"] == 0  # a prompt of its own: nothing from the prefix cache
        model = chunk_steps(budget, p["prompt_tokens"], decoders)
        steps = [s for s in truth["steps"] if p["prefill_start"] <= s["t_start"] < p["prefill_end"]]
        # The record follows the model step for step: the chunks, the decoders beside them, the planned time.
        assert [s["prefill_tokens"] for s in steps] == [n for n, _ in model]
        assert all(s["batch_size"] == decoders for s in steps)
        assert [round(s["planned_s"] * 1000, 6) for s in steps] == [round(ms, 6) for _, ms in model]  # to the ns: float sums
        # The prompt waited at most for the step under way when it arrived, then ran its chunk steps.
        wait_ms = (p["prefill_start"] - p["received"]) * 1000
        assert -lag_ms <= wait_ms <= (plain_ms(decoders) if decoders else 0) + lag_ms + INTERFERENCE_GAP_MS, wait_ms
        assert p["first_token"] == p["prefill_end"]  # the last chunk's step emits the first token
    # The stored stall: the decoders' longest gap overlapping a prompt's time in the engine, against the server's own
    # emission stamps (one loopback delivery apart) and against the model's longest chunk step (the record's lateness).
    intervals = [(p["received"], p["first_token"]) for p in prefills]
    server = [g for i in range(STREAMS) for g in _gaps_during(reqs[f"d{i}"]["emissions"], intervals)]
    stall_model = max(ms for _, ms in chunk_steps(budget, max(p["prompt_tokens"] for p in prefills), STREAMS))
    assert abs(row["stall_max_ms"] - max(server)) <= INTERFERENCE_GAP_MS, (row["stall_max_ms"], max(server))
    assert abs(max(server) - stall_model) <= lag_ms, (max(server), stall_model)
    assert abs(row["tbt_during_ms"] - _median(server)) <= INTERFERENCE_GAP_MS, (row["tbt_during_ms"], _median(server))
    assert abs(row["tbt_alone_ms"] - plain_ms(STREAMS)) <= lag_ms + INTERFERENCE_GAP_MS, row["tbt_alone_ms"]
    # TTFTs: the client's from its send, the server's from reading the body (a loopback delivery at each end), as a
    # range that holds the sim's own lateness at the receipt (truthlib.receipt_ttft_ms).
    lo, hi = median_range([receipt_ttft_ms(p) for p in prefills])
    assert lo - INTERFERENCE_TTFT_MS <= row["prefill_ttft_ms"] <= hi + INTERFERENCE_TTFT_MS, (row["prefill_ttft_ms"], lo, hi)
    lo, hi = receipt_ttft_ms(reqs["alone"])
    assert lo - INTERFERENCE_TTFT_MS <= row["prefill_ttft_alone_ms"] <= hi + INTERFERENCE_TTFT_MS, (row["prefill_ttft_alone_ms"], lo, hi)


def test_the_stall_follows_the_chunked_prefill_model_and_a_smaller_budget_trades_ttft_for_it():
    small, small_truth = measure(256)
    large, large_truth = measure(4096)
    check_against_the_model(256, small, small_truth)
    check_against_the_model(4096, large, large_truth)
    assert small["stall_max_ms"] < large["stall_max_ms"]  # smaller chunks: shorter gaps for the decoders ...
    assert small["prefill_ttft_ms"] > large["prefill_ttft_ms"]  # ... and more steps for the prompt
    assert small["tbt_during_ms"] > small["tbt_alone_ms"]  # a prompt in the engine slows every gap it overlaps
