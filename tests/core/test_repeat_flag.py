"""``run --repeat K`` and ``matrix.repeat`` (issue 30 item 2): the flag reaches the config, and a bad K is one line,
exit 2, before anything starts (no database is left behind)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from infermatrix.cli.run_cmd import run
from infermatrix.core.config import RunConfig


@pytest.mark.parametrize(("args", "line"), [
    (["--repeat", "0"], "error: --repeat: must be greater than 0 (got 0)"),
    (["--repeat", "two"], "error: --repeat: 'two' is not a whole number"),
    (["--set", "matrix.repeat=0"], "error: command line: matrix.repeat: Input should be greater than or equal to 1"),
    (["--resume", "abcd", "--repeat", "2"], "error: --repeat: not with --resume (the run's stored config is used; change a field with --set KEY=VALUE)"),
])  # fmt: skip
def test_a_bad_repeat_is_one_line_and_exit_2(tmp_path, args, line):
    db = tmp_path / "r.duckdb"
    result = CliRunner().invoke(run, [*args, "--db", str(db)] if "--resume" in args else ["--engine", "sim", *args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == line
    assert not db.exists()


def test_matrix_repeat_defaults_to_one():
    assert RunConfig.model_validate({"engine": {"kind": "sim"}}).matrix.repeat == 1
    assert RunConfig.model_validate({"engine": {"kind": "sim"}, "matrix": {"repeat": 3}}).matrix.repeat == 3
