"""Harness overhead (issue 10, item 6): a small sim matrix through the real command line into a real DuckDB
file. The run's phase totals cover its wall time; no text is tokenized twice (the sim counts /tokenize calls
server-side); prompts still warm are not warmed again."""

from __future__ import annotations

import json

import duckdb
import httpx
import pytest
from bars import PHASE_STAMPS_S, PHASES_VS_WALL, PHASES_VS_WALL_S
from imxtest import run_cli

from infermatrix.core.prompt_builder import MAX_PAD_CALLS, MAX_SEARCH_CALLS

pytestmark = pytest.mark.slow  # starts a sim server and runs the CLI

PREFILL_SAMPLES = 2
DURATION_S = 1  # each cell's window (an input)


def test_phase_seconds_cover_the_run_and_prompts_are_tokenized_once(sim_factory, tmp_path):
    server = sim_factory("tiny")  # KV 20,000 tokens, known from its /metrics: reuse can be judged
    db = tmp_path / "o.duckdb"
    proc = run_cli(
        "run", "--engine", "sim", "--base-url", server.base_url, "--contexts", "512,1K", "--concurrency", "1,2,3",
        "--prefill-contexts", "1K", "--duration", str(DURATION_S), "--max-output", "64", "--db", str(db),
        "--set", "matrix.check_client=false", "--set", f"matrix.prefill_samples={PREFILL_SAMPLES}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with duckdb.connect(str(db), read_only=True) as con:
        phases, wall = con.execute("SELECT phase_seconds, epoch(finished_at) - epoch(started_at) FROM runs").fetchone()
        cells = con.execute("SELECT context_tokens, concurrency, status, flags, window_end - window_start FROM cells ORDER BY 1, 2").fetchall()
    phases = json.loads(phases)

    # Every second of the run is somewhere, and somewhere named (the clock starts just before the run's row is
    # created and stops just before finished_at is written: a few ms apart).
    assert "other" not in phases, phases
    assert sum(phases.values()) == pytest.approx(wall, abs=PHASES_VS_WALL_S + PHASES_VS_WALL * wall), (phases, wall)
    assert len(cells) == 6 and all(s == "valid" for _, _, s, _, _ in cells), cells
    # Each cell's measure phase is its window, by the cell's own stamps (window_start / window_end on the same
    # clock), not by how long a sleep happened to take on a loaded machine; a window is never shorter than asked.
    for ctx, n, _, flags, window_s in cells:
        share = json.loads(flags)["phases_s"]
        assert abs(share["measure"] - window_s) <= PHASE_STAMPS_S and window_s >= DURATION_S, (ctx, n, share, window_s)
        assert {"prompts", "warm-up", "ramp", "drain", "verdict"} <= set(share), (ctx, n, share)
    # The run's measure total is its cells' windows, every one of them.
    cell_measure = [json.loads(f)["phases_s"]["measure"] for *_, f, _ in cells]
    assert phases["measure"] == pytest.approx(sum(cell_measure), abs=PHASE_STAMPS_S), (phases, cell_measure)

    # Server-side: no prompt text counted twice (the decode prompts of (context, stream) are built once and
    # reused by later cells), and the calls are the distinct prompts plus each length's search.
    counted = httpx.get(f"{server.base_url}/debug/tokenize", timeout=10).json()
    prompt = counted["prompt"]
    assert prompt["most_per_text"] == 1 and prompt["calls"] == prompt["distinct_texts"], prompt
    decode_prompts = 2 * 3  # (context, stream) for streams 0..2 at two lengths
    probes = PREFILL_SAMPLES + 1
    search = 1 + 3 * (MAX_SEARCH_CALLS + MAX_PAD_CALLS)  # calibration, then three lengths (512, 1K, and the probes' 1K is the same)
    assert decode_prompts + probes <= prompt["calls"] <= decode_prompts + probes + search + 1, prompt  # +1: the tokenizer check
    assert counted["output"]["most_per_text"] == 1, counted["output"]

    # Warm-ups only for prompts not still warm: each (context, stream) prompt is warmed once in the run.
    truth = server.truth()
    warm = [r["request_id"] for r in truth["requests"] if "-warm-" in (r.get("request_id") or "")]
    assert len(warm) == decode_prompts, warm
    plans = {(c, n): json.loads(f)["warmup_plan"] for c, n, _, f, _ in cells}
    assert plans[(1024, 3)]["warmed"] == 1 and plans[(1024, 3)]["still_warm"] == 2, plans
