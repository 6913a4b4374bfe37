"""`infermatrix tune` bad input (issue 29 item 6, docs/tuning.md "The tuner"): an unknown key, an empty or reversed
range, a key that is not numeric, a budget under 1, a value the config model refuses, the tuner's own window key, a
context not in the matrix — one line, exit 2, before any engine starts (nothing is created: not even the database).

Fast: the command runs in-process (click's runner) and starts nothing."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sweep_helpers import sim_config

from infermatrix.cli import _add_builtin_commands, cli


@pytest.mark.parametrize("args, message", [
    (["--over", "engine.args.nope=1..4"], "engine.args.nope=1: engine.args.nope: unknown field"),
    (["--over", "engine.args.max_num_seqs=8..8"], "an empty or reversed range (8..8)"),
    (["--over", "engine.args.max_num_seqs=64..8"], "an empty or reversed range (64..8)"),
    (["--over", "engine.args.max_num_seqs=8"], "expected KEY=LO..HI"),
    (["--over", "matrix.check_client=1..4"], "--over matrix.check_client: not a numeric setting"),
    (["--over", "validity.min_window_fraction=0.5..2.0"], "validity.min_window_fraction=2.0: validity.min_window_fraction: Input should be less than or equal to 1"),
    (["--over", "matrix.duration_s=1..4"], "the tuner sets each probe's window itself"),
    (["--over", "engine.args.max_num_seqs=1..4", "--over", "engine.args.max_num_seqs=2..8"], "given twice"),
    (["--over", "engine.args.max_num_seqs=1..4", "--budget-runs", "0"], "--budget-runs 0: must be at least 1"),
    (["--over", "engine.args.max_num_seqs=1..4", "--context", "4K"], "--context 4K: not a decode context of the matrix (1K)"),
    (["--over", "engine.args.max_num_seqs=1..4", "--resolution", "2"], "--resolution 2: give a share, e.g. 25%"),
    ([], "--over: give at least one range to search"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2_before_anything_starts(tmp_path, args, message):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    db = tmp_path / "t.duckdb"
    _add_builtin_commands()
    result = CliRunner().invoke(cli, ["tune", str(cfg), "--slo", "ttft_p99_ms=200", *args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not db.exists()  # nothing opened, nothing run


def test_a_config_with_a_sweep_grid_is_refused(tmp_path):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    cfg.write_text(cfg.read_text() + '[sweep]\ngrid = { "engine.args.max_num_seqs" = [4, 8] }\n')
    _add_builtin_commands()
    result = CliRunner().invoke(cli, ["tune", str(cfg), "--over", "engine.args.max_num_seqs=1..4", "--slo", "ttft_p99_ms=200",
                                      "--db", str(tmp_path / "t.duckdb")])  # fmt: skip
    assert result.exit_code == 2 and "has a [sweep] table" in result.output, result.output


def test_an_integer_setting_is_searched_over_integers_however_its_ends_are_written(tmp_path):
    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.run.tune import TuneRequest, plan_tune

    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    plan = plan_tune(get_plugin_manager(), TuneRequest(str(cfg), ["engine.args.max_num_seqs=1..64.0"], "ttft_p99_ms=200"))
    assert plan.tuner.axes[0].integer and all(isinstance(p[0], int) for p in plan.tuner.grid)
