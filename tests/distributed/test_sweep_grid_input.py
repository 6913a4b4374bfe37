"""Settings grids (issue 29 item 1, docs/tuning.md): the combinations a grid expands to, and every bad input — an
unknown key, an empty list, unequal lists under --zip, a value the config model refuses, too many runs without --yes —
one line, exit 2, before any engine starts (nothing is created: not even the database).

Fast: the command runs in-process (click's runner) and starts nothing."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sweep_helpers import sim_config

from infermatrix.cli import _add_builtin_commands, cli
from infermatrix.core.config import ConfigError
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.run.grid import MAX_RUNS_WITHOUT_YES, Grid, combinations, grid_from_flags, grid_from_table, parse_grid_flag, setting_text
from infermatrix.core.run.sweep_plan import SweepRequest, plan_sweep


def _invoke(*args: str):
    _add_builtin_commands()
    return CliRunner().invoke(cli, ["sweep", *args])


def test_values_are_read_as_set_reads_them():
    assert parse_grid_flag("engine.args.max_num_seqs=64,128") == ("engine.args.max_num_seqs", [64, 128])
    assert parse_grid_flag("engine.args.speculative_config={num_speculative_tokens=1},{num_speculative_tokens=2}")[1] == [
        {"num_speculative_tokens": 1}, {"num_speculative_tokens": 2}]
    assert parse_grid_flag("engine.env.VLLM_X=a,b")[1] == ["a", "b"]  # bare words are strings, as --set reads them
    assert parse_grid_flag("matrix.check_client=true,false")[1] == [True, False]


def test_cartesian_by_default_and_zip_pairs():
    grid = grid_from_flags(["a=1,2", "b=x,y,z"], zip_all=False)
    combos = combinations(grid)
    assert len(combos) == 6 and combos[0] == {"a": 1, "b": "x"} and combos[-1] == {"a": 2, "b": "z"}  # first key slowest
    paired = combinations(grid_from_flags(["a=1,2", "b=x,y"], zip_all=True))
    assert paired == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    # a [sweep] table: zip names the grid keys paired; the rest is Cartesian with the pairs
    table = grid_from_table({"grid": {"a": [1, 2], "b": ["x", "y"], "c": [True, False]}, "zip": ["a", "b"]}, "c.toml")
    assert combinations(table) == [{"a": 1, "b": "x", "c": True}, {"a": 1, "b": "x", "c": False},
                                   {"a": 2, "b": "y", "c": True}, {"a": 2, "b": "y", "c": False}]  # fmt: skip
    assert setting_text({"engine.args.max_num_seqs": 64, "x": {"k": 1}}) == 'engine.args.max_num_seqs=64, x={"k":1}'
    assert combinations(Grid()) == [{}]


@pytest.mark.parametrize("flags, message", [
    (["engine.args.max_num_seqs="], "empty list of values"),
    (["engine.args.max_num_seqs=1,,2"], "an empty value"),
    (["max_num_seqs"], "expected KEY=V1,V2"),
    (["a=1,2", "a=3"], "in the grid twice"),
    (["a=1,1"], "given twice"),
])  # fmt: skip
def test_bad_grid_flags(flags, message):
    with pytest.raises(ConfigError, match=message):
        combinations(grid_from_flags(flags, zip_all=False))


def test_the_planned_combinations_carry_their_setting_and_config(tmp_path):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    combos, name = plan_sweep(get_plugin_manager(), SweepRequest([str(cfg)], grid=["engine.args.max_num_seqs=2,16"]))
    assert [c.setting for c in combos] == [{"engine.args.max_num_seqs": "2"}, {"engine.args.max_num_seqs": "16"}]
    assert [c.cfg.engine.args.max_num_seqs for c in combos] == [2, 16] and name is None  # type: ignore[attr-defined]
    two = sim_config(tmp_path / "b.toml", "b", [1])
    both, _ = plan_sweep(get_plugin_manager(), SweepRequest([str(cfg), str(two)], grid=["engine.args.max_num_seqs=2,16"]))
    assert [c.setting["config"] for c in both] == ["a.toml", "a.toml", "b.toml", "b.toml"]  # the grid applies to each


def test_a_config_sweep_table_is_the_sweeps_not_the_runs(tmp_path):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    cfg.write_text(cfg.read_text() + '[sweep]\nname = "seqs"\ngrid = { "engine.args.max_num_seqs" = [4, 8] }\n')
    combos, name = plan_sweep(get_plugin_manager(), SweepRequest([str(cfg)], grid=["matrix.duration_s=1,2"]))
    assert name == "seqs" and len(combos) == 4
    assert combos[0].setting == {"engine.args.max_num_seqs": "4", "matrix.duration_s": "1"}
    assert "sweep" not in combos[0].cfg.model_dump()


@pytest.mark.parametrize("args, message", [
    (["--grid", "engine.args.max_num_seqs="], "empty list of values"),
    (["--grid", "engine.args.nope=1,2"], "engine.args.nope: unknown field"),
    (["--grid", "engine.args.max_num_seqs=0,2"], "engine.args.max_num_seqs=0: engine.args.max_num_seqs: Input should be greater than 0"),
    (["--grid", "engine.args.max_num_seqs=1,2", "--grid", "engine.args.block_size=16", "--zip"], "--zip: the paired lists differ in length"),
    (["--grid", "matrix.duration_s=1,2,3,4,5", "--grid", "matrix.seed=1,2,3,4"], f"more than {MAX_RUNS_WITHOUT_YES}): add --yes"),
    (["--zip"], "--zip: give the lists to pair with --grid"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2_before_anything_starts(tmp_path, args, message):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    db = tmp_path / "s.duckdb"
    result = _invoke(str(cfg), *args, "--db", str(db))
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not db.exists()  # nothing opened, nothing run


def test_run_refuses_a_config_with_a_sweep_table(tmp_path):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    cfg.write_text(cfg.read_text() + '[sweep]\ngrid = { "engine.args.max_num_seqs" = [4, 8] }\n')
    _add_builtin_commands()
    result = CliRunner().invoke(cli, ["run", str(cfg), "--db", str(tmp_path / "r.duckdb")])
    assert result.exit_code == 2 and "[sweep] makes a grid of runs: run it with `infermatrix sweep" in result.output, result.output
