"""The tuner on the sim, end to end through the real command line (issue 29 item 6, docs/tuning.md "The tuner"): it
finds the modelled optimum within its stated resolution, every probe is a stored run of the sweep whose engine ran
the setting, and a tune interrupted half-way is continued by `infermatrix resume SWEEP_ID` to the same answer.

The optimum is exact by the profile: under a batch cap m the sim runs at most m streams and the rest wait, so the
capacity objective (the largest load of the matrix meeting the SLO) is the largest load ≤ m that the model says
meets it, and it saturates once m reaches the largest such load — the smallest m there is the answer a tuner
preferring the smaller setting within noise must give (an integer axis: exactly, once the gap below it has no
integer left; that happens before the 25 % ratio does here).
"""

from __future__ import annotations

import json
import re
import signal

import pytest
from imxtest import processes_mentioning, run_cli
from reliability.rel_helpers import Cli
from sweep_helpers import rows

from infermatrix.plugins.sim.profile import load_profile

pytestmark = pytest.mark.slow

LOADS = (2, 6)
CONTEXT, MAX_OUTPUT, SLO_TTFT_MS, BUDGET = 1024, 128, 500, 8
CONFIG = f"""name = "tune"
[engine]
kind = "sim"
profile = "demo"
ready_timeout_s = 60
[matrix]
contexts = ["1K"]
prefill_contexts = []
concurrency = [{", ".join(map(str, LOADS))}]
duration_s = 1
max_output = {MAX_OUTPUT}
check_client = false
steady_timeout_s = 2  # over the cap a cell cannot reach N running: the sim says so at once, no need to wait the default 10 s
[validity]
min_active_fraction = 0.0
"""


def predicted_edge() -> int:
    """The smallest batch cap at which capacity saturates, by the demo profile's model. A load c meets the SLO when it
    fits the cap (c ≤ m), the KV cache (c × (context + output) ≤ kv_tokens), and its worst TTFT — every prompt of the
    cell prefilled one after another, then a step — is under the limit; above the cap a stream waits for a whole
    request, (output ÷ (1 + acceptance)) steps, over the limit (and the cell is admission_limited)."""
    p = load_profile("demo")
    meets = []
    for c in LOADS:
        worst_ttft = c * (p.prefill_base_ms + CONTEXT / p.prefill_tps * 1000) + p.step_ms(c, c * CONTEXT)
        if c * (CONTEXT + MAX_OUTPUT) <= p.kv_tokens and worst_ttft < SLO_TTFT_MS and c <= p.max_num_seqs:
            meets.append(c)
        wait = MAX_OUTPUT / (1 + p.acceptance) * p.step_ms(c - 1, (c - 1) * CONTEXT)
        assert wait > SLO_TTFT_MS, "a stream over the cap must miss the SLO, or the model does not separate the settings"
    return max(meets)


def test_the_tuner_finds_the_modelled_optimum_and_resume_continues_it(tmp_path):
    cfg = tmp_path / "tune.toml"
    cfg.write_text(CONFIG)
    db = tmp_path / "tune.duckdb"
    args = ("tune", str(cfg), "--over", "engine.args.max_num_seqs=1..16", "--slo", f"ttft_p99_ms={SLO_TTFT_MS}",
            "--objective", "capacity", "--budget-runs", str(BUDGET), "--db", str(db))  # fmt: skip
    first = Cli(*args, cwd=tmp_path)
    try:
        first.wait_stderr(r"tune probe 3 of ≤ 8[\s\S]*decode 1K × 2 ", timeout=240)
        first.signal(signal.SIGINT)
        assert first.wait(90) == 130, first.stderr[-3000:]
    finally:
        if first.proc.poll() is None:
            first.kill_tree()
    assert "ETA ≤" in first.stderr  # from the second probe on
    assert "tune probe 1 of ≤ 8 · engine.args.max_num_seqs=1, matrix.duration_s=0.5" in first.stderr
    (sweep_id,) = [r[0] for r in rows(db, "SELECT sweep_id FROM sweeps")]
    assert rows(db, "SELECT status FROM sweep_runs WHERE sweep_id = ? ORDER BY k", sweep_id) == [("completed",), ("completed",), ("interrupted",)]

    res = run_cli("resume", sweep_id, "--db", str(db), cwd=tmp_path, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    assert "2 probe(s) stored, 1 to finish; continuing the search" in res.stderr
    edge = predicted_edge()
    assert f"best: engine.args.max_num_seqs={edge} · capacity {edge} streams" in res.stdout, res.stdout
    assert re.search(rf"max_num_seqs={edge} lies between the probed {edge - 1} and \d+", res.stdout), res.stdout

    probes = rows(db, "SELECT run_id, setting, status FROM sweep_runs WHERE sweep_id = ? ORDER BY k", sweep_id)
    n = int(re.search(r"(\d+) run\(s\) \(engine relaunches\)", res.stdout).group(1))
    assert len(probes) == n <= BUDGET and {s for _, _, s in probes} == {"completed"}
    assert len({s for _, s, _ in probes}) == n  # each probe a setting and window of its own
    assert rows(db, "SELECT count(*) FROM runs") == [(n,)]  # the interrupted probe was finished under its id, not rerun
    windows = []
    for rid, setting, _ in probes:  # the engine itself ran the setting: its own /debug/profile, as stored
        (extra,) = rows(db, "SELECT engine_extra FROM runs WHERE run_id = ?", rid)[0]
        seqs = int(re.search(r"max_num_seqs=(\d+)", setting).group(1))
        assert json.loads(extra)["profile"]["max_num_seqs"] == seqs
        windows.append(float(re.search(r"duration_s=([\d.]+)", setting).group(1)))
    assert windows[:2] == [0.5, 0.5] and windows[-1] == 1.0  # short probes first, the full window last
    assert rows(db, "SELECT count(*) FROM best_setting WHERE sweep_id = ? AND objective = 'capacity'", sweep_id) == [(1,)]
    assert not processes_mentioning(str(tmp_path)), processes_mentioning(str(tmp_path))
