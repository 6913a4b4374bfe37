"""Validity rules stored per cell: a cell that misses one is an error with the reason, never a clean
number; and ``--no-loop-detection`` keeps a looping engine's cells from being judged looped."""

from __future__ import annotations

import pytest
import json

from rel_helpers import assert_nothing_left, cells, query, run_cli, run_row, sim_config, write_profile

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI



def test_missed_rule_is_an_error_and_loop_detection_can_be_off(tmp_path):
    # Every request loops after 8 tokens; the window can't reach a billion tokens.
    profile = write_profile(tmp_path / "loopy.json", loop={"min_context": 512, "min_running": 1, "after_tokens": 8, "period_tokens": 4})
    db = tmp_path / "r.duckdb"
    cfg = sim_config(tmp_path, profile, concurrency=[1], max_output=128)
    proc = run_cli("run", str(cfg), "--db", str(db), "--no-loop-detection", "--set", "validity.min_output_tokens=1000000000", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cell = cells(db)[(1024, 1)]
    validity = cell["flags"]["validity"]
    assert cell["status"] == "error"
    assert cell["reason"].startswith("invalid measurement: output_tokens")
    assert validity["ok"] is False
    assert validity["checks"]["output_tokens"] == {"value": cell["output_tokens"], "min": 1000000000, "ok": False}
    assert all(c["ok"] for name, c in validity["checks"].items() if name != "output_tokens")
    assert cell["total_tps"] > 0  # measured and kept as evidence ...
    assert query(db, "SELECT status, total_tps FROM decode_matrix") == [("error", None)]  # ... never shown as a number

    # Loop detection was off: nothing flagged, and the stored config says so.
    assert cell["flags"]["looped_requests"] == 0
    assert json.loads(run_row(db)["config"])["loops"]["enabled"] is False
    # The same run with detection on: the cell is looped (so it was the flag that kept it clean).
    db2 = tmp_path / "on.duckdb"
    proc = run_cli("run", str(cfg), "--db", str(db2), "--set", "matrix.duration_s=0.5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert cells(db2)[(1024, 1)]["status"] == "looped"
    assert_nothing_left(tmp_path)
