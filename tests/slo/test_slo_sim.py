"""SLOs, capacity, frontier and engine statistics end to end: the real command line runs the sim (a real
server process) into a real DuckDB file, and the views are checked against the stored request records
and against what the sim's profile and its own counters say (docs/slo.md)."""

from __future__ import annotations

import math

import pytest

from imxtest import run_cli
from infermatrix.core.store import Store
from infermatrix.plugins.sim.profile import load_profile
from test_slo_views import hand_judge, wilson

pytestmark = pytest.mark.slow  # real processes

# Known step times, no speculation (one token per step, so a request's TPOT is the step time): a TPOT limit
# of 20 ms holds up to N = 2 (9 ms) and fails from N = 4 (30 ms); 40 ms holds up to N = 4 and fails at 8 (45 ms).
# Each limit sits ~10 ms from the step it must pass: a client that reads its chunks late (a busy machine) can only
# lengthen a measured TPOT, and a 64-token request absorbs ~600 ms of such delay before a passing level fails.
# (Limits 4 ms from the step, 13 and 24 ms, read capacity 1 instead of 2 beside a CPU burner.)
STEPS = "[[1, 8.0], [2, 9.0], [4, 30.0], [8, 45.0], [16, 50.0]]"
TPOT_LIMIT_MS, REJUDGE_LIMIT_MS = 20.0, 40.0
PROFILE = f"""
name = "slo-steps"
model = "sim-slo"
max_model_len = 8192
kv_tokens = 262144
block_size = 16
max_num_seqs = 64
step_table = {STEPS}
step_per_1k_ctx_ms = 0.0
prefill_tps = 200000.0
prefill_base_ms = 1.0
prefix_cache_tokens = 262144
spec_tokens = 0
"""
LEVELS = (1, 2, 4, 8, 16)


def predicted_max(limit_ms: float, profile) -> int:
    """The largest concurrency whose modelled step (= TPOT) is within the limit."""
    return max(n for n in LEVELS if profile.step_ms(n, 0) <= limit_ms)


def rows_of(s: Store, sql: str, params: list) -> list[dict]:
    cols, rows = s.query(sql, params)
    return [dict(zip(cols, r)) for r in rows]


@pytest.fixture(scope="module")
def steps_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slo")
    prof = tmp / "slo-steps.toml"
    prof.write_text(PROFILE)
    cfg = tmp / "slo.toml"
    cfg.write_text(f"""
[engine]
kind = "sim"
profile = "{prof}"
[matrix]
contexts = ["1K"]
prefill_contexts = ["1K"]
concurrency = {list(LEVELS)}
duration_s = 4
max_output = 64
[slo]
ttft_p99_ms = 2000
tpot_p99_ms = {TPOT_LIMIT_MS:g}
""")
    db = tmp / "slo.duckdb"
    done = run_cli("run", str(cfg), "--db", str(db), "--gpu-hour-price", "2", timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SLO capacity" in done.stdout  # the run's own report shows its SLO
    return db, load_profile(str(prof))


def test_attainment_and_goodput_match_the_stored_records_and_meets_flips_where_the_profile_says(steps_run):
    db, profile = steps_run
    with Store(db, read_only=True) as s:
        rid = s.latest_run_id()
        slo = f"ttft_p99_ms=2000,tpot_p99_ms={TPOT_LIMIT_MS:g}"
        got = rows_of(s, "SELECT * FROM slo_cells WHERE run_id = ? AND slo = ? ORDER BY concurrency", [rid, slo])
        valid = [n for (n,) in s.query("SELECT concurrency FROM decode_matrix WHERE run_id = ? AND status = 'valid'", [rid])[1]]
        assert [g["concurrency"] for g in got] == sorted(valid) and len(valid) >= 4, "too few valid cells to judge"
        for g in got:
            n = g["concurrency"]
            (w0, w1, measured), = s.query("SELECT window_start, window_end, measured_s FROM cells WHERE run_id = ? AND concurrency = ?", [rid, n])[1]
            reqs = rows_of(s, "SELECT * FROM requests WHERE run_id = ? AND concurrency = ?", [rid, n])
            judged, good, tokens = hand_judge(reqs, 2000.0, TPOT_LIMIT_MS, w0, w1)
            assert judged > 0 and (g["judged_requests"], g["good_requests"]) == (judged, good)
            assert g["attainment"] == good / judged
            assert (g["attainment_lo"], g["attainment_hi"]) == pytest.approx(wilson(good, judged), abs=1e-12)
            assert g["request_goodput"] == pytest.approx(good / measured, abs=1e-12)
            assert g["token_goodput"] == pytest.approx(tokens / measured, abs=1e-12)
            assert g["meets"] is (n <= predicted_max(TPOT_LIMIT_MS, profile)), g
        cap = rows_of(s, "SELECT * FROM slo_capacity WHERE run_id = ? AND slo = ?", [rid, slo])
        assert [c["max_concurrency_meeting"] for c in cap] == [predicted_max(TPOT_LIMIT_MS, profile)] == [2]


def test_report_slo_rejudges_the_stored_run_without_running(steps_run, tmp_path):
    db, profile = steps_run
    with Store(db, read_only=True) as s:
        before = s.query("SELECT count(*), max(saved_at) FROM cells")[1]
    done = run_cli("report", "--db", str(db), "--slo", f"tpot_p99_ms={REJUDGE_LIMIT_MS:g}", "--format", "markdown")
    assert done.returncode == 0, done.stderr
    assert f"## SLO tpot_p99_ms={REJUDGE_LIMIT_MS:g}" in done.stdout
    with Store(db, read_only=True) as s:
        assert s.query("SELECT count(*), max(saved_at) FROM cells")[1] == before  # nothing was measured again
        cap = s.query("SELECT max_concurrency_meeting FROM slo_capacity WHERE slo = ?", [f"tpot_p99_ms={REJUDGE_LIMIT_MS:g}"])[1]
        assert cap == [(predicted_max(REJUDGE_LIMIT_MS, profile),)] == [(4,)]
        # the run's own SLO is still there, unchanged
        assert s.query("SELECT max_concurrency_meeting FROM slo_capacity WHERE slo = ?", [f"ttft_p99_ms=2000,tpot_p99_ms={TPOT_LIMIT_MS:g}"])[1] == [(2,)]
    bad = run_cli("report", "--db", str(db), "--slo", "tpot_p99=40")
    assert bad.returncode == 2 and "unknown limit" in bad.stderr and "Traceback" not in bad.stderr
    missing = tmp_path / "missing.duckdb"
    none = run_cli("report", "--db", str(missing), "--slo", "ttft_ms=5")
    assert none.returncode == 2 and "no database at" in none.stderr and not missing.exists()  # an SLO never creates a database


def test_frontier_and_cost_of_the_run(steps_run):
    db, _ = steps_run
    with Store(db, read_only=True) as s:
        front = rows_of(s, "SELECT f.*, d.total_tps FROM frontier f JOIN decode_matrix d USING (run_id, context_label, concurrency)", [])
        assert front and all(f["gpus"] == 1 and f["gpu_hour_usd"] == 2.0 for f in front)  # the sim's TP 1; --gpu-hour-price
        for f in front:
            assert f["usd_per_mtok"] == pytest.approx(2.0 / (f["total_tps"] * 3600 / 1e6))
            others = [o for o in front if o is not f]
            dominated = any(o["tps_per_gpu"] >= f["tps_per_gpu"] and o["tps_per_user"] >= f["tps_per_user"] for o in others)
            assert f["on_frontier"] is (not dominated)


def test_prefix_cache_hit_rate_warm_cells_and_cold_probes(steps_run):
    db, _ = steps_run
    with Store(db, read_only=True) as s:
        stats = rows_of(s, "SELECT * FROM cell_engine_stats", [])
    decode = [e for e in stats if e["phase"] == "decode" and e["status"] == "valid"]
    prefill = [e for e in stats if e["phase"] == "prefill"]
    assert decode and prefill
    assert all(e["prefix_cache_hit_rate"] >= 0.9 for e in decode), decode
    assert all(e["prefix_cache_queries"] > 0 and e["prefix_cache_hit_rate"] <= 0.02 for e in prefill), prefill
    # no speculative decoding in this profile: NULL, with the reason
    assert all(e["acceptance_rate"] is None and e["spec_note"] for e in decode)


def test_speculative_acceptance_matches_the_sim(sim_factory, tmp_path):
    prof = tmp_path / "spec.toml"
    prof.write_text('base = "demo"\nname = "spec3"\nspec_tokens = 3\nacceptance = 0.6\nreasoning_tokens = 0\n[loop]\nmin_context = 1000000\n')
    sim = sim_factory(str(prof))
    before = sim.truth()["counters"]
    db = tmp_path / "spec.duckdb"
    done = run_cli("run", "--engine", "sim", "--base-url", sim.base_url, "--model", "sim-demo", "--contexts", "1K",
                   "--concurrency", "24", "--duration", "8", "--max-output", "512", "--db", str(db))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    after = sim.truth()["counters"]
    drafts = after["spec_drafts"] - before["spec_drafts"]
    accepted = after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
    with Store(db, read_only=True) as s:
        (e,) = rows_of(s, "SELECT * FROM cell_engine_stats WHERE phase = 'decode'", [])
    assert e["spec_drafts"] > 5000, e  # enough drafts for a 2 % check (about 4 standard errors)
    assert e["acceptance_rate"] == pytest.approx(0.6, rel=0.02)
    # what the sim's own counters over the run imply (the run's warm-ups draft nothing)
    assert e["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts, rel=0.02)
    c = load_profile(str(prof)).acceptance_per_step()
    per_pos = e["acceptance_per_position"]
    assert len(per_pos) == 3 and all(math.isclose(p, c ** (i + 1), rel_tol=0.05) for i, p in enumerate(per_pos)), per_pos
