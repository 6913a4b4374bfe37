"""A real settings grid on llama.cpp (CPU) (issue 29 item 7, docs/tuning.md): ``parallel`` (-np, the server's slots)
1 and 4, each its own llama-server launch through the real ``infermatrix sweep`` command line, ending in
``best_setting`` rows. Checked against the server: each run's llama-server reported the slots it was given (its
``/props`` ``total_slots``, stored in ``runs.engine_extra``); one slot plans the larger cells over capacity; the capacity
winner is the 4-slot run, at a load llama.cpp's own busy-slot gauge saw (``cells.flags.admission.ran_at_most``).
"""

from __future__ import annotations

import json

import duckdb
import pytest
from llamacpp_helpers import TINY_CONFIG, cli, launch_args, processes_using

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow, pytest.mark.timeout(600)]

SLOTS = (1, 4)
MATRIX = ("--set", "matrix.contexts=[256]", "--set", "matrix.prefill_contexts=[]", "--set", "matrix.concurrency=[1,2,4]",
          "--set", "matrix.duration_s=2", "--set", "matrix.check_client=false", "--set", "hardware.gpus=1")  # fmt: skip
SLO = "ttft_p99_ms=10000"


def test_a_parallel_grid_on_llamacpp_ends_in_best_setting_rows_the_server_confirms(llama_server, tiny_gguf, tmp_path):
    db = tmp_path / "grid.duckdb"
    res = cli("sweep", str(TINY_CONFIG), "--grid", f"engine.args.parallel={SLOTS[0]},{SLOTS[1]}", "--slo", SLO,
              *launch_args(llama_server, tiny_gguf, *MATRIX), "--db", str(db), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    assert processes_using(str(tiny_gguf)) == []
    con = duckdb.connect(str(db), read_only=True)
    runs = con.execute("SELECT s.run_id, s.setting, s.status, r.engine_extra FROM sweep_runs s JOIN runs r USING (run_id) ORDER BY k").fetchall()
    assert [(s, st) for _, s, st, _ in runs] == [(f"engine.args.parallel={n}", "completed") for n in SLOTS], runs
    for (rid, _, _, extra), n in zip(runs, SLOTS):
        assert json.loads(extra)["total_slots"] == n, rid  # the server's own /props
        over = con.execute("SELECT concurrency FROM cells WHERE run_id = ? AND status = 'over_capacity' ORDER BY 1", [rid]).fetchall()
        assert [c for (c,) in over] == ([2, 4] if n == 1 else []), (rid, over)
    best = {r[0]: r[1:] for r in con.execute(
        "SELECT objective, run_id, setting, value, concurrency, runner_up_setting FROM best_setting WHERE slo = ? AND context_label = '256'",
        [SLO]).fetchall()}  # fmt: skip
    assert set(best) == {"capacity", "goodput"}, best
    run_id, setting, value, n, runner_up = best["capacity"]
    assert setting == f"engine.args.parallel={SLOTS[1]}" and value == n >= 2 and runner_up == f"engine.args.parallel={SLOTS[0]}", best
    (flags,) = con.execute("SELECT flags FROM cells WHERE run_id = ? AND concurrency = ?", [run_id, n]).fetchone()
    assert json.loads(flags)["admission"]["ran_at_most"] >= n  # llama.cpp's own gauge saw the winning load
    assert best["goodput"][2] > 0 and best["goodput"][4], best
    con.close()
