"""A real settings grid on vLLM (CPU) (issue 29 item 7, docs/tuning.md): ``max_num_seqs`` × ``max_num_batched_tokens``,
2 × 2, each combination its own vLLM launch through the real ``infermatrix sweep`` command line, ending in
``best_setting`` rows.

What is checked against the engine rather than against infermatrix's own arithmetic:

- each run's vLLM said, in its own log, that it ran the combination (its ``non-default args`` line and its
  scheduler's ``Chunked prefill is enabled with max_num_batched_tokens=…``);
- a batch cap of 1 runs one stream: its larger cells are planned over capacity from the engine's own limit, and the
  capacity winner is a run with ``max_num_seqs=4`` whose winning cell vLLM's own running gauge saw at that load
  (``cells.flags.admission.ran_at_most``, read from ``vllm:num_requests_running``).

About 4 launches of ~50 s each on two cores: the suite's longest single test after the shared vLLM run.
"""

from __future__ import annotations

import json
import re
import secrets

import duckdb
import pytest
from vllm_helpers import KEY_VAR, TINY_CONFIG, cli, launch_args, processes_using

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1800)]

SEQS, BUDGETS = (1, 4), (512, 4096)
GRID = ("--grid", f"engine.args.max_num_seqs={SEQS[0]},{SEQS[1]}",
        "--grid", f"engine.args.max_num_batched_tokens={BUDGETS[0]},{BUDGETS[1]}")  # fmt: skip
# One 1K context (a 1K prompt is two chunks at a 512-token budget, one at 4,096), three loads, 2 s windows. Outputs of
# 384 tokens keep each stream in the engine long enough for the running gauge to see the load; 4 x (1K + 384) fits
# the tiny config's 6,144 KV tokens. A GPU count of 1 so the per-GPU objective has a denominator on a CPU.
MATRIX = ("--set", 'matrix.contexts=["1K"]', "--set", "matrix.prefill_contexts=[]", "--set", "matrix.concurrency=[1,2,4]",
          "--set", "matrix.duration_s=2", "--set", "matrix.max_output=384", "--set", "matrix.check_client=false",
          "--set", "hardware.gpus=1")  # fmt: skip
SLO = "ttft_p99_ms=10000"  # generous: on two shared cores the question is the batch cap, not the latency


def q(db, sql: str, *params):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def test_a_2x2_grid_on_vllm_ends_in_best_setting_rows_the_engine_confirms(vllm_python, tiny_model, tmp_path):
    db = tmp_path / "grid.duckdb"
    key = "imx-" + secrets.token_hex(12)
    res = cli("sweep", str(TINY_CONFIG), *GRID, "--slo", SLO, *launch_args(vllm_python, tiny_model, *MATRIX), "--db", str(db),
              env={KEY_VAR: key}, timeout=1500, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    assert processes_using(str(tiny_model)) == []  # every vLLM of the grid shut down
    runs = q(db, "SELECT run_id, setting, status FROM sweep_runs ORDER BY k")
    want = [f"engine.args.max_num_seqs={s}, engine.args.max_num_batched_tokens={b}" for s in SEQS for b in BUDGETS]
    assert [(s, st) for _, s, st in runs] == [(w, "completed") for w in want], runs
    for (rid, _, _), (seqs, budget) in zip(runs, [(s, b) for s in SEQS for b in BUDGETS]):
        log = (db.with_name(db.stem + ".runs") / rid / "vllm.log").read_text(errors="replace")
        args = re.search(r"non-default args: (\{.*\})", log)
        assert args and f"'max_num_seqs': {seqs}" in args.group(1) and f"'max_num_batched_tokens': {budget}" in args.group(1), rid
        assert f"max_num_batched_tokens={budget}" in log, rid  # the scheduler's own line: chunked prefill at this budget
        assert key not in log and key not in json.dumps(q(db, "SELECT config FROM runs WHERE run_id = ?", rid))
        over = q(db, "SELECT concurrency FROM cells WHERE run_id = ? AND status = 'over_capacity' ORDER BY 1", rid)
        assert [n for (n,) in over] == ([2, 4] if seqs == 1 else []), (rid, over)  # a cap of 1 seats one stream
    (sweep_id,) = q(db, "SELECT DISTINCT sweep_id FROM sweep_runs")[0]
    best = {r[0]: r[1:] for r in q(db, "SELECT objective, run_id, setting, value, concurrency, runner_up_setting FROM best_setting "
                                        "WHERE sweep_id = ? AND slo = ? AND context_label = '1K'", sweep_id, SLO)}  # fmt: skip
    assert set(best) == {"capacity", "goodput"}, best
    run_id, setting, value, n, runner_up = best["capacity"]
    assert setting.startswith(f"engine.args.max_num_seqs={SEQS[1]},") and value == n >= 2 and runner_up, best
    (flags,) = q(db, "SELECT flags FROM cells WHERE run_id = ? AND concurrency = ?", run_id, n)[0]
    assert json.loads(flags)["admission"]["ran_at_most"] >= n  # vLLM's own running gauge saw the winning load
    assert best["goodput"][2] > 0 and best["goodput"][4], best  # a value and a runner-up: a choice was made
    assert f"infermatrix resume {sweep_id}" in res.stdout and "best setting" in res.stdout
