"""A settings grid on the sim, end to end through the real command line (issue 29, docs/tuning.md):

- the done-when bar: `sweep configs/demo-sim.toml --grid engine.args.max_num_seqs=2,16 --slo ttft_p99_ms=200` gives two
  runs and a best_setting row per context that picks the setting the demo profile's own model predicts (computed here
  from the profile, not from the run), and sweep_frontier marks exactly the undominated cells;
- each run knows its setting, and the engine itself reports running it (the sim's /debug/profile, stored);
- a combination the engine refuses is a failed run with the engine's own words, the sweep goes on; `resume SWEEP_ID`
  runs only what is missing or failed.
"""

from __future__ import annotations

import json
import signal
from html import unescape

import pytest
from imxtest import ROOT, processes_mentioning, run_cli
from reliability.rel_helpers import Cli
from sweep_helpers import rows, sim_config

from infermatrix.plugins.sim.profile import load_profile

pytestmark = pytest.mark.slow

# A cap of 2 leaves the 4- and 8-stream cells admission_limited: the sim's running gauge says so at its first read, and
# the default 10 s wait for a steady state it cannot reach is the test's longest part (4 cells x 10 s): 2 s is plenty.
MATRIX = ['--set', 'matrix.contexts=["1K","4K"]', "--set", "matrix.prefill_contexts=[]", "--set", "matrix.concurrency=[1,2,4,8]",
          "--set", "matrix.duration_s=2", "--set", "matrix.check_client=false", "--set", "matrix.steady_timeout_s=2"]  # fmt: skip
SEQS = (2, 16)
SLO_TTFT_MS = 200


def predicted(seqs: int, context: int) -> tuple[float, int]:
    """(tok/s, streams) at the best load meeting the SLO, by the demo profile's model: a cell of N streams runs when
    N fits the batch cap and the KV cache (more would wait: TTFT a whole request, far over 200 ms, or admission_limited);
    it then makes N x (1 + acceptance) tokens per step of step_ms(N, N x context). The largest such N is the answer."""
    p = load_profile("demo")
    out = 256  # demo-sim.toml's max_output
    fits = [n for n in (1, 2, 4, 8) if n <= seqs and n * (context + out) <= p.kv_tokens]
    rate = {n: n * (1 + p.acceptance) / (p.step_ms(n, n * context) / 1000) for n in fits}
    best = max(rate, key=rate.__getitem__)
    return rate[best], max(fits)


def test_the_best_setting_is_the_one_the_sims_model_predicts(tmp_path):
    db = tmp_path / "grid.duckdb"
    res = run_cli("sweep", str(ROOT / "configs/demo-sim.toml"), "--grid", "engine.args.max_num_seqs=2,16",
                  "--slo", f"ttft_p99_ms={SLO_TTFT_MS}", *MATRIX, "--db", str(db), cwd=tmp_path, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    assert "sweep 1/2 · engine.args.max_num_seqs=2" in res.stderr and "sweep 2/2 · engine.args.max_num_seqs=16" in res.stderr
    assert "ETA" in res.stderr  # after the first combination
    (sweep_id,) = [r[0] for r in rows(db, "SELECT sweep_id FROM sweeps")]
    runs = rows(db, "SELECT run_id, setting, status FROM sweep_runs WHERE sweep_id = ? ORDER BY k", sweep_id)
    assert [(s, st) for _, s, st in runs] == [(f"engine.args.max_num_seqs={n}", "completed") for n in SEQS]
    for (rid, _, _), n in zip(runs, SEQS):  # the engine itself ran the setting: its own /debug/profile, as stored
        (extra,) = rows(db, "SELECT engine_extra FROM runs WHERE run_id = ?", rid)[0]
        assert json.loads(extra)["profile"]["max_num_seqs"] == n
        assert rows(db, "SELECT key, value FROM run_settings WHERE run_id = ?", rid) == [("engine.args.max_num_seqs", str(n))]
    slo = f"ttft_p99_ms={SLO_TTFT_MS}"
    for label, context in (("1K", 1024), ("4K", 4096)):
        model = {n: predicted(n, context) for n in SEQS}
        want = max(SEQS, key=lambda n: model[n][0])
        best = dict(zip(("setting", "runner_up", "beyond", "value"), rows(
            db, "SELECT setting, runner_up_setting, beyond_noise, value FROM best_setting WHERE sweep_id = ? AND slo = ? "
            "AND context_label = ? AND objective = 'goodput'", sweep_id, slo, label)[0]))  # fmt: skip
        assert best["setting"] == f"engine.args.max_num_seqs={want}", (label, model, best)
        assert best["beyond"] is True, best  # the model's margin is 3x: far beyond a 2 s window's noise
        (capacity,) = rows(db, "SELECT setting, value FROM best_setting WHERE sweep_id = ? AND slo = ? AND context_label = ? "
                           "AND objective = 'capacity'", sweep_id, slo, label)  # fmt: skip
        assert capacity == (f"engine.args.max_num_seqs={want}", float(model[want][1])), (label, capacity, model)
    pts = rows(db, "SELECT context_label, tps_per_gpu, tps_per_user, on_frontier FROM sweep_frontier WHERE sweep_id = ?", sweep_id)
    assert len({(c, g, u) for c, g, u, _ in pts}) == len(pts) and len(pts) >= 8
    for c, g, u, on in pts:
        dominated = any(c2 == c and g2 >= g and u2 >= u and (g2 > g or u2 > u) for c2, g2, u2, _ in pts)
        assert on is (not dominated), (c, g, u, on)
    assert "best setting" in res.stdout and f"infermatrix resume {sweep_id}" in res.stdout
    assert f"infermatrix report --sweep {sweep_id}" in res.stdout  # where to read the whole answer


def test_a_refused_combination_is_a_failed_run_and_resume_runs_only_what_is_missing_or_failed(tmp_path):
    db = tmp_path / "f.duckdb"
    cfg = sim_config(tmp_path / "a.toml", "a", [1, 2, 4, 8], duration_s=2.0)
    # 100 blocks x 16 = 1,600 tokens cannot hold one 4,096-token request: the sim refuses to start, as vLLM does
    sweep = Cli("sweep", str(cfg), "--grid", "engine.args.num_gpu_blocks_override=100,1250,1000", "--db", str(db), cwd=tmp_path)
    try:
        sweep.wait_stderr(r"sweep 3/3[\s\S]*decode 1K × 1 ", timeout=180)
        sweep.signal(signal.SIGINT)
        assert sweep.wait(90) == 130, sweep.stderr[-3000:]
    finally:
        if sweep.proc.poll() is None:
            sweep.kill_tree()
    (sweep_id,) = [r[0] for r in rows(db, "SELECT sweep_id FROM sweeps")]
    got = rows(db, "SELECT setting, status, reason FROM sweep_runs WHERE sweep_id = ? ORDER BY k", sweep_id)
    assert [(s.split("=")[1], st) for s, st, _ in got] == [("100", "failed"), ("1250", "completed"), ("1000", "interrupted")], got
    reason = got[0][2]
    assert "before it was ready" in reason and "kv_tokens must hold at least one max_model_len request" in reason, reason
    assert "\n" not in reason
    page = run_cli("report", "--sweep", sweep_id, "--format", "markdown", "--db", str(db), cwd=tmp_path)  # its report says why
    assert page.returncode == 0, page.stderr[-2000:]
    (first,) = rows(db, "SELECT run_id FROM sweep_runs WHERE sweep_id = ? AND k = 1", sweep_id)
    assert f"- engine.args.num_gpu_blocks_override=100 (run {first[0]}): failed — {reason}" in unescape(page.stdout.replace("\\", ""))
    done_at = rows(db, "SELECT run_id, finished_at FROM runs WHERE status = 'completed'")
    res = run_cli("resume", sweep_id, "--db", str(db), cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stderr[-3000:]  # the refused one is refused again
    assert "2 of 3 run(s) to finish" in res.stderr and "sweep 1/2 · engine.args.num_gpu_blocks_override=100" in res.stderr
    assert "sweep 2/2 · engine.args.num_gpu_blocks_override=1000 → resume run" in res.stderr
    after = rows(db, "SELECT status FROM sweep_runs WHERE sweep_id = ? ORDER BY k", sweep_id)
    assert after == [("failed",), ("completed",), ("completed",)]
    assert set(done_at) <= set(rows(db, "SELECT run_id, finished_at FROM runs WHERE status = 'completed'"))  # not run again
    assert rows(db, "SELECT count(*) FROM runs") == [(3,)]  # no new run: each combination keeps its id
    assert not processes_mentioning(str(tmp_path)), processes_mentioning(str(tmp_path))
